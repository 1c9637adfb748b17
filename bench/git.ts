/**
 * git over smart HTTP against a real compiled `castor serve` (embedded store, one process):
 *
 * - `git clone` of a repository of 10,000 files made by 1,000 Hub commits (10 files each, in
 *   100 folders): the time, and the server's peak resident memory during the clone (its high
 *   water mark is reset just before, so the history's writing does not count);
 * - `git lfs pull` of a 256 MiB file stored through Xet (git-lfs's basic transfer, the file
 *   rebuilt by castor) against `hf download` of the same file (hf_xet, huggingface_hub 2.0.0),
 *   each from a fresh cache, paired rounds. Target: git lfs pull ≥ 0.8 × hf download. The pull
 *   is timed as its two steps, the transfer (`git lfs fetch`) and git-lfs's own checkout;
 * - `git push` of one commit of 1,000 small files.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { upload } from "../src/client/index.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { git as runGitOk, gitUrl } from "../test/helpers/git.js";
import { pythonVenv, PYTHON_VENVS, runChild, venvScript } from "../test/interop/hub-clients.js";
import { processStatusKiB } from "./support/proc-stats.js";
import { benchRow, deterministicRandomBytes, median, megabytesPerSecond, sized, type BenchRow } from "./lib.js";

const GROUP = "git";
const MiB = 1024 * 1024;
const COMMITS = sized(1000, 20);
const FILES_PER_COMMIT = 10;
const FOLDERS = sized(100, 5);
const LFS_BYTES = sized(256 * MiB, 4 * MiB);
const LFS_ROUNDS = sized(3, 1);
const PUSH_FILES = sized(1000, 20);
const LFS_RATIO_TARGET = 0.8;
const REPO = "bench/git";

export async function run(): Promise<BenchRow[]> {
  const work = await mkdtemp(join(tmpdir(), "castor-bench-git-"));
  const home = join(work, "home");
  await mkdir(home);
  const server = await startCastorServer({ compiled: true });
  try {
    const fixture = await hubFixture(server, { repoType: "model", repoName: REPO });
    const token = fixture.hubTokens.write;
    const url = gitUrl(server.url, REPO, token);
    const rows: BenchRow[] = [];
    await git(["lfs", "install", "--skip-repo"], work, home);

    // The history: 1,000 commits of 10 new files each, spread over 100 folders.
    for (let c = 0; c < COMMITS; c++) {
      const files = Array.from({ length: FILES_PER_COMMIT }, (_, i) => {
        const n = c * FILES_PER_COMMIT + i;
        return { path: `d${n % FOLDERS}/f${n}.txt`, content: `file ${n}\n${"x".repeat(n % 200)}\n` };
      });
      await commit(server, token, `commit ${c}`, files);
    }

    // Clone: time, and the server's peak RSS during it.
    const pid = server.child.pid;
    const rssBefore = await processStatusKiB(pid, "VmRSS");
    await resetPeakRss(pid);
    const cloneSeconds = await timed(() => git(["clone", "-q", "--no-checkout", url, join(work, "clone")], work, home));
    const peak = await processStatusKiB(pid, "VmHWM");
    rows.push(benchRow(GROUP, `git clone, ${COMMITS * FILES_PER_COMMIT} files in ${COMMITS} commits`, cloneSeconds, "s"));
    rows.push(benchRow(GROUP, "server peak RSS during the clone", peak / 1024, "MiB"));
    rows.push(benchRow(GROUP, "server RSS before the clone", rssBefore / 1024, "MiB"));

    // A 256 MiB file through Xet, committed; then git lfs pull and hf download of it, paired rounds.
    const content = deterministicRandomBytes(LFS_BYTES, 23);
    const sha256 = createHash("sha256").update(content).digest("hex");
    const local = join(work, "weights.bin");
    await writeFile(local, content);
    await upload({ endpoint: server.url, hubToken: token, repo: `model:${REPO}`, files: [local] });
    await commitOperations(server, token, "weights", [{ key: "lfsFile", value: { path: "weights.bin", algo: "sha256", oid: sha256, size: LFS_BYTES } }]);
    const hf = venvScript(await pythonVenv("hub-cli", PYTHON_VENVS["hub-cli"]), "hf");
    const lfsRates: number[] = [];
    const fetchRates: number[] = [];
    const checkoutSeconds: number[] = [];
    const hfRates: number[] = [];
    const ratios: number[] = [];
    const fetchRatios: number[] = [];
    for (let round = 0; round < LFS_ROUNDS; round++) {
      const clone = join(work, `lfs-${round}`);
      await git(["clone", "-q", url, clone], work, home, { GIT_LFS_SKIP_SMUDGE: "1" });
      // git lfs pull is git lfs fetch (the transfer, into .git/lfs) then git lfs checkout (the
      // client alone: the file copied into the working tree, the index refreshed through the
      // clean filter, which reads and hashes it again): timed apart, summed.
      const fetchSeconds = await timed(() => git(["lfs", "fetch", "--include", "weights.bin"], clone, home));
      const checkout = await timed(() => git(["lfs", "checkout", "weights.bin"], clone, home));
      const lfsSeconds = fetchSeconds + checkout;
      const hfHome = join(work, `hf-${round}`);
      const hfSeconds = await timed(async () => {
        const env = {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HF_ENDPOINT: server.url,
          HF_TOKEN: token,
          HF_HOME: join(hfHome, "home"),
          HF_XET_CACHE: join(hfHome, "xet"),
          HF_HUB_DISABLE_TELEMETRY: "1",
          HF_HUB_DISABLE_PROGRESS_BARS: "1",
        };
        const result = await runChild(hf, ["download", REPO, "weights.bin", "--local-dir", join(hfHome, "out")], { env, cwd: work });
        if (result.code !== 0) throw new Error(`hf download exited with ${result.code}:\n${result.stderr.slice(-2000)}`);
      });
      lfsRates.push(megabytesPerSecond(LFS_BYTES, lfsSeconds));
      fetchRates.push(megabytesPerSecond(LFS_BYTES, fetchSeconds));
      checkoutSeconds.push(checkout);
      hfRates.push(megabytesPerSecond(LFS_BYTES, hfSeconds));
      ratios.push(hfSeconds / lfsSeconds);
      fetchRatios.push(hfSeconds / fetchSeconds);
      await rm(clone, { recursive: true, force: true });
      await rm(hfHome, { recursive: true, force: true });
    }
    rows.push(benchRow(GROUP, `git lfs pull, ${LFS_BYTES / MiB} MiB (basic transfer, castor rebuilds from Xet)`, median(lfsRates), "MB/s"));
    rows.push(benchRow(GROUP, "  of which git lfs fetch (the transfer)", median(fetchRates), "MB/s"));
    rows.push(benchRow(GROUP, "  of which git lfs checkout (client only)", median(checkoutSeconds), "s"));
    rows.push(benchRow(GROUP, "hf download, same file (hf_xet)", median(hfRates), "MB/s"));
    rows.push(benchRow(GROUP, "git lfs pull / hf download (median of paired rounds)", median(ratios), "ratio", { target: { atLeast: LFS_RATIO_TARGET } }));
    rows.push(benchRow(GROUP, "git lfs fetch / hf download (the transfers alone)", median(fetchRatios), "ratio"));

    // Push of one commit of 1,000 small files.
    const pusher = join(work, "clone");
    await git(["checkout", "-q", "main"], pusher, home, { GIT_LFS_SKIP_SMUDGE: "1" });
    // The clone predates the weights commit.
    await git(["pull", "-q", "--ff-only"], pusher, home, { GIT_LFS_SKIP_SMUDGE: "1" });
    await mkdir(join(pusher, "pushed"));
    for (let i = 0; i < PUSH_FILES; i++) await writeFile(join(pusher, "pushed", `p${i}.txt`), `pushed ${i}\n`);
    await git(["add", "pushed"], pusher, home);
    await git(["commit", "-q", "-m", `${PUSH_FILES} files`], pusher, home);
    const pushSeconds = await timed(() => git(["push", "-q", "origin", "main"], pusher, home));
    rows.push(benchRow(GROUP, `git push, one commit of ${PUSH_FILES} small files`, pushSeconds, "s"));
    return rows;
  } finally {
    await server.stop();
    await rm(work, { recursive: true, force: true });
  }
}

/** Resets the process's peak RSS (VmHWM) to its current RSS (Linux: clear_refs 5). */
async function resetPeakRss(pid: number | undefined): Promise<void> {
  await writeFile(`/proc/${pid}/clear_refs`, "5");
}

async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return (performance.now() - started) / 1000;
}

/** git in `cwd`, with the bench's own HOME; throws with git's stderr when it fails. */
async function git(args: string[], cwd: string, home: string, env: Record<string, string> = {}): Promise<void> {
  await runGitOk(args, { cwd, home, env });
}

async function commit(server: ServerProcess, token: string, summary: string, files: { path: string; content: string }[]): Promise<void> {
  await commitOperations(
    server,
    token,
    summary,
    files.map((file) => ({ key: "file", value: { path: file.path, encoding: "base64", content: Buffer.from(file.content).toString("base64") } })),
  );
}

async function commitOperations(server: ServerProcess, token: string, summary: string, operations: unknown[]): Promise<void> {
  const body = `${[{ key: "header", value: { summary, description: "" } }, ...operations].map((line) => JSON.stringify(line)).join("\n")}\n`;
  const response = await fetch(`${server.url}/api/models/${REPO}/commit/main`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/x-ndjson" },
    body,
  });
  if (response.status !== 200) throw new Error(`commit answered ${response.status}: ${await response.text()}`);
}
