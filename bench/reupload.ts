/**
 * Bytes sent when a file goes up again (issue 19): the re-upload of an unchanged file, and of a
 * copy with 1 MiB rewritten in the middle, each after the original was uploaded to the same
 * server — castor's client with and without its shard cache (shard-cache.ts), hf_xet 1.6.0
 * with its cache kept between the uploads (one HF_XET_CACHE) and without (a fresh one each).
 *
 * Each setup gets a castor server of its own. "Sent" is what the server received: the
 * request-body bytes of xorb and shard uploads in its `castor_http_request_bytes_total`
 * (Content-Length of every POST to /v1/xorbs, /v1/shards, /v2/shards, /shards), so every
 * client is measured alike. Targets (castor's client with its cache): unchanged < 1 %,
 * edited < 5 % of the file.
 *
 * The file is 256 MiB; CASTOR_BENCH_REUPLOAD_MIB sets another size (the group uploads it 12
 * times, about 2 minutes at 256 MiB on the 2-core bench machine).
 */
import { existsSync } from "node:fs";
import { copyFile, mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CastorClient } from "../src/client/index.js";
import { REPO, interopPython, startCastorFixture, type CastorFixture } from "../test/interop/harness.js";
import { benchRow, sized, type BenchRow } from "./lib.js";
import { TimedHfXet } from "./support/hf-xet.js";
import { writeRandomFile } from "./support/random-file.js";

const GROUP = "reupload";
const MiB = 1024 * 1024;
const FILE_BYTES = Number(process.env.CASTOR_BENCH_REUPLOAD_MIB ?? sized(256, 16)) * MiB;
const EDIT_BYTES = MiB;
const SEED = 919;

type Setup = "castor client, cache" | "castor client, no cache" | "hf_xet, cache kept" | "hf_xet, fresh cache";
const SETUPS: readonly Setup[] = ["castor client, cache", "castor client, no cache", "hf_xet, cache kept", "hf_xet, fresh cache"];

export async function run(): Promise<BenchRow[]> {
  const scratch = await mkdtemp(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "castor-bench-reupload-"));
  try {
    const original = join(scratch, "original.bin");
    const edited = join(scratch, "edited.bin");
    await writeRandomFile(original, FILE_BYTES, SEED);
    await copyFile(original, edited);
    // 1 MiB in the middle rewritten with other bytes (those of the file's start, reversed).
    const handle = await open(edited, "r+");
    try {
      const replacement = Buffer.alloc(EDIT_BYTES);
      await handle.read(replacement, 0, EDIT_BYTES, 0);
      replacement.reverse();
      await handle.write(replacement, 0, EDIT_BYTES, Math.floor(FILE_BYTES / 2));
    } finally {
      await handle.close();
    }
    const python = await interopPython();
    const rows: BenchRow[] = [];
    for (const setup of SETUPS) {
      const castor = await startCastorFixture({}, { compiled: true });
      try {
        const upload = uploaderFor(setup, castor, new TimedHfXet(python, scratch), join(scratch, setup.replace(/\W+/g, "-")));
        await upload(original);
        for (const [what, path] of [
          ["unchanged", original],
          ["1 MiB edited", edited],
        ] as const) {
          const before = await bytesReceived(castor);
          await upload(path);
          const percent = (100 * ((await bytesReceived(castor)) - before)) / FILE_BYTES;
          const target = setup === "castor client, cache" ? { atMost: what === "unchanged" ? 1 : 5 } : undefined;
          rows.push(
            benchRow(GROUP, `re-upload ${what}, ${setup}: bytes sent`, Number(percent.toFixed(2)), "% of file", {
              target,
              note: `${FILE_BYTES / MiB} MiB file`,
            }),
          );
        }
      } finally {
        await castor.stop();
      }
    }
    return rows;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** Uploads one file with the setup's client; the cache (castor's or hf_xet's) persists across calls where the setup keeps one. */
function uploaderFor(setup: Setup, castor: CastorFixture, hfXet: TimedHfXet, home: string): (path: string) => Promise<void> {
  const tokens = { tokenUrl: (access: "read" | "write") => castor.tokenUrl(access), hubToken: (access: "read" | "write") => castor.hubTokens[access] };
  return async (path) => {
    switch (setup) {
      case "castor client, cache":
      case "castor client, no cache": {
        const client = new CastorClient({ endpoint: castor.server.url, hubToken: castor.hubTokens.write, repo: REPO });
        await client.upload([path], { cacheDir: setup === "castor client, cache" ? join(home, "castor-cache") : null });
        return;
      }
      case "hf_xet, cache kept":
        await hfXet.upload(tokens, [path], home);
        return;
      case "hf_xet, fresh cache":
        await hfXet.upload(tokens, [path]);
        return;
    }
  };
}

/** Body bytes of every xorb and shard upload the server has received (its Prometheus counter). */
async function bytesReceived(castor: CastorFixture): Promise<number> {
  const text = await (await fetch(`${castor.server.url}/metrics`)).text();
  let total = 0;
  for (const line of text.split("\n")) {
    const match = /^castor_http_request_bytes_total\{([^}]*)\} (\d+(?:\.\d+)?(?:e\+\d+)?)$/.exec(line);
    if (match && /method="POST"/.test(match[1]) && /route="[^"]*(xorbs|shards)/.test(match[1])) total += Number(match[2]);
  }
  return total;
}
