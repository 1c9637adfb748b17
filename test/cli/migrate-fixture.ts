/**
 * What the `castor migrate` tests start from: a real embedded data dir, filled through the hub
 * service and castor's own client against a real embedded `castor serve` — two repositories,
 * a tag, hub tokens (one revoked), files uploaded to each (one to both, so it is linked twice and
 * deduplicated), plus what the old server handed out and must stay valid after a migration with
 * the carried keys: a CAS access token and a transfer URL. Then the server is stopped, as the
 * migration guide says.
 *
 * `checkMigratedServer` downloads every file from a server started on the migrated stores with
 * the OLD hub tokens, byte for byte, and checks the old token and URL and the revoked hub token.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { download, upload } from "../../src/client/index.js";
import { loadConfig } from "../../src/config.js";
import { withHub } from "../../src/hub/open.js";
import { startCastorServer } from "../helpers/server.js";

export interface UploadedFixtureFile {
  repo: string;
  hash: string;
  bytes: Buffer;
}

export interface EmbeddedDataDir {
  /** The data dir; removed by `remove()`. */
  dataDir: string;
  /** Hub tokens by name: `bertWrite`, `dataWrite`, `reader` (both repositories), `revoked`. */
  hubTokens: Record<"bertWrite" | "dataWrite" | "reader" | "revoked", string>;
  files: UploadedFixtureFile[];
  /** A CAS read token of alice/bert, issued by the old server. */
  casReadToken: string;
  /** A transfer URL of the old server: its path and query, the Range it signs, and the bytes it served. */
  transfer: { pathAndQuery: string; range: string; bytes: Buffer };
  remove(): Promise<void>;
}

export const BERT = "model:alice/bert";
export const DATA = "dataset:bob/data";

export async function buildEmbeddedDataDir(): Promise<EmbeddedDataDir> {
  const root = await mkdtemp(join(tmpdir(), "castor-migrate-src-"));
  const dataDir = join(root, "data");
  const remove = () => rm(root, { recursive: true, force: true });
  try {
    // The admin commands' own code (HubService) in-process: the CLI is tested elsewhere, and a
    // child process per command would cost seconds here.
    const hubTokens = await withHub(loadConfig({ CASTOR_DATA_DIR: dataDir }), async (hub) => {
      await hub.createRepo("model", "alice/bert");
      await hub.createRepo("dataset", "bob/data");
      await hub.createRevision(BERT, "v1", "tag");
      const token = async (repos: string[] | "all", access: "read" | "write") => hub.createToken({ repos, access, expiresAt: null });
      const revoked = await token("all", "read");
      await hub.revokeToken(revoked.token.id);
      return {
        bertWrite: (await token([BERT], "write")).secret,
        dataWrite: (await token([DATA], "write")).secret,
        reader: (await token([BERT, DATA], "read")).secret,
        revoked: revoked.secret,
      };
    });

    const shared = randomBytes(3 * 1024 * 1024);
    const uploads: { repo: string; hubToken: string; name: string; bytes: Buffer }[] = [
      { repo: BERT, hubToken: hubTokens.bertWrite, name: "empty.bin", bytes: Buffer.alloc(0) },
      { repo: BERT, hubToken: hubTokens.bertWrite, name: "small.bin", bytes: randomBytes(5000) },
      { repo: BERT, hubToken: hubTokens.bertWrite, name: "shared.bin", bytes: shared },
      { repo: DATA, hubToken: hubTokens.dataWrite, name: "shared.bin", bytes: shared },
      { repo: DATA, hubToken: hubTokens.dataWrite, name: "other.bin", bytes: randomBytes(1024 * 1024 + 17) },
    ];
    const server = await startCastorServer({ dataDir });
    try {
      const files: UploadedFixtureFile[] = [];
      for (const [i, item] of uploads.entries()) {
        const path = join(root, `${i}-${item.name}`);
        await writeFile(path, item.bytes);
        const result = await upload({ endpoint: server.url, hubToken: item.hubToken, repo: item.repo, files: [path] });
        files.push({ repo: item.repo, hash: result.files[0].fileHash, bytes: item.bytes });
      }

      const tokenResponse = await fetch(`${server.url}/api/models/alice/bert/xet-read-token/main`, { headers: { authorization: `Bearer ${hubTokens.reader}` } });
      assert.equal(tokenResponse.status, 200);
      const casReadToken = ((await tokenResponse.json()) as { accessToken: string }).accessToken;
      const small = files[1];
      const reconstruction = await fetch(`${server.url}/v2/reconstructions/${small.hash}`, { headers: { authorization: `Bearer ${casReadToken}` } });
      assert.equal(reconstruction.status, 200);
      const body = (await reconstruction.json()) as { xorbs: Record<string, { url: string; ranges: { bytes: { start: number; end: number } }[] }[]> };
      const entry = Object.values(body.xorbs)[0][0];
      const range = `bytes=${entry.ranges[0].bytes.start}-${entry.ranges[0].bytes.end}`;
      const transferResponse = await fetch(entry.url, { headers: { range } });
      assert.equal(transferResponse.status, 206);
      const url = new URL(entry.url);
      return {
        dataDir,
        hubTokens,
        files,
        casReadToken,
        transfer: { pathAndQuery: url.pathname + url.search, range, bytes: Buffer.from(await transferResponse.arrayBuffer()) },
        remove,
      };
    } finally {
      await server.stop();
    }
  } catch (error) {
    await remove();
    throw error;
  }
}

/** The settings that carry the old server's keys, as `castor migrate` advises. */
export async function carriedKeys(dataDir: string): Promise<Record<string, string>> {
  const keys = join(dataDir, "keys");
  return {
    CASTOR_SIGNING_KEY_FILE: join(keys, "jwt-signing-key.pem"),
    CASTOR_URL_KEY: (await readFile(join(keys, "url-key"), "utf8")).trim(),
    CASTOR_DEDUP_KEY_SEED: (await readFile(join(keys, "dedup-key-seed"), "utf8")).trim(),
  };
}

/**
 * Everything the old server's users hold keeps working against `serverUrl`, a server on the
 * migrated stores: every file downloads byte-exact with the old hub tokens (each repository's
 * writer and the reader of both), the old CAS token reconstructs, the old transfer URL serves
 * the same bytes; the revoked hub token stays refused.
 */
export async function checkMigratedServer(source: EmbeddedDataDir, serverUrl: string): Promise<void> {
  const outDir = await mkdtemp(join(tmpdir(), "castor-migrate-out-"));
  try {
    for (const [i, file] of source.files.entries()) {
      for (const hubToken of [source.hubTokens.reader, file.repo === BERT ? source.hubTokens.bertWrite : source.hubTokens.dataWrite]) {
        const output = join(outDir, `${i}.bin`);
        const result = await download({ endpoint: serverUrl, hubToken, repo: file.repo, fileHash: file.hash, output });
        assert.equal(result.bytesWritten, file.bytes.length);
        assert.ok((await readFile(output)).equals(file.bytes), `file ${i} (${file.repo}) downloads byte-exact from the migrated stores`);
      }
    }
    const small = source.files[1];
    const reconstruction = await fetch(`${serverUrl}/v2/reconstructions/${small.hash}`, { headers: { authorization: `Bearer ${source.casReadToken}` } });
    assert.equal(reconstruction.status, 200, "a CAS access token of the old server is accepted (carried signing key)");
    await reconstruction.arrayBuffer();
    const transfer = await fetch(`${serverUrl}${source.transfer.pathAndQuery}`, { headers: { range: source.transfer.range } });
    assert.equal(transfer.status, 206, "a transfer URL of the old server is accepted (carried URL key)");
    assert.ok(Buffer.from(await transfer.arrayBuffer()).equals(source.transfer.bytes));
    const revoked = await fetch(`${serverUrl}/api/models/alice/bert/xet-read-token/main`, { headers: { authorization: `Bearer ${source.hubTokens.revoked}` } });
    assert.equal(revoked.status, 401, "the revoked hub token stays revoked");
    await revoked.arrayBuffer();
  } finally {
    await rm(outDir, { recursive: true, force: true });
  }
}
