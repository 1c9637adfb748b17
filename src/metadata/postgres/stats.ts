/**
 * Storage statistics in the scale-out store (../stats.ts): the daily samples, and the reads of
 * xorbs and files that skip what statistics do not need (chunk tables, term objects). Sums are
 * cast back to bigint, which the pool parses into numbers (PostgreSQL sums bigints as numeric).
 */
import { hashToHex, type Hash } from "../../format/hash.js";
import { PACKED_CHUNK_BYTES, storedHash } from "../cas.js";
import { checkStatsSample, STATS_TOTAL_COLUMNS, statsSampleOf, termXorbs, type StatsSample, type XorbFootprint, type XorbTotals } from "../stats.js";
import type { NamedStatements, PostgresConnection } from "./connection.js";

const COLUMNS = STATS_TOTAL_COLUMNS.map(([, column]) => column);

const STATS_SQL = {
  insertSample: `
    INSERT INTO stats_samples (day, taken_at, ${COLUMNS.join(", ")})
    VALUES ($1::date, $2, ${COLUMNS.map((_, i) => `$${i + 3}`).join(", ")})
    ON CONFLICT (day) DO UPDATE SET taken_at = excluded.taken_at, ${COLUMNS.map((column) => `${column} = excluded.${column}`).join(", ")}
    WHERE excluded.taken_at > stats_samples.taken_at`,
  // to_char, not the driver's date parsing, which would read the day in the local time zone.
  listSamples: `SELECT to_char(day, 'YYYY-MM-DD') AS day, taken_at, ${COLUMNS.join(", ")} FROM stats_samples ORDER BY day`,
  // octet_length of a stored bytea reads its length from the header, without loading or detoasting it.
  xorbTotals: `
    SELECT count(*) AS xorbs, coalesce(sum(serialized_length), 0)::bigint AS bytes,
           (coalesce(sum(octet_length(chunks)), 0) / ${PACKED_CHUNK_BYTES})::bigint AS chunks
    FROM xorbs`,
  xorbFootprints: `SELECT hash, serialized_length, uncompressed_length, octet_length(chunks) / ${PACKED_CHUNK_BYTES} AS chunks FROM xorbs WHERE hash = ANY ($1::bytea[])`,
  fileTerms: `SELECT hash, terms FROM files WHERE hash = ANY ($1::bytea[])`,
} as const;

export class PostgresStatsRecords {
  private readonly sql: NamedStatements<typeof STATS_SQL>;

  constructor(connection: PostgresConnection) {
    this.sql = connection.statements(STATS_SQL);
  }

  async recordStatsSample(sample: StatsSample): Promise<boolean> {
    const totals = checkStatsSample(sample);
    return (await this.sql.run("insertSample", [sample.day, sample.takenAt, ...totals])).rowCount === 1;
  }

  async listStatsSamples(): Promise<StatsSample[]> {
    const { rows } = await this.sql.run<Record<string, unknown> & { taken_at: Date }>("listSamples", []);
    return rows.map((row) => statsSampleOf(row, row.taken_at));
  }

  async xorbTotals(): Promise<XorbTotals> {
    return (await this.sql.run<XorbTotals>("xorbTotals", [])).rows[0];
  }

  async xorbFootprints(hashes: readonly Hash[]): Promise<Map<string, XorbFootprint>> {
    const found = new Map<string, XorbFootprint>();
    if (hashes.length === 0) return found;
    const { rows } = await this.sql.run<{ hash: Buffer; serialized_length: number; uncompressed_length: number; chunks: number }>("xorbFootprints", [hashes]);
    for (const row of rows) {
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
    if (hashes.length === 0) return found;
    for (const row of (await this.sql.run<{ hash: Buffer; terms: Buffer }>("fileTerms", [hashes])).rows) {
      const hash = storedHash(row.hash, "file hash");
      found.set(hashToHex(hash), termXorbs(hash, row.terms));
    }
    return found;
  }
}
