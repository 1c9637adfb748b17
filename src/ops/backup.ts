/**
 * Backup and restore of an embedded data dir (`castor backup DEST`, `castor restore SRC`).
 *
 * A backup is itself laid out as a data dir, plus a manifest:
 *
 *   DEST/metadata.sqlite      a consistent snapshot of the database (SQLite's online backup)
 *   DEST/blobs/…              every xorb, shard and inline object, in the fs blob store's layout
 *   DEST/keys/…               the generated secrets (signing key, URL key, dedup-key seed): without
 *                             them a restored server would refuse the CAS tokens and transfer
 *                             URLs handed out before, and answer dedup queries under other keys
 *   DEST/castor-backup.json   what was copied: versions, counts, the database's size and SHA-256
 *
 * Upload staging (`spool/`, `blobs/tmp/`) is left out: it only ever holds unfinished uploads.
 *
 * Consistency while the server runs: the database snapshot is taken FIRST, then the blobs are
 * copied. A blob is stored before any record names it, and never changes once stored, so every
 * blob the snapshot needs is already there when the copy starts; blobs stored after the
 * snapshot are copied too (harmless extras). The one thing that could break this is a blob
 * deleted between the snapshot and its copy (a future garbage collector), so the backup ends
 * by checking that each object the snapshot references is in the copy, and fails otherwise.
 *
 * Nothing half-done ever looks complete: a backup is written into `DEST.partial-…` beside DEST
 * and renamed to DEST as its last step; a restore stages everything in a folder inside the data
 * dir, checks it (manifest, database SHA-256, `PRAGMA integrity_check`, blob counts, references)
 * and only then moves it into place, the database last.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, mkdtemp, open, readdir, readFile, rename, rm, rmdir, stat } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import { pipeline } from "node:stream/promises";
import { DEDUP_KEY_SEED_FILE_NAME, KEYS_DIR_NAME, SIGNING_KEY_FILE_NAME, URL_KEY_FILE_NAME } from "../auth/keys.js";
import type { CastorConfig, SettingName } from "../config.js";
import { METADATA_FILE_NAME, MIGRATIONS } from "../metadata/sqlite/schema.js";
import { DatabaseSnapshot, databaseInUse, snapshotDatabase, type ReferencedObject, type SnapshotCounts } from "../metadata/sqlite/snapshot.js";
import { BLOB_KINDS, blobKeyFromHex, type BlobKind } from "../storage/blob-store.js";
import { copyFileDurably, copyFsBlobStore, type CopyMethod, type FsCopyCounts } from "../storage/fs-copy.js";
import { FsBlobStore } from "../storage/fs.js";
import { fsyncDir } from "../storage/fsync-dir.js";
import { BLOBS_DIR_NAME } from "../storage/open.js";

export const MANIFEST_FILE_NAME = "castor-backup.json";
const MANIFEST_FORMAT = "castor-backup";
const MANIFEST_FORMAT_VERSION = 1;

/**
 * The generated key files a data dir may hold: the setting a server takes instead of each, and
 * what stops working when a restored server has another key.
 */
export const KEY_FILES: readonly { file: string; setting: SettingName; keepsValid: string }[] = [
  { file: SIGNING_KEY_FILE_NAME, setting: "CASTOR_SIGNING_KEY_FILE", keepsValid: "the CAS access tokens handed out before" },
  { file: URL_KEY_FILE_NAME, setting: "CASTOR_URL_KEY", keepsValid: "the transfer URLs handed out before" },
  { file: DEDUP_KEY_SEED_FILE_NAME, setting: "CASTOR_DEDUP_KEY_SEED", keepsValid: "the dedup answers clients cached" },
];

/** Folders a fresh filesystem puts at its root; a data dir on its own volume is empty with it. */
const FILESYSTEM_ENTRIES = new Set(["lost+found"]);
/** Missing objects named in an error message at most; the rest are counted. */
const MISSING_NAMED = 5;
const DEFAULT_PROGRESS_EVERY_BLOBS = 1000;
const DEFAULT_PROGRESS_EVERY_BYTES = 1024 ** 3;

export interface BackupManifest {
  format: typeof MANIFEST_FORMAT;
  formatVersion: typeof MANIFEST_FORMAT_VERSION;
  /** The castor that made the backup. */
  castorVersion: string;
  /** The database's `user_version`: a castor knowing fewer migrations cannot restore it. */
  schemaVersion: number;
  /** When the database snapshot was taken (ISO 8601). */
  createdAt: string;
  database: { file: string; bytes: number; sha256: string };
  records: SnapshotCounts;
  blobs: Record<BlobKind, { objects: number; bytes: number }>;
  /** The key files in `keys/` (names only; the secrets are never written anywhere else). */
  keyFiles: string[];
}

/** A backup or restore refused, or found the data inconsistent; the message says what to do. */
export class BackupError extends Error {
  override readonly name = "BackupError";
}

/**
 * Refuses the scale-out configuration: its data is in PostgreSQL and S3, which have backup tools
 * of their own, and a copy of the local data dir would hold none of it.
 */
export function requireEmbedded(config: Pick<CastorConfig, "databaseUrl" | "s3">, command: string): void {
  const scaleOut = [...(config.databaseUrl !== null ? ["CASTOR_DATABASE_URL"] : []), ...(config.s3 !== null ? ["CASTOR_S3_BUCKET"] : [])];
  if (scaleOut.length === 0) return;
  throw new BackupError(
    `castor ${command} handles the embedded data dir only, but ${scaleOut.join(" and ")} ${scaleOut.length === 1 ? "selects" : "select"} the scale-out stores: back those up with pg_dump (PostgreSQL first) and S3 bucket versioning or replication, as README.md's "Backup and restore" describes`,
  );
}

export interface CopyRunOptions {
  /** `link` (default): hard-link blobs where the filesystem allows, copy the rest; `copy`: copy every byte. */
  method?: CopyMethod;
  /** Receives progress lines (no newline). */
  progress?: (line: string) => void;
  /** A progress line every N blobs (default 1000)… */
  progressEveryBlobs?: number;
  /** …or every this many bytes (default 1 GiB), whichever comes first. */
  progressEveryBytes?: number;
  /** Stops the run between blobs; nothing is left at the destination. */
  signal?: AbortSignal;
}

export interface BackupOptions extends CopyRunOptions {
  /** Recorded in the manifest. */
  castorVersion: string;
}

export interface BackupResult {
  dest: string;
  manifest: BackupManifest;
  blobs: FsCopyCounts;
  /** Distinct objects the snapshot references (all of them are in the backup). */
  referencedObjects: number;
  elapsedMs: number;
}

/**
 * Backs up the embedded data dir `dataDir` (its server may be running) into `dest`, a new or
 * empty folder (see the file comment). Throws BackupError when refused or inconsistent, and
 * leaves no `dest` behind on any failure.
 */
export async function backupDataDir(dataDir: string, dest: string, options: BackupOptions): Promise<BackupResult> {
  const started = performance.now();
  const source = resolve(dataDir);
  const target = resolve(dest);
  const say = options.progress ?? (() => undefined);
  const database = join(source, METADATA_FILE_NAME);
  if (!(await isFile(database))) {
    throw new BackupError(`${source} is not a castor data dir (it has no ${METADATA_FILE_NAME}): point CASTOR_DATA_DIR or --data-dir at the server's data dir`);
  }
  if (isWithin(target, source)) throw new BackupError(`${target} is inside the data dir ${source}: put the backup outside it, ideally on another disk`);
  if ((await entriesOf(target))?.length) {
    throw new BackupError(`${target} already exists and is not empty: give a new or empty folder, so that no earlier backup is overwritten`);
  }

  await mkdir(dirname(target), { recursive: true });
  const temp = await mkdtemp(`${target}.partial-`);
  try {
    const createdAt = new Date();
    const snapshotPath = join(temp, METADATA_FILE_NAME);
    await snapshotDatabase(database, snapshotPath);
    const snapshot = DatabaseSnapshot.open(snapshotPath);
    let schemaVersion: number;
    let records: SnapshotCounts;
    let blobs: FsCopyCounts;
    let referencedObjects: number;
    try {
      schemaVersion = snapshot.schemaVersion;
      records = snapshot.counts();
      say(
        `metadata snapshot taken (schema version ${schemaVersion}: ${records.repositories} repositories, ${records.xorbs} xorbs, ${records.files} files, ${records.shards} shards)`,
      );
      blobs = await copyBlobs(join(source, BLOBS_DIR_NAME), join(temp, BLOBS_DIR_NAME), options);
      const { count, missing } = await missingReferences(snapshot, FsBlobStore.at(join(temp, BLOBS_DIR_NAME)));
      if (missing.length > 0) {
        throw new BackupError(
          `${describeMissing(missing)} that the metadata snapshot references ${missing.length === 1 ? "is" : "are"} missing from ${join(source, BLOBS_DIR_NAME)} (deleted after the snapshot, or the data dir is damaged): run castor fsck, then back up again`,
        );
      }
      referencedObjects = count;
      say(`checked: the ${count} objects the snapshot references are all in the backup`);
    } finally {
      snapshot.close();
    }
    const keyFiles = await copyKeyFiles(
      join(source, KEYS_DIR_NAME),
      join(temp, KEYS_DIR_NAME),
      KEY_FILES.map((key) => key.file),
      false,
    );
    const manifest: BackupManifest = {
      format: MANIFEST_FORMAT,
      formatVersion: MANIFEST_FORMAT_VERSION,
      castorVersion: options.castorVersion,
      schemaVersion,
      createdAt: createdAt.toISOString(),
      database: { file: METADATA_FILE_NAME, ...(await sizeAndSha256(snapshotPath)) },
      records,
      blobs: blobs.kinds,
      keyFiles,
    };
    await writeDurably(join(temp, MANIFEST_FILE_NAME), `${JSON.stringify(manifest, null, 2)}\n`);
    await fsyncDir(temp);
    options.signal?.throwIfAborted();
    // rename(2) also replaces an empty folder: the "empty DEST" case.
    await rename(temp, target);
    await fsyncDir(dirname(target));
    return { dest: target, manifest, blobs, referencedObjects, elapsedMs: performance.now() - started };
  } catch (err) {
    await rm(temp, { recursive: true, force: true });
    throw err;
  }
}

export interface RestoreOptions extends CopyRunOptions {
  /** Restore into a data dir that is not empty, replacing what it holds. */
  force?: boolean;
}

export interface RestoreResult {
  dataDir: string;
  manifest: BackupManifest;
  blobs: FsCopyCounts;
  /** The data dir held something, now replaced (`force`). */
  replaced: boolean;
  elapsedMs: number;
}

/**
 * Restores the backup in `source` into the data dir `dataDir`: new or empty, or anything with
 * `force` as long as no process has its database open. Everything is staged and checked inside
 * the data dir first; on a failure before the final moves the data dir is left as it was.
 */
export async function restoreDataDir(source: string, dataDir: string, options: RestoreOptions = {}): Promise<RestoreResult> {
  const started = performance.now();
  const from = resolve(source);
  const target = resolve(dataDir);
  const say = options.progress ?? (() => undefined);
  if (isWithin(target, from) || isWithin(from, target)) {
    throw new BackupError(`the data dir ${target} and the backup ${from} overlap: restore into a folder outside the backup`);
  }
  const manifest = await readManifest(from);

  const existing = await entriesOf(target);
  const replaced = existing !== null && existing.length > 0;
  if (replaced) {
    if (!options.force) {
      throw new BackupError(`${target} is not empty: restore into an empty or new data dir, or add --force to replace what it holds`);
    }
    const database = join(target, METADATA_FILE_NAME);
    if ((await isFile(database)) && databaseInUse(database)) {
      throw new BackupError(`${database} is open in another process (a castor server or command): stop it, then restore`);
    }
  }
  await mkdir(target, { recursive: true });
  const staging = await mkdtemp(join(target, ".castor-restore-"));
  try {
    const stagedDatabase = join(staging, METADATA_FILE_NAME);
    if (!(await isFile(join(from, METADATA_FILE_NAME)))) {
      throw new BackupError(`${from} has no ${METADATA_FILE_NAME}, which its manifest lists: the backup is incomplete, use another one`);
    }
    await copyFileDurably(join(from, METADATA_FILE_NAME), stagedDatabase);
    const { bytes, sha256 } = await sizeAndSha256(stagedDatabase);
    if (bytes !== manifest.database.bytes || sha256 !== manifest.database.sha256) {
      throw new BackupError(`${join(from, METADATA_FILE_NAME)} differs from what the backup's manifest recorded: the backup is damaged, use another one`);
    }
    const snapshot = DatabaseSnapshot.open(stagedDatabase);
    let blobs: FsCopyCounts;
    try {
      snapshot.checkSchemaVersion();
      const problems = snapshot.integrityProblems();
      if (problems.length > 0) {
        throw new BackupError(
          `the backup's database fails SQLite's integrity check (${problems[0]}${problems.length > 1 ? `, and ${problems.length - 1} more` : ""}): use another backup`,
        );
      }
      say("metadata: copied, SHA-256 as recorded, integrity check ok");
      blobs = await copyBlobs(join(from, BLOBS_DIR_NAME), join(staging, BLOBS_DIR_NAME), options);
      for (const kind of BLOB_KINDS) {
        const found = blobs.kinds[kind];
        const recorded = manifest.blobs[kind];
        if (found.objects !== recorded.objects || found.bytes !== recorded.bytes) {
          throw new BackupError(
            `the backup holds ${found.objects} ${kind} objects (${found.bytes} bytes) where its manifest recorded ${recorded.objects} (${recorded.bytes} bytes): the backup is incomplete or was changed, use another one`,
          );
        }
      }
      const { count, missing } = await missingReferences(snapshot, FsBlobStore.at(join(staging, BLOBS_DIR_NAME)));
      if (missing.length > 0) {
        throw new BackupError(
          `${describeMissing(missing)} that the backup's database references ${missing.length === 1 ? "is" : "are"} not in it: use another backup`,
        );
      }
      say(`checked: the ${count} objects the database references are all there`);
    } finally {
      snapshot.close();
    }
    await copyKeyFiles(join(from, KEYS_DIR_NAME), join(staging, KEYS_DIR_NAME), manifest.keyFiles, true);
    options.signal?.throwIfAborted();

    // From here on the data dir changes. The database moves in last: a data dir with a database
    // has everything that database needs.
    if (replaced) {
      // The old database (with its WAL) first, so that no step leaves it beside the new blobs.
      for (const suffix of ["", "-wal", "-shm"]) await rm(join(target, `${METADATA_FILE_NAME}${suffix}`), { force: true });
      for (const name of existing) await rm(join(target, name), { recursive: true, force: true });
    }
    for (const name of [BLOBS_DIR_NAME, KEYS_DIR_NAME, METADATA_FILE_NAME]) {
      if (await exists(join(staging, name))) await rename(join(staging, name), join(target, name));
    }
    await rmdir(staging);
    await fsyncDir(target);
    return { dataDir: target, manifest, blobs, replaced, elapsedMs: performance.now() - started };
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    // A data dir this run created goes too; rmdir leaves one that is not empty.
    if (existing === null) await rmdir(target).catch(() => undefined);
    throw err;
  }
}

/** Reads and checks `source`'s manifest; BackupError naming what is wrong. */
export async function readManifest(source: string): Promise<BackupManifest> {
  const path = join(source, MANIFEST_FILE_NAME);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" || (err as NodeJS.ErrnoException).code === "ENOTDIR") {
      throw new BackupError(`${source} is not a castor backup (it has no ${MANIFEST_FILE_NAME}): give a folder that castor backup wrote`);
    }
    throw err;
  }
  const bad = (why: string) => new BackupError(`${path} is not a valid backup manifest (${why}): give a folder that castor backup wrote, unchanged`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw bad("not JSON");
  }
  const m = value as Partial<BackupManifest> | null;
  if (typeof m !== "object" || m === null || m.format !== MANIFEST_FORMAT) throw bad(`no "format": "${MANIFEST_FORMAT}"`);
  if (m.formatVersion !== MANIFEST_FORMAT_VERSION) {
    throw new BackupError(
      `${path} has format version ${JSON.stringify(m.formatVersion)}, but this castor reads version ${MANIFEST_FORMAT_VERSION}: restore it with the castor version that made it (${String(m.castorVersion)}) or a newer one`,
    );
  }
  const count = (n: unknown) => Number.isSafeInteger(n) && (n as number) >= 0;
  if (!count(m.schemaVersion)) throw bad("no schema version");
  if (m.schemaVersion! > MIGRATIONS.length) {
    throw new BackupError(
      `the backup has schema version ${m.schemaVersion}, but this castor only knows versions up to ${MIGRATIONS.length}: restore it with castor ${String(m.castorVersion)} or newer`,
    );
  }
  const db = m.database;
  if (db?.file !== METADATA_FILE_NAME || !count(db.bytes) || !/^[0-9a-f]{64}$/.test(String(db.sha256))) throw bad("no valid database entry");
  if (!BLOB_KINDS.every((kind) => count(m.blobs?.[kind]?.objects) && count(m.blobs?.[kind]?.bytes))) throw bad("no valid blob counts");
  if (!Array.isArray(m.keyFiles) || !m.keyFiles.every((name) => KEY_FILES.some((key) => key.file === name))) throw bad("unknown key files");
  return m as BackupManifest;
}

/** Copies the blob store at `from` into a new one at `to`, with progress lines. */
function copyBlobs(from: string, to: string, options: CopyRunOptions): Promise<FsCopyCounts> {
  const say = options.progress ?? (() => undefined);
  const everyBlobs = options.progressEveryBlobs ?? DEFAULT_PROGRESS_EVERY_BLOBS;
  const everyBytes = options.progressEveryBytes ?? DEFAULT_PROGRESS_EVERY_BYTES;
  let blobsAtLine = 0;
  let bytesAtLine = 0;
  return FsBlobStore.open(to).then(async (target) => {
    const counts = await copyFsBlobStore(FsBlobStore.at(from), target, {
      method: options.method,
      signal: options.signal,
      onObject: (c) => {
        if (c.objects - blobsAtLine < everyBlobs && c.bytes - bytesAtLine < everyBytes) return;
        blobsAtLine = c.objects;
        bytesAtLine = c.bytes;
        say(`blobs: ${c.objects} (${c.bytes} bytes) so far…`);
      },
    });
    say(`blobs: ${counts.objects} (${counts.bytes} bytes): ${counts.linked} hard-linked, ${counts.copied} copied`);
    return counts;
  });
}

/** Checks each object `snapshot` references against `blobs`; returns how many there are and the missing ones. */
async function missingReferences(snapshot: DatabaseSnapshot, blobs: FsBlobStore): Promise<{ count: number; missing: ReferencedObject[] }> {
  let count = 0;
  const missing: ReferencedObject[] = [];
  for (const object of snapshot.referencedObjects()) {
    count++;
    const size = await blobs.size(blobKeyFromHex(object.kind, object.hex));
    if (size === null || (object.size !== null && size !== object.size)) missing.push(object);
  }
  return { count, missing };
}

/** `xorb 3f…, shard 9a… and 3 more objects`, for an error sentence. */
function describeMissing(missing: readonly ReferencedObject[]): string {
  const named = missing.slice(0, MISSING_NAMED).map((object) => `${object.kind === "inline" ? "inline file" : object.kind.slice(0, -1)} ${object.hex}`);
  const more = missing.length - named.length;
  return `${named.join(", ")}${more > 0 ? ` and ${more} more objects` : ""}`;
}

/**
 * Copies the key files of `names` found in `from` into `to` (a folder only its owner can read,
 * like the data dir's `keys/`); returns the names copied. `required`: each must be there.
 */
async function copyKeyFiles(from: string, to: string, names: readonly string[], required: boolean): Promise<string[]> {
  const copied: string[] = [];
  for (const name of names) {
    if (!(await isFile(join(from, name)))) {
      if (required) throw new BackupError(`the backup's manifest lists the key file ${name}, but ${from} lacks it: the backup is incomplete, use another one`);
      continue;
    }
    if (copied.length === 0) await mkdir(to, { mode: 0o700 });
    await copyFileDurably(join(from, name), join(to, name));
    copied.push(name);
  }
  if (copied.length > 0) await fsyncDir(to);
  return copied;
}

async function writeDurably(path: string, text: string): Promise<void> {
  const file = await open(path, "wx", 0o644);
  try {
    await file.writeFile(text, "utf8");
    await file.sync();
  } finally {
    await file.close();
  }
}

async function sizeAndSha256(path: string): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash("sha256");
  let bytes = 0;
  await pipeline(createReadStream(path), async (pieces: AsyncIterable<Buffer>) => {
    for await (const piece of pieces) {
      bytes += piece.length;
      hash.update(piece);
    }
  });
  return { bytes, sha256: hash.digest("hex") };
}

/** The names in folder `path`, ignoring what a fresh filesystem puts there; null when it does not exist. */
async function entriesOf(path: string): Promise<string[] | null> {
  try {
    return (await readdir(path)).filter((name) => !FILESYSTEM_ENTRIES.has(name));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    if (code === "ENOTDIR") throw new BackupError(`${path} is a file, not a folder: give a folder`);
    throw err;
  }
}

async function isFile(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isFile() ?? false;
}

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null)) !== null;
}

/** `inner` is `outer` or inside it. */
function isWithin(inner: string, outer: string): boolean {
  const path = relative(outer, inner);
  return path === "" || (!path.startsWith("..") && !path.startsWith("/"));
}
