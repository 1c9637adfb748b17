/**
 * Synthetic metadata for the groups that fill a store through its own APIs (`gc`, `scale`):
 * hashes made from labels, so both backends get the same data, chunks of realistic sizes, and
 * the run on SQLite followed by PostgreSQL when the services are configured.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gitTreeId } from "../../src/format/git.js";
import type { Hash } from "../../src/format/hash.js";
import type { DatedXorb, FileTerm, MetadataStore, StoredChunk, TreeEntry, TreeRecord } from "../../src/metadata/store.js";
import { METADATA_FILE_NAME, SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { benchRow, type BenchRow } from "../lib.js";

export function labelHash(label: string): Hash {
  return new Uint8Array(createHash("sha256").update(label).digest());
}

/** Uncompressed bytes of chunk `c`: 8 to 64 KiB, as content-defined chunks are. */
export function chunkLength(c: number): number {
  return 8_192 + ((c * 7_919) % 57_345);
}

/** The record of a xorb of chunks `first` … `first + count - 1`, with an 8-byte header per chunk and LZ4 saving a fifth. */
export function syntheticXorb(hash: Hash, first: number, count: number, chunkHash: (c: number) => Hash, createdAt: Date): DatedXorb {
  const chunks: StoredChunk[] = [];
  let serializedEnd = 0;
  let uncompressedLength = 0;
  for (let c = first; c < first + count; c++) {
    const length = chunkLength(c);
    serializedEnd += 8 + Math.floor((length * 4) / 5);
    uncompressedLength += length;
    chunks.push({ hash: chunkHash(c), uncompressedLength: length, serializedEnd });
  }
  return { hash, serializedLength: serializedEnd, uncompressedLength, chunks, createdAt };
}

/**
 * The terms of a file over chunks `start` … `end - 1` of a stream cut into xorbs of
 * `chunksPerXorb`: one per xorb the range falls in. Returns them with the file's size.
 */
export function termsOver(start: number, end: number, chunksPerXorb: number, xorbHash: (x: number) => Hash): { terms: FileTerm[]; size: number } {
  const terms: FileTerm[] = [];
  let size = 0;
  for (let x = Math.floor(start / chunksPerXorb); x * chunksPerXorb < end; x++) {
    const from = Math.max(start, x * chunksPerXorb);
    const to = Math.min(end, (x + 1) * chunksPerXorb);
    let unpackedLength = 0;
    for (let c = from; c < to; c++) unpackedLength += chunkLength(c);
    terms.push({ xorbHash: xorbHash(x), chunkStart: from - x * chunksPerXorb, chunkEnd: to - x * chunksPerXorb, unpackedLength });
    size += unpackedLength;
  }
  return { terms, size };
}

export function treeOf(entries: TreeEntry[]): TreeRecord {
  return { oid: gitTreeId(entries), entries };
}

/** A metadata backend a group runs on: its data dir, the settings selecting it, and how to open it in process. */
export interface MetadataBackend {
  name: "sqlite" | "postgres";
  dataDir: string;
  /** Settings besides the data dir that select the backend. */
  env: Record<string, string>;
  open(): Promise<MetadataStore>;
  /** The database's size on disk. */
  databaseBytes(): Promise<number>;
}

/**
 * Runs `measure` on SQLite in a fresh temp data dir, then on a fresh PostgreSQL database when
 * CASTOR_TEST_DATABASE_URL is set (a "skipped" row saying how to get one otherwise); removes both.
 */
export async function onEachMetadataBackend(
  group: string,
  measure: (backend: MetadataBackend, previous: MetadataBackend | null) => Promise<BenchRow[]>,
): Promise<BenchRow[]> {
  const scratch = await mkdtemp(join(tmpdir(), `castor-bench-${group}-`));
  try {
    const sqliteDir = join(scratch, "sqlite");
    const sqlite: MetadataBackend = {
      name: "sqlite",
      dataDir: sqliteDir,
      env: {},
      open: () => SqliteMetadataStore.open(sqliteDir),
      databaseBytes: async () => {
        const size = (name: string) =>
          stat(join(sqliteDir, name)).then(
            (found) => found.size,
            () => 0,
          );
        return (await size(METADATA_FILE_NAME)) + (await size(`${METADATA_FILE_NAME}-wal`));
      },
    };
    const rows = await measure(sqlite, null);
    const adminUrl = process.env.CASTOR_TEST_DATABASE_URL;
    if (adminUrl === undefined || adminUrl === "") {
      rows.push(
        benchRow(group, "postgres", 0, "skipped", { note: 'not measured: CASTOR_TEST_DATABASE_URL is not set (eval "$(scripts/services.sh start)" first)' }),
      );
      return rows;
    }
    // Loaded only here: without PostgreSQL a group needs neither the driver nor the helper.
    const [{ createTestDatabase }, { PostgresMetadataStore }, { default: pg }] = await Promise.all([
      import("../../test/helpers/scaleout-postgres.js"),
      import("../../src/metadata/postgres.js"),
      import("pg"),
    ]);
    const database = await createTestDatabase(adminUrl);
    try {
      const postgres: MetadataBackend = {
        name: "postgres",
        dataDir: join(scratch, "postgres"),
        env: { CASTOR_DATABASE_URL: database.url },
        open: () => PostgresMetadataStore.open(database.url),
        databaseBytes: async () => {
          const client = new pg.Client({ connectionString: database.url });
          await client.connect();
          try {
            return Number((await client.query<{ size: string }>("SELECT pg_database_size(current_database()) AS size")).rows[0].size);
          } finally {
            await client.end();
          }
        },
      };
      rows.push(...(await measure(postgres, sqlite)));
    } finally {
      await database.drop();
    }
    return rows;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
