/**
 * A load generator light enough to leave the cores to the server it measures (the workers
 * group runs it on the same 2 cores as `castor serve --workers 2`).
 *
 * - Requests are bytes built before the run (`prepareRequest`: request line, headers, body
 *   pieces), written as they are to raw `node:net` keep-alive connections: no request objects,
 *   no header maps, no URL parsing per request. Body pieces are shared buffers handed to the
 *   socket as they are, never copied.
 * - Answers are framed, not parsed: the status line and the Content-Length (or the chunk sizes
 *   of a chunked body) are read, every other byte is counted and dropped where it arrived.
 *   Only a request that names the answer it expects (a small JSON) keeps its body to compare.
 * - One request in flight per connection, as HTTP clients do (hf_xet, hf.js and Node's own
 *   agents never pipeline); concurrency is the number of connections. Pipelining was tried:
 *   4 connections × 4 requests cut castor's CPU per V2 reconstruction from ~120 to ~70 µs
 *   (fewer reads and wake-ups) and the generator's only from ~45 to ~30 µs, so it would
 *   measure a server no real client sees, with the generator a larger share of it. The connections are
 *   opened before the clock starts, so a cluster primary has already handed each to a worker.
 *
 * What it costs shows in `generatorCpuSeconds` (this process's CPU over the run), so a result
 * says how much of the machine the generator itself took.
 */
import { connect, type Socket } from "node:net";

export interface PreparedRequest {
  /** Request line and headers, through the blank line that ends them. */
  readonly head: Buffer;
  /** The body, in pieces written one after another (may be empty). */
  readonly body: readonly Uint8Array[];
  readonly bodyBytes: number;
  /** When given, the answer's body must be exactly this (kept and compared: small answers only). */
  readonly expectedAnswer?: string;
}

/** A request's bytes, with Host, Content-Length (when there is a body) and `headers`. */
export function prepareRequest(
  method: string,
  target: string,
  host: string,
  headers: Readonly<Record<string, string>>,
  body: readonly Uint8Array[] = [],
  expectedAnswer?: string,
): PreparedRequest {
  const bodyBytes = body.reduce((sum, piece) => sum + piece.length, 0);
  const lines = [`${method} ${target} HTTP/1.1`, `Host: ${host}`, ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
  if (bodyBytes > 0 || method === "POST" || method === "PUT") lines.push(`Content-Length: ${bodyBytes}`);
  return { head: Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"), body, bodyBytes, ...(expectedAnswer === undefined ? {} : { expectedAnswer }) };
}

export interface LightLoadOptions {
  readonly port: number;
  readonly host?: string;
  readonly connections: number;
  /** The status every answer must have (200, or 206 for ranges). */
  readonly expectedStatus: number;
  /** The request to send as number `sequence`: picks from requests built beforehand. */
  readonly nextRequest: (sequence: number) => PreparedRequest;
  /** No request is sent after this many seconds (those in flight are still answered)… */
  readonly seconds?: number;
  /** …or once this many have been sent, whichever comes first. */
  readonly requests?: number;
  /**
   * When given, each answer's latency in milliseconds (its request written → its last byte
   * read) is pushed here, in the order the answers arrive.
   */
  readonly latenciesMs?: number[];
}

export interface LightLoadResult {
  readonly responses: number;
  readonly requestBodyBytes: number;
  readonly responseBodyBytes: number;
  /** From the first request written to the last answer read. */
  readonly seconds: number;
  /** This process's CPU (user + system) over the same span. */
  readonly generatorCpuSeconds: number;
}

/** Runs the load until the time or the request budget is spent and every answer is in. */
export async function runLightLoad(options: LightLoadOptions): Promise<LightLoadResult> {
  const { port, host = "127.0.0.1", connections, expectedStatus, nextRequest } = options;
  if (options.seconds === undefined && options.requests === undefined) throw new RangeError("runLightLoad needs seconds or requests");
  const maxRequests = options.requests ?? Number.POSITIVE_INFINITY;
  const opened = await Promise.all(Array.from({ length: connections }, () => openConnection(port, host)));
  const sockets = opened.map((connection) => connection.socket);
  return new Promise<LightLoadResult>((resolve, reject) => {
    let sent = 0;
    let responses = 0;
    let requestBodyBytes = 0;
    let responseBodyBytes = 0;
    let lanesLeft = connections;
    let settled = false;
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    const deadline = options.seconds === undefined ? Number.POSITIVE_INFINITY : started + options.seconds * 1000;

    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      for (const socket of sockets) socket.destroy();
      reject(error);
    };
    const laneDone = () => {
      if (--lanesLeft > 0 || settled) return;
      const seconds = (performance.now() - started) / 1000;
      const cpu = process.cpuUsage(cpuBefore);
      settled = true;
      for (const socket of sockets) socket.destroy();
      resolve({ responses, requestBodyBytes, responseBodyBytes, seconds, generatorCpuSeconds: (cpu.user + cpu.system) / 1e6 });
    };

    for (const connection of opened) {
      const { socket } = connection;
      /** The request sent and not yet answered (an array, so an answer too many is caught). */
      const inFlight: PreparedRequest[] = [];
      /** When each request in flight was written (only with `latenciesMs`). */
      const writtenAt: number[] = [];
      let answeredInThisRead = 0;
      let laneFinished = false;
      /** Sends up to `count` requests in one writev (head and body pieces); finishes the lane once nothing is left in flight. */
      const send = (count: number) => {
        socket.cork();
        for (let i = 0; i < count && sent < maxRequests && performance.now() < deadline; i++) {
          const request = nextRequest(sent++);
          inFlight.push(request);
          if (options.latenciesMs !== undefined) writtenAt.push(performance.now());
          socket.write(request.head);
          for (const piece of request.body) socket.write(piece);
        }
        socket.uncork();
        if (inFlight.length === 0 && !laneFinished) {
          laneFinished = true;
          laneDone();
        }
      };
      const reader = new AnswerReader(
        (answer) => {
          const request = inFlight.shift();
          if (request === undefined) throw new Error("an answer arrived with no request in flight");
          if (answer.status !== expectedStatus) {
            throw new Error(`${requestLine(request)} answered ${answer.status}, not ${expectedStatus}: ${answer.keptBody ?? ""}`);
          }
          if (request.expectedAnswer !== undefined && answer.keptBody !== request.expectedAnswer) {
            throw new Error(`${requestLine(request)} answered ${answer.keptBody}, not ${request.expectedAnswer}`);
          }
          if (options.latenciesMs !== undefined) options.latenciesMs.push(performance.now() - writtenAt.shift()!);
          responses++;
          requestBodyBytes += request.bodyBytes;
          responseBodyBytes += answer.bodyBytes;
          answeredInThisRead++;
        },
        // A body is kept only when it will be compared: the expected answer (or an error's text).
        () => inFlight[0]?.expectedAnswer !== undefined,
      );
      connection.onData = (data) => {
        try {
          reader.read(data);
        } catch (error) {
          return fail(error as Error);
        }
        // The answer read is replaced by a new request.
        if (answeredInThisRead > 0 && !settled) {
          const count = answeredInThisRead;
          answeredInThisRead = 0;
          send(count);
        }
      };
      socket.once("error", (error) => fail(error));
      socket.once("close", () => {
        if (inFlight.length > 0) fail(new Error(`the server closed a connection with ${requestLine(inFlight[0])} in flight`));
      });
      send(1);
    }
  });
}

function requestLine(request: PreparedRequest): string {
  const end = request.head.indexOf("\r\n");
  return request.head.toString("latin1", 0, Math.min(end, 120));
}

/** Bytes read per read(2) on a connection: a 1 MiB range arrives in a handful of reads. */
const READ_BUFFER_BYTES = 256 * 1024;

interface Connection {
  readonly socket: Socket;
  /** Gets what each read brought, in the connection's one read buffer (valid until it returns). */
  onData: (data: Buffer) => void;
}

/**
 * A connection reading into one buffer of its own (`onread`), reused for every read: no
 * buffer allocated per read, and fewer, larger reads than the default 64 KiB.
 */
function openConnection(port: number, host: string): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const readBuffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
    const connection: Connection = {
      socket: connect({
        port,
        host,
        noDelay: true,
        onread: {
          buffer: readBuffer,
          callback: (bytes) => {
            connection.onData(readBuffer.subarray(0, bytes));
            return true; // keep reading
          },
        },
      }),
      onData: () => undefined,
    };
    connection.socket.once("connect", () => {
      connection.socket.off("error", reject);
      resolve(connection);
    });
    connection.socket.once("error", reject);
  });
}

export interface Answer {
  readonly status: number;
  readonly bodyBytes: number;
  /** The body as latin1 text: kept when asked for, and always for an answer that is not 2xx. */
  readonly keptBody: string | null;
}

const CRLF = Buffer.from("\r\n");
const HEAD_END = Buffer.from("\r\n\r\n");
/** Error bodies are kept for the message, up to this much. */
const ERROR_TEXT_BYTES = 500;

/** Where in an answer the reader is: the head, a body of known length, or a chunked body's parts. */
type ReadState = "head" | "length-body" | "chunk-size" | "chunk-data" | "chunk-data-end" | "trailer";

/**
 * Frames HTTP/1.1 answers on one connection: finds each head's end, reads the status and how
 * the body is delimited (Content-Length, or chunked), then counts body bytes without copying
 * them. Calls `onAnswer` once per complete answer.
 */
export class AnswerReader {
  private state: ReadState = "head";
  /** The start of a head or a chunk-size line that the last packet cut off. */
  private carry: Buffer | null = null;
  private status = 0;
  private left = 0;
  private bodyBytes = 0;
  private kept: Buffer[] | null = null;
  /** Whether `kept` is the whole body (asked for), or an error's first bytes. */
  private keptWhole = false;

  /**
   * `onAnswer` hears each complete answer (what it throws, `read` throws); `keepsBody` says,
   * as an answer begins, whether its body is to be kept (for the caller to compare).
   */
  constructor(
    private readonly onAnswer: (answer: Answer) => void,
    private readonly keepsBody: () => boolean = () => false,
  ) {}

  read(packet: Buffer): void {
    let data = packet;
    let offset = 0;
    while (offset < data.length) {
      if (this.state === "length-body" || this.state === "chunk-data" || this.state === "chunk-data-end") {
        const take = Math.min(this.left, data.length - offset);
        if (this.state !== "chunk-data-end") {
          this.bodyBytes += take;
          // Copied: the connection reads every packet into the same buffer.
          if (this.kept !== null) this.kept.push(Buffer.from(data.subarray(offset, offset + take)));
        }
        this.left -= take;
        offset += take;
        if (this.left > 0) continue;
        if (this.state === "length-body") this.finish();
        else if (this.state === "chunk-data") this.expect("chunk-data-end", 2);
        else this.state = "chunk-size";
        continue;
      }
      // Line-delimited states: the head (ends with an empty line), a chunk size, the trailer.
      if (this.carry !== null) {
        data = Buffer.concat([this.carry, data.subarray(offset)]);
        offset = 0;
        this.carry = null;
      }
      const delimiter = this.state === "head" ? HEAD_END : CRLF;
      const end = data.indexOf(delimiter, offset);
      if (end < 0) {
        this.carry = Buffer.from(data.subarray(offset));
        return;
      }
      if (this.state === "head") this.beginAnswer(data.toString("latin1", offset, end));
      else if (this.state === "chunk-size") {
        const size = Number.parseInt(data.toString("latin1", offset, end).split(";")[0], 16);
        if (!Number.isInteger(size) || size < 0) throw new Error(`bad chunk size line: ${data.toString("latin1", offset, Math.min(end, offset + 40))}`);
        if (size === 0) this.state = "trailer";
        else this.expect("chunk-data", size);
      } else if (end === offset) this.finish(); // the empty line after the last chunk (and any trailers)
      offset = end + delimiter.length;
    }
  }

  private beginAnswer(head: string): void {
    if (!head.startsWith("HTTP/1.1 ")) throw new Error(`not an HTTP/1.1 answer: ${head.slice(0, 60)}`);
    this.status = Number(head.slice(9, 12));
    this.bodyBytes = 0;
    this.keptWhole = this.keepsBody();
    this.kept = this.keptWhole || this.status < 200 || this.status > 299 ? [] : null;
    const length = /\r\ncontent-length: *(\d+)/i.exec(head);
    if (length !== null) {
      this.expect("length-body", Number(length[1]));
      if (this.left === 0) this.finish();
    } else if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
      this.state = "chunk-size";
    } else {
      // Anything else would end at the connection's close, which a keep-alive load cannot use.
      throw new Error(`an answer without Content-Length or chunked encoding: ${head.slice(0, 200)}`);
    }
  }

  private expect(state: ReadState, bytes: number): void {
    this.state = state;
    this.left = bytes;
  }

  private finish(): void {
    const keptBody = this.kept === null ? null : Buffer.concat(this.kept).toString("latin1", 0, this.keptWhole ? undefined : ERROR_TEXT_BYTES);
    this.kept = null;
    this.state = "head";
    this.onAnswer({ status: this.status, bodyBytes: this.bodyBytes, keptBody });
  }
}
