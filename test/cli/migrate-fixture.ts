/**
 * What the `castor migrate` tests start from: a real embedded data dir, filled through the hub
 * service and castor's own client against a real embedded `castor serve` — two repositories,
 * a tag, hub tokens (one revoked), files uploaded to each (one to both, so it is linked twice and
 * deduplicated), plus what the old server handed out and must stay valid after a migration with
 * the carried keys: a CAS access token and a transfer URL. Then the server is stopped, as the
 * migration guide says, and the store gets what the hub's histories add (`addHistories`): a
 * commit with a tree and an inline file on alice/bert's main, bob/data made public, a hub
 * token with an owner and namespaces, and a storage statistics sample of a past day (besides
 * the one the server took of its start-up day).
 *
 * `checkMigratedServer` downloads every file from a server started on the migrated stores with
 * the OLD hub tokens, byte for byte, and checks the old token and URL and the revoked hub token.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { download, upload } from "../../src/client/index.js";
import { loadConfig } from "../../src/config.js";
import { withHub } from "../../src/hub/open.js";
import { computeStorageStats } from "../../src/hub/stats.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import type { CommitRecord, TreeRecord } from "../../src/metadata/store.js";
import { blobKeyFromHex } from "../../src/storage/blob-store.js";
import { openFsBlobStore } from "../../src/storage/fs.js";
import { OperatorHub } from "../helpers/operator.js";
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
    // The admin commands' own code (the hub's services, as the operator) in-process: the CLI is tested elsewhere, and a
    // child process per command would cost seconds here.
    const hubTokens = await withHub(loadConfig({ CASTOR_DATA_DIR: dataDir }), async (admin) => {
      const hub = new OperatorHub(admin);
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
    let fixture: EmbeddedDataDir;
    try {
      const files: UploadedFixtureFile[] = [];
      for (const [i, item] of uploads.entries()) {
        const path = join(root, `${i}-${item.name}`);
        await writeFile(path, item.bytes);
        const result = await upload({ endpoint: server.url, hubToken: item.hubToken, repo: item.repo, files: [path] });
        files.push({ repo: item.repo, hash: result.files[0].fileHash, bytes: item.bytes });
      }

      const tokenResponse = await fetch(`${server.url}/api/models/alice/bert/xet-read-token/main`, {
        headers: { authorization: `Bearer ${hubTokens.reader}` },
      });
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
      fixture = {
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
    await addHistories(dataDir);
    return fixture;
  } catch (error) {
    await remove();
    throw error;
  }
}

/** git's object id: SHA-1 of `<type> <length>\0<body>`. */
function gitOid(type: string, body: Buffer): string {
  return createHash("sha1").update(`${type} ${body.length}\0`).update(body).digest("hex");
}

/**
 * Adds to the (stopped) data dir what hub histories add: a commit on alice/bert's main whose
 * tree holds an inline README (its content under `inline/`), bob/data made public, a hub token
 * with an owner and namespaces; and a storage statistics sample of a past day. Objects and ids
 * are git's, computed here.
 */
export async function addHistories(dataDir: string): Promise<{ commit: CommitRecord; tree: TreeRecord; readme: Buffer }> {
  const store = await SqliteMetadataStore.open(dataDir);
  try {
    const readme = Buffer.from("# bert\n\nMigrated with its history.\n");
    const sha256 = createHash("sha256").update(readme).digest("hex");
    const blobs = await openFsBlobStore(join(dataDir, "blobs"));
    await blobs.putIfAbsent(blobKeyFromHex("inline", sha256), readme);
    const blobOid = gitOid("blob", readme);
    const tree: TreeRecord = {
      oid: gitOid("tree", Buffer.concat([Buffer.from("100644 README.md\0"), Buffer.from(blobOid, "hex")])),
      entries: [{ type: "file", name: "README.md", oid: blobOid, size: readme.length, sha256, xetHash: null }],
    };
    const bert = (await store.getRepo("model", "alice/bert"))!;
    const head = (await store.getRevision(bert.id, "main"))!.commitOid;
    const seconds = 1_767_225_600;
    const object = [
      `tree ${tree.oid}`,
      ...(head === null ? [] : [`parent ${head}`]),
      `author alice <alice@castor.invalid> ${seconds} +0000`,
      `committer alice <alice@castor.invalid> ${seconds} +0000`,
      "",
      "Add README",
      "",
    ].join("\n");
    const commit: CommitRecord = {
      oid: gitOid("commit", Buffer.from(object)),
      treeOid: tree.oid,
      parentOids: head === null ? [] : [head],
      title: "Add README",
      message: "Add README\n",
      author: "alice",
      createdAt: new Date(seconds * 1000),
      object,
    };
    assert.equal(await store.advanceBranch({ repoId: bert.id, branch: "main", expectedHead: head, commit, trees: [tree] }), "advanced");
    assert.equal(await store.setRepoPrivate((await store.getRepo("dataset", "bob/data"))!.id, false), true);
    const totals = (await store.listStatsSamples()).at(-1) ?? (await computeStorageStats(store)).totals;
    assert.equal(await store.recordStatsSample({ ...totals, day: "2025-12-31", takenAt: new Date("2025-12-31T00:00:00.123Z") }), true);
    await store.createHubToken({
      id: "tok_owned",
      secretHash: "0".repeat(64),
      access: "read",
      repos: [bert.id],
      expiresAt: null,
      owner: "alice",
      namespaces: ["alice", "bob"],
    });
    return { commit, tree, readme };
  } finally {
    await store.close();
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
/** The `COPIED NOW` column of `castor migrate`'s summary table, by step name. */
export function copiedColumn(stdout: string): Map<string, number> {
  const rows = stdout.split("\n").filter((line) => /\s\d+\s+\d+$/.test(line));
  return new Map(
    rows.map((line) => {
      const match = /^(.*?)\s+(\d+)\s+(\d+)$/.exec(line)!;
      return [match[1], Number(match[3])];
    }),
  );
}

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
