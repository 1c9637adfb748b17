/**
 * Runs hf_xet 1.6.0 (the venv of scripts/setup-interop.mjs) for the `clients` benchmark, timed
 * inside Python by hf_xet_timed.py, which wraps the interop tests' driver unchanged.
 *
 * Unlike the interop tests' `HfXetClient`, which is bound to a castor fixture and times
 * nothing, this runs against any server that has a token operation — castor or the do-nothing
 * CAS — and every run gets a fresh HF_HOME / HF_XET_CACHE, so nothing is served from the
 * client's own cache.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { logTail, runChild } from "../../test/interop/harness.js";

const TIMED_DRIVER = fileURLToPath(new URL("./hf_xet_timed.py", import.meta.url));
/** A 256 MiB transfer takes seconds; anything near this is a hang, not a measurement. */
const RUN_TIMEOUT_MS = 180_000;

/** Where hf_xet gets its tokens: a token operation and the hub token it accepts. */
export interface XetTokenSource {
  tokenUrl(access: "read" | "write"): string;
  hubToken(access: "read" | "write"): string;
}

export interface TimedRun<T> {
  files: T[];
  /** Wall time of the hf_xet call alone. */
  seconds: number;
}

export interface HfXetUpload {
  path: string;
  hash: string;
  size: number;
  sha256: string;
}

export class TimedHfXet {
  /** `python`: the venv interpreter (`interopPython()`); `scratch`: parent of the per-run homes. */
  constructor(
    private readonly python: string,
    private readonly scratch: string,
  ) {}

  /** `home`: an HF_HOME / HF_XET_CACHE folder kept between runs (its shard cache then persists); default a fresh one. */
  upload(source: XetTokenSource, paths: string[], home?: string): Promise<TimedRun<HfXetUpload>> {
    return this.run(source, "write", { op: "upload", paths, repoType: "model" }, home);
  }

  download(source: XetTokenSource, files: { hash: string; size: number; path: string }[]): Promise<TimedRun<string>> {
    return this.run(source, "read", { op: "download", files });
  }

  private async run<T>(source: XetTokenSource, access: "read" | "write", request: Record<string, unknown>, keptHome?: string): Promise<TimedRun<T>> {
    const tokenUrl = source.tokenUrl(access);
    const hubToken = source.hubToken(access);
    const answer = await fetch(tokenUrl, { headers: { authorization: `Bearer ${hubToken}` } });
    if (answer.status !== 200) throw new Error(`the token operation ${tokenUrl} answered ${answer.status}: ${await answer.text()}`);
    const token = (await answer.json()) as { accessToken: string; exp: number; casUrl: string };

    const home = keptHome ?? (await mkdtemp(join(this.scratch, "hf-xet-home-")));
    try {
      const cache = join(home, "xet-cache");
      const input = JSON.stringify({ ...request, casUrl: token.casUrl, accessToken: token.accessToken, exp: token.exp, tokenUrl, hubToken });
      const env = { ...process.env, HF_HOME: join(home, "hf-home"), HF_XET_CACHE: cache };
      const { code, stdout, stderr } = await runChild(this.python, [TIMED_DRIVER], input, env, RUN_TIMEOUT_MS);
      if (code !== 0) {
        throw new Error(
          `hf_xet ${String(request.op)} against ${token.casUrl} failed (exit ${code}):\n${stderr}\n--- hf_xet log (tail) ---\n${await logTail(join(cache, "logs"), 20)}`,
        );
      }
      return JSON.parse(stdout) as TimedRun<T>;
    } finally {
      if (keptHome === undefined) await rm(home, { recursive: true, force: true });
    }
  }
}
