/**
 * Storage statistics in the embedded store (../stats.ts): the daily samples, and the reads of
 * xorbs and files that skip what statistics do not need (chunk tables, term objects).
 */
import type Database from "better-sqlite3";
import { hashToHex, type Hash } from "../../format/hash.js";
import { PACKED_CHUNK_BYTES, storedHash } from "../cas.js";
import { checkStatsSample, STATS_TOTAL_COLUMNS, statsSampleOf, termXorbs, type StatsSample, type XorbFootprint, type XorbTotals } from "../stats.js";
import type { SqliteConnection } from "./connection.js";
import { HashBatchQuery } from "./hash-batches.js";

const COLUMNS = STATS_TOTAL_COLUMNS.map(([, column]) => column);

type SampleRow = Record<string, unknown> & { taken_at: number };

function prepareStatsStatements(db: Database.Database) {
  return {
    insertSample: db.prepare<unknown[]>(
      `INSERT INTO stats_samples (day, taken_at, ${COLUMNS.join(", ")}) VALUES (${Array(COLUMNS.length + 2)
        .fill("?")
        .join(", ")})
       ON CONFLICT (day) DO UPDATE SET taken_at = excluded.taken_at, ${COLUMNS.map((column) => `${column} = excluded.${column}`).join(", ")}
       WHERE excluded.taken_at > stats_samples.taken_at`,
    ),
    listSamples: db.prepare<[], SampleRow>("SELECT * FROM stats_samples ORDER BY day"),
    // length() of a BLOB column is read from the row header: chunk tables are not loaded.
    xorbTotals: db.prepare<[], XorbTotals>(
      `SELECT count(*) AS xorbs, coalesce(sum(serialized_length), 0) AS bytes, coalesce(sum(length(chunks)), 0) / ${PACKED_CHUNK_BYTES} AS chunks FROM xorbs`,
    ),
  };
}

export class SqliteStatsRecords {
  private readonly sql: ReturnType<typeof prepareStatsStatements>;
  private readonly footprints: HashBatchQuery<{ hash: Buffer; serialized_length: number; uncompressed_length: number; chunks: number }>;
  private readonly fileTerms: HashBatchQuery<{ hash: Buffer; terms: Buffer }>;

  constructor(private readonly connection: SqliteConnection) {
    const db = connection.db;
    this.sql = prepareStatsStatements(db);
    this.footprints = new HashBatchQuery(
      db,
      (placeholders) =>
        `SELECT hash, serialized_length, uncompressed_length, length(chunks) / ${PACKED_CHUNK_BYTES} AS chunks FROM xorbs WHERE hash IN (${placeholders})`,
    );
    this.fileTerms = new HashBatchQuery(db, (placeholders) => `SELECT hash, terms FROM files WHERE hash IN (${placeholders})`);
  }

  async recordStatsSample(sample: StatsSample): Promise<boolean> {
    const totals = checkStatsSample(sample);
    return this.connection.write(() => this.sql.insertSample.run(sample.day, sample.takenAt.getTime(), ...totals).changes > 0);
  }

  async listStatsSamples(): Promise<StatsSample[]> {
    return this.sql.listSamples.all().map((row) => statsSampleOf(row, new Date(row.taken_at)));
  }

  async xorbTotals(): Promise<XorbTotals> {
    return this.sql.xorbTotals.get()!;
  }

  async xorbFootprints(hashes: readonly Hash[]): Promise<Map<string, XorbFootprint>> {
    const found = new Map<string, XorbFootprint>();
    for (const row of this.footprints.all(hashes)) {
      found.set(hashToHex(storedHash(row.hash, "xorb hash")), {
        serializedLength: row.serialized_length,
        uncompressedLength: row.uncompressed_length,
        chunks: row.chunks,
      });
    }
    return found;
  }

  async fileXorbs(hashes: readonly Hash[]): Promise<Map<string, Hash[]>> {
    const found = new Map<string, Hash[]>();
    for (const row of this.fileTerms.all(hashes)) {
      const hash = storedHash(row.hash, "file hash");
      found.set(hashToHex(hash), termXorbs(hash, row.terms));
    }
    return found;
  }
}
