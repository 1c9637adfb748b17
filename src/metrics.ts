/**
 * castor's Prometheus metrics (prom-client). Each app owns one `CastorMetrics` and so one
 * `Registry`, never prom-client's global one: several apps in one process (tests, a bench)
 * keep separate counts and never register a metric name twice.
 *
 * Every label is bounded: the route is the router's pattern (`/v1/xorbs/:prefix/:hash`),
 * `unmatched` when no route matched; never a raw URL, hash or repository name.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { MaintenanceRun } from "./metadata/gc.js";
import type { StatsSample } from "./metadata/store.js";

/** Route label of requests no route matched (404s of unknown paths). */
export const UNMATCHED_ROUTE = "unmatched";

/** Methods counted by name; any other (the parser accepts a few dozen) is `other`. */
const KNOWN_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]);

/** Seconds; up to two minutes, since a large upload or download is one request. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export interface RequestObservation {
  method: string;
  /** The route pattern, or undefined when none matched. */
  route: string | undefined;
  status: number;
  seconds: number;
  /** Content-Length of the request, when it carries one. */
  requestBytes?: number;
  /** Body bytes of the response written to the connection (none for HEAD, 204, 304). */
  responseBytes?: number;
}

/**
 * Why castor refused a client or cut it off, one reason per limit of src/http
 * (`castor_refusals_total{reason}`): the header and body timeouts, an answer left unread, the
 * connection and concurrent-upload caps, the budget of shard registrations, and the hub's request
 * and failed-authentication limits.
 */
export const REFUSAL_REASONS = [
  "header_timeout",
  "body_timeout",
  "body_too_slow",
  "send_timeout",
  "connection_limit",
  "upload_concurrency",
  "shard_budget",
  "hub_rate_limit",
  "auth_failure_limit",
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];
/** Told of every refusal where it happens (the limits take it as an option; absent: nobody is told). */
export type OnRefusal = (reason: RefusalReason) => void;

export type XorbIngestOutcome = "stored" | "already_stored" | "already_recorded";
export type TokenRequestOutcome = "granted" | "denied";

/** Metrics in the Prometheus text format, with its content type. */
export interface MetricsExposition {
  contentType: string;
  body: string;
}

/** What `/metrics` counts of the mirror of an upstream hub (src/mirror). */
export interface MirrorCounters {
  /** A request to the upstream hub ended: `ok`, `not_found`, `gated`, `rate_limited`, `timeout`, `unreachable`, … */
  upstreamRequest(outcome: string): void;
  /** Bytes of file content fetched from the upstream. */
  fetched(bytes: number): void;
  /** Bytes of mirrored files served to clients (held or streamed while fetched). */
  served(bytes: number): void;
  /** A file read: `hit` when castor held it, `miss` when it had to be fetched. */
  read(result: "hit" | "miss"): void;
}

/**
 * `GET /metrics` when several processes serve one port (`castor serve --workers N`): a scrape
 * reaches one of them, and must see the counts of all. `attach` hands over this process's
 * metrics, for the others' scrapes; `expose` answers a scrape with everyone's.
 */
export interface SharedMetrics {
  attach(metrics: CastorMetrics): void;
  expose(): Promise<MetricsExposition>;
}

export class CastorMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"method" | "route" | "status">;
  private readonly durations: Histogram<"method" | "route" | "status_class">;
  private readonly requestBytes: Counter<"method" | "route">;
  private readonly responseBytes: Counter<"method" | "route">;
  private readonly xorbIngests: Counter<"outcome">;
  private readonly xorbIngestSeconds: Histogram<"outcome">;
  private readonly shardRegistrationSeconds: Histogram<"outcome">;
  private readonly reconstructionTerms: Histogram<"version">;
  private readonly shardRegistrations: Counter<"outcome">;
  private readonly dedupQueries: Counter<"result">;
  private readonly tokenRequests: Counter<"outcome">;
  private readonly refusals: Counter<"reason">;
  private readonly mirrorUpstreamRequests: Counter<"outcome">;
  private readonly mirrorFetchedBytes: Counter;
  private readonly mirrorServedBytes: Counter;
  private readonly mirrorReads: Counter<"result">;
  /** Where the last `castor gc` and `castor fsck` runs are read from at each scrape (null: not shown). */
  private maintenanceRuns: (() => Promise<MaintenanceRun[]>) | null = null;
  /** Where the latest storage statistics sample is read from at each scrape (null: not shown). */
  private latestStorageSample: (() => Promise<StatsSample | null>) | null = null;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: "castor_http_requests_total",
      help: "HTTP requests answered, by method, route pattern and status code",
      labelNames: ["method", "route", "status"],
      registers,
    });
    this.durations = new Histogram({
      name: "castor_http_request_duration_seconds",
      help: "Time from a request's arrival to the end of its response, by method, route pattern and status class (2xx…5xx)",
      labelNames: ["method", "route", "status_class"],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.requestBytes = new Counter({
      name: "castor_http_request_bytes_total",
      help: "Request body bytes announced by Content-Length, by method and route pattern (bodies without one are not counted)",
      labelNames: ["method", "route"],
      registers,
    });
    this.responseBytes = new Counter({
      name: "castor_http_response_bytes_total",
      help: "Response body bytes written to the connection, by method and route pattern (HEAD answers send none, whatever their Content-Length)",
      labelNames: ["method", "route"],
      registers,
    });
    this.xorbIngests = new Counter({
      name: "castor_xorb_ingests_total",
      help: "Xorb uploads accepted, by outcome: stored, already_stored (the blob existed), already_recorded (nothing to store)",
      labelNames: ["outcome"],
      registers,
    });
    this.shardRegistrations = new Counter({
      name: "castor_shard_registrations_total",
      help: "Shard uploads registered, by outcome: registered, or already_registered (an identical shard was registered before)",
      labelNames: ["outcome"],
      registers,
    });
    this.dedupQueries = new Counter({
      name: "castor_dedup_queries_total",
      help: "Global-deduplication queries, by result: hit (a shard answered) or miss",
      labelNames: ["result"],
      registers,
    });
    this.tokenRequests = new Counter({
      name: "castor_token_requests_total",
      help: "Hub token operations (CAS token requests) decided, by outcome: granted or denied",
      labelNames: ["outcome"],
      registers,
    });
    this.mirrorUpstreamRequests = new Counter({
      name: "castor_mirror_upstream_requests_total",
      help: "Requests of the mirror to the upstream hub, by outcome: ok, not_found, gated, forbidden, unauthorized, rate_limited, timeout, unreachable, bad_answer",
      labelNames: ["outcome"],
      registers,
    });
    this.mirrorFetchedBytes = new Counter({
      name: "castor_mirror_upstream_bytes_total",
      help: "File content bytes the mirror fetched from the upstream hub (xorb ranges and files)",
      registers,
    });
    this.mirrorServedBytes = new Counter({
      name: "castor_mirror_served_bytes_total",
      help: "Bytes of mirrored files served to clients over HTTP (held, or streamed while fetched)",
      registers,
    });
    this.mirrorReads = new Counter({
      name: "castor_mirror_reads_total",
      help: "Reads of mirrored files, by result: hit (castor held the file) or miss (it was fetched from the upstream)",
      labelNames: ["result"],
      registers,
    });
    this.refusals = new Counter({
      name: "castor_refusals_total",
      help: "Clients refused or cut off by a limit, by reason: header_timeout, body_timeout, body_too_slow, send_timeout (408s and closed connections), connection_limit (closed on arrival), upload_concurrency (503), hub_rate_limit, auth_failure_limit (429)",
      labelNames: ["reason"],
      registers,
    });
    // Every reason shown from the start at 0: a limit that has never refused is visible as such,
    // and a rate over the first refusal has a sample before it to start from.
    for (const reason of REFUSAL_REASONS) this.refusals.inc({ reason }, 0);
    this.xorbIngestSeconds = new Histogram({
      name: "castor_xorb_ingest_seconds",
      help: "Time of a xorb upload from its first body byte to its record: receiving, validating (every chunk decoded and hashed) and storing, by outcome",
      labelNames: ["outcome"],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.shardRegistrationSeconds = new Histogram({
      name: "castor_shard_registration_seconds",
      help: "Time of a shard upload's validation and registration, by outcome (registered or already_registered)",
      labelNames: ["outcome"],
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.reconstructionTerms = new Histogram({
      name: "castor_reconstruction_terms",
      help: "Terms per reconstruction answer, by answer version (v1, v2)",
      labelNames: ["version"],
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 20000],
      registers,
    });
    // The latest storage statistics sample (hub/stats.ts), read from the metadata store at each
    // scrape (one row): never computed per scrape, a walk of every repository is far too slow for
    // that. The server keeps today's sample current (hub/stats-sampler.ts), and every node and
    // worker reads the same row, so workers' values are not added up but one is shown.
    const latestSample = async (): Promise<StatsSample | null> => (await this.latestStorageSample?.()) ?? null;
    const storageGauge = (name: string, help: string, value: (sample: StatsSample) => number | null) =>
      new Gauge({
        name,
        help,
        registers,
        aggregator: "first",
        async collect() {
          const sample = await latestSample();
          const measured = sample === null ? null : value(sample);
          if (measured === null) this.reset();
          else this.set(measured);
        },
      });
    storageGauge(
      "castor_storage_logical_bytes",
      "Sum of the sizes of the live files (at branch and tag heads) of all repositories, at the latest storage sample",
      (sample) => sample.logicalBytes,
    );
    storageGauge(
      "castor_storage_unique_bytes",
      "Bytes of the distinct content the live files need, before compression, at the latest storage sample",
      (sample) => sample.uniqueBytes,
    );
    storageGauge(
      "castor_storage_stored_bytes",
      "Bytes of the distinct xorbs and inline blobs the live files need, each counted once, at the latest storage sample",
      (sample) => sample.storedBytes,
    );
    storageGauge(
      "castor_storage_recorded_xorb_bytes",
      "Bytes of every recorded xorb, referenced by a live file or not, at the latest storage sample",
      (sample) => sample.recordedXorbBytes,
    );
    storageGauge(
      "castor_storage_sample_timestamp_seconds",
      "When the latest storage sample was taken, Unix time (0: none yet)",
      (sample) => sample.takenAt.getTime() / 1000,
    );
    // Read from the metadata store at each scrape (two rows): gc and fsck run as commands, on
    // any machine, and every node shows their last results. Every worker reads the same rows,
    // so workers' values are not added up but one is shown.
    const lastRuns = async (): Promise<MaintenanceRun[]> => (await this.maintenanceRuns?.()) ?? [];
    new Gauge({
      name: "castor_maintenance_last_run_timestamp_seconds",
      help: "When the last castor gc or castor fsck finished, Unix time, by command",
      labelNames: ["command"],
      registers,
      aggregator: "first",
      async collect() {
        this.reset();
        for (const run of await lastRuns()) this.set({ command: run.kind }, run.finishedAt.getTime() / 1000);
      },
    });
    new Gauge({
      name: "castor_maintenance_last_run_total",
      help: "Totals of the last castor gc (objects and bytes removed per kind) and castor fsck (problems, objects checked), by command and total",
      labelNames: ["command", "total"],
      registers,
      aggregator: "first",
      async collect() {
        this.reset();
        for (const run of await lastRuns()) for (const [total, value] of Object.entries(run.totals)) this.set({ command: run.kind, total }, value);
      },
    });
  }

  /** Shows the last maintenance runs `read` returns (the metadata store's). */
  watchMaintenance(read: () => Promise<MaintenanceRun[]>): void {
    this.maintenanceRuns = read;
  }

  /** Shows the totals of the storage sample `read` returns (the metadata store's latest). */
  watchStorageSamples(read: () => Promise<StatsSample | null>): void {
    this.latestStorageSample = read;
  }

  observeRequest(o: RequestObservation): void {
    const method = KNOWN_METHODS.has(o.method) ? o.method : "other";
    const route = o.route ?? UNMATCHED_ROUTE;
    this.requests.inc({ method, route, status: String(o.status) });
    this.durations.observe({ method, route, status_class: `${Math.floor(o.status / 100)}xx` }, o.seconds);
    if (o.requestBytes !== undefined && o.requestBytes > 0) this.requestBytes.inc({ method, route }, o.requestBytes);
    if (o.responseBytes !== undefined && o.responseBytes > 0) this.responseBytes.inc({ method, route }, o.responseBytes);
  }

  xorbIngested(outcome: XorbIngestOutcome, seconds: number): void {
    this.xorbIngests.inc({ outcome });
    this.xorbIngestSeconds.observe({ outcome }, seconds);
  }

  shardRegistered(inserted: boolean, seconds: number): void {
    const outcome = inserted ? "registered" : "already_registered";
    this.shardRegistrations.inc({ outcome });
    this.shardRegistrationSeconds.observe({ outcome }, seconds);
  }

  reconstructionAnswered(version: 1 | 2, terms: number): void {
    this.reconstructionTerms.observe({ version: `v${version}` }, terms);
  }

  dedupQueried(hit: boolean): void {
    this.dedupQueries.inc({ result: hit ? "hit" : "miss" });
  }

  tokenRequestDecided(outcome: TokenRequestOutcome): void {
    this.tokenRequests.inc({ outcome });
  }

  refused(reason: RefusalReason): void {
    this.refusals.inc({ reason });
  }

  /** Where the mirror of an upstream hub reports (its `countInto`). */
  mirrorCounters(): MirrorCounters {
    return {
      upstreamRequest: (outcome) => this.mirrorUpstreamRequests.inc({ outcome }),
      fetched: (bytes) => this.mirrorFetchedBytes.inc(bytes),
      served: (bytes) => this.mirrorServedBytes.inc(bytes),
      read: (result) => this.mirrorReads.inc({ result }),
    };
  }

  /** The exposition text and its content type (Prometheus text format 0.0.4). */
  async expose(): Promise<MetricsExposition> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
