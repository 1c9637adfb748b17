/**
 * `SELECT … WHERE hash IN (?, …)` over any number of hashes, for the families that read
 * records by a list of hashes (cas.ts, stats.ts).
 */
import type Database from "better-sqlite3";
import { bytesToPlainHex, type Hash } from "../../format/hash.js";

/** Hashes per query; batch sizes are powers of two up to this, so few statements exist. */
const HASH_BATCH_MAX = 256;

export class HashBatchQuery<Row> {
  /** The statement of each batch size, prepared on first use. */
  private readonly statements = new Map<number, Database.Statement<Uint8Array[], Row>>();

  /** `select` makes the statement's text from its placeholder list, e.g. `… WHERE hash IN (${placeholders})`. */
  constructor(
    private readonly db: Database.Database,
    private readonly select: (placeholders: string) => string,
  ) {}

  /** The rows of the distinct `hashes`, batch after batch. */
  all(hashes: readonly Hash[]): Row[] {
    const rows: Row[] = [];
    const distinct = [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).values()];
    for (let start = 0; start < distinct.length; start += HASH_BATCH_MAX) {
      const batch = distinct.slice(start, start + HASH_BATCH_MAX);
      // Pad to a power of two by repeating the last hash (harmless inside IN), so at most
      // log2(HASH_BATCH_MAX) + 1 statements are ever prepared.
      let size = 1;
      while (size < batch.length) size *= 2;
      while (batch.length < size) batch.push(batch[batch.length - 1]);
      for (const row of this.statement(size).all(...batch)) rows.push(row);
    }
    return rows;
  }

  private statement(size: number): Database.Statement<Uint8Array[], Row> {
    let statement = this.statements.get(size);
    if (!statement) {
      statement = this.db.prepare<Uint8Array[], Row>(this.select(Array(size).fill("?").join(", ")));
      this.statements.set(size, statement);
    }
    return statement;
  }
}
