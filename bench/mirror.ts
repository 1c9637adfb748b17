/**
 * castor as a pull-through mirror (`npm run bench -- mirror`), against a test upstream: a
 * second castor behind the proxy that answers as huggingface.co does (test/helpers/upstream-hub.ts),
 * both castors compiled, as users run them.
 *
 * - Cold pull of a 256 MiB Xet file through the mirror vs the same download straight from the
 *   upstream, for two clients: curl (a plain GET of `resolve`, which the mirror streams while it
 *   fetches the file; the upstream sends it reconstructed by its own server behind the Hub's
 *   redirect) and hf_xet (through the mirror's CAS, which answers the upstream's reconstruction at
 *   once and serves each range as it is stored; straight from the upstream's CAS). Goal: mirror ÷ upstream ≥ 0.8, and
 *   curl's first byte through the mirror within 1 s.
 * - Warm: the file, now held, downloaded from the mirror vs a file of a local repository of the
 *   same size on the same castor, with hf_xet and with curl. Goal ≥ 0.95.
 * - A second revision sharing 90 % of its chunks with the first (the file with a tenth of it
 *   rewritten, uploaded with the shard cache as users' clients upload): bytes the mirror fetched
 *   from the upstream ÷ the file's size. Goal ≤ 0.15.
 *
 * Every cold round uses files of its own (fresh random content), so nothing is held beforehand;
 * ratios are taken within a round, between transfers run one right after the other. Best and
 * median over the rounds are printed. The clients' copies go to /dev/null (curl) or RAM
 * (/dev/shm, hf_xet) where there is one.
 */
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CastorClient } from "../src/client/index.js";
import { interopPython } from "../test/interop/harness.js";
import { runCastor } from "../test/helpers/cli.js";
import { runChild } from "../test/interop/hub-clients.js";
import { startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { startTestUpstream, type TestUpstream } from "../test/helpers/upstream-hub.js";
import { benchRow, deterministicRandomBytes, megabytesPerSecond, median, sized, type BenchRow } from "./lib.js";
import { processThreadsCpuSeconds } from "./support/proc-stats.js";
import { TimedHfXet, type XetTokenSource } from "./support/hf-xet.js";

const GROUP = "mirror";
const FILE_BYTES = sized(256 * 1024 * 1024, 8 * 1024 * 1024);
const ROUNDS = sized(3, 1);
const COLD_RATIO_TARGET = 0.8;
const FIRST_BYTE_TARGET_SECONDS = 1;
const WARM_RATIO_TARGET = 0.95;
const SHARED_FETCH_TARGET = 0.15;

interface CurlTiming {
  firstByte: number;
  total: number;
}

export async function run(): Promise<BenchRow[]> {
  const scratch = await mkdtemp(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "castor-bench-mirror-"));
  let upstream: TestUpstream | undefined;
  let mirror: ServerProcess | undefined;
  try {
    upstream = await startTestUpstream({ compiled: true });
    mirror = await startCastorServer({
      compiled: true,
      discardOutputOnceReady: true,
      env: { CASTOR_UPSTREAM_URL: upstream.hubUrl, CASTOR_UPSTREAM_TOKEN: upstream.adminToken, CASTOR_HUB_RATE_LIMIT: "off" },
    });
    const admin = async (...args: string[]) => {
      const result = await runCastor(args, { env: mirror!.settings, timeoutMs: 120_000 });
      if (result.code !== 0) throw new Error(`castor ${args.join(" ")}: ${result.stderr}`);
      return result.stdout.trimEnd().split("\n").at(-1)!;
    };
    const mirrorToken = await admin("token", "create", "--user", "bench", "--all-repos", "--access", "write");
    const hfXet = new TimedHfXet(await interopPython(), scratch);
    const sources = {
      upstream: (repo: string, commit: string): XetTokenSource => ({
        tokenUrl: () => `${upstream!.hubUrl}/api/models/${repo}/xet-read-token/${commit}`,
        hubToken: () => upstream!.adminToken,
      }),
      mirror: (repo: string, commit: string): XetTokenSource => ({
        tokenUrl: () => `${mirror!.url}/api/models/${repo}/xet-read-token/${commit}`,
        hubToken: () => mirrorToken,
      }),
    };
    const curlGet = (url: string, token: string) => curlTiming(url, token);
    // A client has a cold file once it is verified; castor may still be storing it. The next
    // measurement starts once the mirror holds it, so it does not share the disk with that.
    let mirrored = 0;
    const settled = async () => {
      mirrored++;
      for (;;) {
        const response = await fetch(`${mirror!.url}/api/castor/mirror`, { headers: { authorization: `Bearer ${mirrorToken}` } });
        if (((await response.json()) as { files: number }).files >= mirrored) return;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };

    const cold = {
      curl: [] as number[],
      firstByte: [] as number[],
      hfXet: [] as number[],
      curlRates: [] as number[],
      hfXetRates: [] as number[],
      cpuDirect: [] as CpuSplit[],
      cpuMirror: [] as CpuSplit[],
    };
    let held: { repo: string; commit: string; path: string; hash: string; bytes: Buffer } | null = null;
    for (let round = 0; round < ROUNDS; round++) {
      // curl: straight from the upstream (the Hub's redirect to its CDN host), then through the mirror, cold.
      const viaCurl = await publish(upstream, `bench/curl-${round}`, Buffer.from(deterministicRandomBytes(FILE_BYTES, 1000 + round)));
      const pids = { upstream: upstream.castor.child.pid, mirror: mirror.child.pid };
      const { result: direct, cpu: directCpu } = await cpuDuring(pids, () =>
        curlGet(`${upstream!.hubUrl}/bench/curl-${round}/resolve/${viaCurl.commit}/model.bin`, upstream!.adminToken),
      );
      // Through the mirror, until it holds the file: the storing after the client's last byte counts too.
      const { result: viaMirror, cpu: mirrorCpu } = await cpuDuring(pids, async () => {
        const timing = await curlGet(`${mirror!.url}/bench/curl-${round}/resolve/${viaCurl.commit}/model.bin`, mirrorToken);
        await settled();
        return timing;
      });
      cold.cpuDirect.push(directCpu);
      cold.cpuMirror.push(mirrorCpu);
      cold.curl.push(direct.total / viaMirror.total);
      cold.firstByte.push(viaMirror.firstByte);
      cold.curlRates.push(megabytesPerSecond(FILE_BYTES, viaMirror.total));
      // hf_xet: straight from the upstream's CAS, then through the mirror's CAS, cold.
      const viaXet = await publish(upstream, `bench/xet-${round}`, Buffer.from(deterministicRandomBytes(FILE_BYTES, 2000 + round)));
      const file = [{ hash: viaXet.hash, size: FILE_BYTES, path: join(scratch, "out.bin") }];
      const xetDirect = await hfXet.download(sources.upstream(`bench/xet-${round}`, viaXet.commit), file);
      await rm(file[0].path, { force: true });
      const xetMirror = await hfXet.download(sources.mirror(`bench/xet-${round}`, viaXet.commit), file);
      await settled();
      await rm(file[0].path, { force: true });
      cold.hfXet.push(xetDirect.seconds / xetMirror.seconds);
      cold.hfXetRates.push(megabytesPerSecond(FILE_BYTES, xetMirror.seconds));
      held = { repo: `bench/xet-${round}`, commit: viaXet.commit, path: "model.bin", hash: viaXet.hash, bytes: viaXet.bytes };
    }

    // Warm: the file held now vs a local repository's file of the same size, on the same castor.
    const local = await publishLocally(mirror, mirrorToken, scratch, Buffer.from(deterministicRandomBytes(FILE_BYTES, 3000)));
    const warm = { hfXet: [] as number[], curl: [] as number[] };
    for (let round = 0; round < ROUNDS; round++) {
      const out = [{ path: join(scratch, "warm.bin"), size: FILE_BYTES }];
      const mirrored = await hfXet.download(sources.mirror(held!.repo, held!.commit), [{ ...out[0], hash: held!.hash }]);
      await rm(out[0].path, { force: true });
      const ownFile = await hfXet.download({ tokenUrl: () => `${mirror!.url}/api/models/local/weights/xet-read-token/main`, hubToken: () => mirrorToken }, [
        { ...out[0], hash: local.hash },
      ]);
      await rm(out[0].path, { force: true });
      warm.hfXet.push(ownFile.seconds / mirrored.seconds);
      const mirroredCurl = await curlGet(`${mirror.url}/${held!.repo}/resolve/${held!.commit}/model.bin`, mirrorToken);
      const ownCurl = await curlGet(`${mirror.url}/local/weights/resolve/main/model.bin`, mirrorToken);
      warm.curl.push(ownCurl.total / mirroredCurl.total);
    }

    // A second revision sharing 90 % of its chunks: only the rest is fetched.
    const tenth = Math.floor(FILE_BYTES / 10);
    const base = held!.bytes;
    const revised = Buffer.concat([base.subarray(0, 4 * tenth), Buffer.from(deterministicRandomBytes(tenth, 4000)), base.subarray(5 * tenth)]);
    const second = await publish(upstream, held!.repo, revised);
    const before = upstream.casBytes();
    const pulled = await curlGet(`${mirror.url}/${held!.repo}/resolve/${second.commit}/model.bin`, mirrorToken);
    const fetched = upstream.casBytes() - before;

    const best = (values: number[]) => Math.max(...values);
    const lowest = (values: number[]) => Math.min(...values);
    return [
      benchRow(GROUP, "cold pull, curl: mirror ÷ upstream", best(cold.curl), "ratio", { median: median(cold.curl), target: { atLeast: COLD_RATIO_TARGET } }),
      benchRow(GROUP, "cold pull, curl through the mirror", best(cold.curlRates), "MB/s", { median: median(cold.curlRates) }),
      benchRow(GROUP, "cold pull, curl: first byte through the mirror", lowest(cold.firstByte), "s", {
        median: median(cold.firstByte),
        target: { atMost: FIRST_BYTE_TARGET_SECONDS },
      }),
      cpuRow("cold pull, curl, CPU straight from the upstream", cold.cpuDirect),
      cpuRow("cold pull, curl, CPU through the mirror", cold.cpuMirror),
      benchRow(GROUP, "cold pull, hf_xet: mirror ÷ upstream", best(cold.hfXet), "ratio", {
        median: median(cold.hfXet),
        target: { atLeast: COLD_RATIO_TARGET },
      }),
      benchRow(GROUP, "cold pull, hf_xet through the mirror", best(cold.hfXetRates), "MB/s", { median: median(cold.hfXetRates) }),
      benchRow(GROUP, "warm, hf_xet: mirrored ÷ local file", best(warm.hfXet), "ratio", { median: median(warm.hfXet), target: { atLeast: WARM_RATIO_TARGET } }),
      benchRow(GROUP, "warm, curl: mirrored ÷ local file", best(warm.curl), "ratio", { median: median(warm.curl), target: { atLeast: WARM_RATIO_TARGET } }),
      benchRow(GROUP, "second revision sharing 90 %: fetched ÷ size", fetched / FILE_BYTES, "ratio", {
        target: { atMost: SHARED_FETCH_TARGET },
        note: `${fetched} bytes fetched for a ${FILE_BYTES}-byte file in ${pulled.total.toFixed(1)} s`,
      }),
    ];
  } finally {
    await mirror?.stop();
    await upstream?.stop();
    await rm(scratch, { recursive: true, force: true });
  }
}

/** CPU seconds spent by the upstream castor, the mirror, and this process, which runs the test upstream's proxy (every upstream byte passes it). */
interface CpuSplit {
  upstream: number;
  proxy: number;
  mirror: number;
}

/** `work`'s result and the CPU each process spent meanwhile: where a cold pull's time goes on one machine. */
async function cpuDuring<T>(pids: { upstream: number | undefined; mirror: number | undefined }, work: () => Promise<T>): Promise<{ result: T; cpu: CpuSplit }> {
  const read = () => ({ upstream: processThreadsCpuSeconds(pids.upstream) ?? 0, mirror: processThreadsCpuSeconds(pids.mirror) ?? 0 });
  const before = read();
  const ownBefore = process.cpuUsage();
  const result = await work();
  const own = process.cpuUsage(ownBefore);
  const after = read();
  return { result, cpu: { upstream: after.upstream - before.upstream, proxy: (own.user + own.system) / 1e6, mirror: after.mirror - before.mirror } };
}

/** A row of the median total CPU per pull, its split in the note. */
function cpuRow(metric: string, splits: CpuSplit[]): BenchRow {
  const part = (key: keyof CpuSplit) => median(splits.map((split) => split[key]));
  const total = median(splits.map((split) => split.upstream + split.proxy + split.mirror));
  return benchRow(GROUP, metric, total, "CPU s", {
    note: `medians: upstream castor ${part("upstream").toFixed(2)} s, test proxy ${part("proxy").toFixed(2)} s, mirror ${part("mirror").toFixed(2)} s; the machine has 2 cores`,
  });
}

/** Commits `bytes` as model.bin of `repo` on the upstream (created public when new): the commit and Xet hash. */
async function publish(upstream: TestUpstream, repo: string, bytes: Buffer): Promise<{ commit: string; hash: string; bytes: Buffer }> {
  const ref = `model:${repo}`;
  const info = await fetch(`${upstream.castor.url}/api/models/${repo}`, { headers: { authorization: `Bearer ${upstream.adminToken}` } });
  await info.body?.cancel();
  if (info.status === 404) await upstream.createRepo(ref);
  const commit = await upstream.commit(ref, [{ path: "model.bin", bytes }]);
  const tree = (await (
    await fetch(`${upstream.castor.url}/api/models/${repo}/tree/${commit}`, { headers: { authorization: `Bearer ${upstream.adminToken}` } })
  ).json()) as { path: string; xetHash: string }[];
  return { commit, hash: tree.find((entry) => entry.path === "model.bin")!.xetHash, bytes };
}

/** Commits `bytes` as model.bin of the local repository local/weights on the mirror castor. */
async function publishLocally(mirror: ServerProcess, token: string, scratch: string, bytes: Buffer): Promise<{ hash: string }> {
  const created = await runCastor(["repo", "create", "model", "local/weights"], { env: mirror.settings });
  if (created.code !== 0) throw new Error(created.stderr);
  const path = join(scratch, "model.bin");
  await writeFile(path, bytes);
  const result = await new CastorClient({ endpoint: mirror.url, hubToken: token, repo: "model:local/weights" }).uploadToRepo([path]);
  await rm(path, { force: true });
  return { hash: result.files[0].fileHash };
}

/** curl's time to the first byte and in all, in seconds, for a whole-file GET (redirects followed). */
async function curlTiming(url: string, token: string): Promise<CurlTiming> {
  const args = ["-sS", "-f", "-L", "-o", "/dev/null", "-H", `Authorization: Bearer ${token}`, "-w", "%{time_starttransfer} %{time_total}", url];
  const { code, stdout, stderr } = await runChild("curl", args, { env: process.env });
  if (code !== 0) throw new Error(`curl ${url.replace(/\?.*/, "")} failed (exit ${code}): ${stderr}`);
  const [firstByte, total] = stdout.trim().split(" ").map(Number);
  return { firstByte, total };
}
