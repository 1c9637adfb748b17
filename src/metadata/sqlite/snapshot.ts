/**
 * The embedded store's database file as a whole, for `castor backup` and `castor restore`
 * (src/ops/backup.ts): a consistent copy taken while a server writes to it, what a copy
 * records and references, its integrity, and whether another process has a database open.
 *
 * None of this goes through `SqliteConnection`, which would migrate the file it opens: a backup
 * must record the schema the server wrote, and a copy is only ever read here.
 */
import Database from "better-sqlite3";
import { hashToHex } from "../../format/hash.js";
import { decodeTreeEntries, treeEntriesFromBytes } from "../history.js";
import { BUSY_TIMEOUT_MS, MIGRATIONS, MetadataSchemaError } from "./schema.js";

/** The backup API's most pages per step (it caps the number there). */
const ALL_PAGES = 0x7fffffff;

/**
 * Copies the database at `sourcePath`, live or not, into a new file at `destPath`, as of one
 * moment, with SQLite's online backup API. The copy is left in rollback-journal mode so that
 * reading it creates no `-wal`/`-shm` files beside it; a server that opens it switches it back
 * to WAL.
 *
 * The backup API restarts whenever another connection writes between two of its steps, so a
 * copy in small steps might never finish beside a busy server. After the first step (which
 * only measures) the whole file is copied in one step, under one read transaction: in WAL mode
 * that blocks no writer, and the server's writes after it are simply not in the copy. (While
 * it lasts, checkpoints cannot reset the WAL, which grows by what the server writes meanwhile.)
 */
export async function snapshotDatabase(sourcePath: string, destPath: string): Promise<void> {
  const source = new Database(sourcePath, { readonly: true, fileMustExist: true, timeout: BUSY_TIMEOUT_MS });
  try {
    checkSchemaVersion(source, sourcePath);
    await source.backup(destPath, { progress: () => ALL_PAGES });
  } finally {
    source.close();
  }
  const copy = new Database(destPath, { fileMustExist: true });
  try {
    copy.pragma("journal_mode = DELETE");
  } finally {
    copy.close();
  }
}

/** Rows of the main record families, for a backup's manifest and summary. */
export interface SnapshotCounts {
  repositories: number;
  commits: number;
  xorbs: number;
  files: number;
  shards: number;
}

/** An object in the blob store that a database's records need: its kind, hash (string form) and size when recorded. */
export interface ReferencedObject {
  kind: "xorbs" | "shards" | "inline";
  hex: string;
  /** Bytes the object must have; null when the records do not say (shards). */
  size: number | null;
}

/**
 * A database copy opened read-only (`snapshotDatabase`'s output, or the one a restore placed),
 * never migrated. Close it when done.
 */
export class DatabaseSnapshot {
  private constructor(
    private readonly db: Database.Database,
    readonly path: string,
  ) {}

  static open(path: string): DatabaseSnapshot {
    return new DatabaseSnapshot(new Database(path, { readonly: true, fileMustExist: true }), path);
  }

  /** `PRAGMA user_version`: how many of castor's schema migrations the file has had. */
  get schemaVersion(): number {
    return this.db.pragma("user_version", { simple: true }) as number;
  }

  /** Throws MetadataSchemaError when the file was written by a castor newer than this one. */
  checkSchemaVersion(): void {
    checkSchemaVersion(this.db, this.path);
  }

  counts(): SnapshotCounts {
    return {
      repositories: this.countRows("repos"),
      commits: this.countRows("commits"),
      xorbs: this.countRows("xorbs"),
      files: this.countRows("files"),
      shards: this.countRows("shards"),
    };
  }

  /** What `PRAGMA integrity_check` finds wrong (its first 100 findings); empty when the file is intact. */
  integrityProblems(): string[] {
    const rows = this.db.pragma("integrity_check") as { integrity_check: string }[];
    const findings = rows.map((row) => row.integrity_check);
    return findings.length === 1 && findings[0] === "ok" ? [] : findings;
  }

  /**
   * Every blob-store object the records need: each recorded xorb (with its serialized length),
   * each registered shard, and the content of each inline file a tree names (with its size;
   * listed once however many trees name it, so memory grows with the distinct inline files).
   */
  *referencedObjects(): Generator<ReferencedObject> {
    if (this.hasTable("xorbs")) {
      for (const row of this.db.prepare<[], { hash: Buffer; size: number }>("SELECT hash, serialized_length AS size FROM xorbs").iterate()) {
        yield { kind: "xorbs", hex: hashToHex(row.hash), size: row.size };
      }
    }
    if (this.hasTable("shards")) {
      for (const row of this.db.prepare<[], { hash: Buffer }>("SELECT hash FROM shards").iterate()) {
        yield { kind: "shards", hex: hashToHex(row.hash), size: null };
      }
    }
    if (this.hasTable("trees")) {
      const seen = new Set<string>();
      for (const row of this.db.prepare<[], { repo_id: number; oid: string; entries: Buffer }>("SELECT repo_id, oid, entries FROM trees").iterate()) {
        for (const entry of decodeTreeEntries(treeEntriesFromBytes(row.entries, row.repo_id, row.oid), row.repo_id, row.oid)) {
          if (entry.type !== "file" || entry.xetHash !== null || seen.has(entry.sha256)) continue;
          seen.add(entry.sha256);
          yield { kind: "inline", hex: entry.sha256, size: entry.size };
        }
      }
    }
  }

  close(): void {
    this.db.close();
  }

  private hasTable(name: string): boolean {
    return this.db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(name) !== undefined;
  }

  /** Rows of `table`, 0 when the schema predates it. `table` is one of the fixed names above. */
  private countRows(table: string): number {
    if (!this.hasTable(table)) return 0;
    return (this.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
  }
}

/**
 * Whether some other connection (a server, an admin command) has the WAL-mode database at
 * `path` open. Every connection to a WAL database holds a shared lock on the file for as long as
 * it is open, and leaving WAL mode needs the only one: so this leaves WAL mode, which fails with
 * SQLITE_BUSY at once while anyone else is connected. Meant for a file about to be replaced: on
 * success the file is in rollback-journal mode, with its WAL checkpointed into it.
 */
export function databaseInUse(path: string): boolean {
  const db = new Database(path, { fileMustExist: true, timeout: 0 });
  try {
    db.pragma("journal_mode = DELETE");
    return false;
  } catch (err) {
    if (err instanceof Database.SqliteError && err.code.startsWith("SQLITE_BUSY")) return true;
    throw err;
  } finally {
    db.close();
  }
}

function checkSchemaVersion(db: Database.Database, path: string): void {
  const version = db.pragma("user_version", { simple: true }) as number;
  if (version > MIGRATIONS.length) {
    throw new MetadataSchemaError(
      `${path} has schema version ${version}, but this castor only knows versions up to ${MIGRATIONS.length}: use the castor version that wrote it (or a newer one)`,
    );
  }
}
