/**
 * Copies every object of one fs blob store into another, file by file: the blob half of
 * `castor backup` and `castor restore` (src/ops/backup.ts).
 *
 * Objects are immutable and content-addressed (castor never writes a published object in place,
 * and deleting one unlinks only its own name), so a hard link serves castor as well as a copy
 * and costs neither bytes nor time. Links are made where the filesystem allows; bytes are copied
 * where it does not (another filesystem, a file the user does not own under
 * `fs.protected_hardlinks`) or when asked: only a copy survives damage to the source's disk,
 * which a link shares.
 *
 * The copy is durable when this returns: copied files are fsynced, and every folder that got new
 * names is fsynced once at the end (a linked object's data was fsynced when it was published).
 * The target is meant to be a fresh store inside a folder that is put in place whole afterwards,
 * so a copy cut short leaves nothing that looks complete.
 */
import { constants as fsConstants } from "node:fs";
import { copyFile, link, mkdir, open, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { BLOB_KINDS, blobKeyParts, type BlobKey, type BlobKind } from "./blob-store.js";
import type { FsBlobStore } from "./fs.js";
import { fsyncDir } from "./fsync-dir.js";

export type CopyMethod = "link" | "copy";

export interface FsCopyOptions {
  /** `link` (default): a hard link where the filesystem allows, else a copy; `copy`: always a copy. */
  method?: CopyMethod;
  /** Called after each object with the counts so far (for progress lines). */
  onObject?: (counts: Readonly<FsCopyCounts>) => void;
  /** Stops the copy between objects; the caller discards the partial target. */
  signal?: AbortSignal;
  /** Objects in flight at once; default 4, enough to overlap the fsyncs of copies. */
  concurrency?: number;
}

export interface FsCopyCounts {
  /** Objects now in the target, per kind, with their bytes. */
  kinds: Record<BlobKind, { objects: number; bytes: number }>;
  objects: number;
  bytes: number;
  /** How the objects got there. */
  linked: number;
  copied: number;
  /** Objects the source listed but deleted before they could be copied. */
  vanished: number;
}

const DEFAULT_CONCURRENCY = 4;
/** link(2) failures that a copy of the same file gets around. */
const LINK_REFUSED = new Set(["EXDEV", "EPERM", "EMLINK", "ENOTSUP", "EOPNOTSUPP"]);

export function emptyCopyCounts(): FsCopyCounts {
  const kinds = Object.fromEntries(BLOB_KINDS.map((kind) => [kind, { objects: 0, bytes: 0 }])) as FsCopyCounts["kinds"];
  return { kinds, objects: 0, bytes: 0, linked: 0, copied: 0, vanished: 0 };
}

/** Copies (or links) every object of `source` into `target`, a freshly opened store; returns the counts. */
export async function copyFsBlobStore(source: FsBlobStore, target: FsBlobStore, options: FsCopyOptions = {}): Promise<FsCopyCounts> {
  const counts = emptyCopyCounts();
  let linkFirst = (options.method ?? "link") === "link";
  const folders = new Map<string, Promise<unknown>>();

  const copyOne = async (key: BlobKey): Promise<void> => {
    const from = source.objectPath(key);
    const to = target.objectPath(key);
    const folder = dirname(to);
    if (!folders.has(folder)) folders.set(folder, mkdir(folder, { recursive: true }));
    await folders.get(folder);
    let how: "linked" | "copied" | "vanished" = "copied";
    try {
      if (linkFirst) {
        try {
          await link(from, to);
          how = "linked";
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code ?? "";
          if (!LINK_REFUSED.has(code)) throw err;
          // Another filesystem refuses every link alike: stop trying instead of failing once per object.
          if (code === "EXDEV") linkFirst = false;
        }
      }
      if (how === "copied") await copyFileDurably(from, to);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      how = "vanished";
    }
    counts[how]++;
    if (how !== "vanished") {
      const { size } = await stat(to);
      const perKind = counts.kinds[blobKeyParts(key).kind];
      perKind.objects++;
      perKind.bytes += size;
      counts.objects++;
      counts.bytes += size;
    }
    options.onObject?.(counts);
  };

  // Workers share one listing; an async generator queues concurrent next() calls, so each key is taken once.
  const keys = source.list()[Symbol.asyncIterator]();
  let failed = false;
  const worker = async (): Promise<void> => {
    while (!failed) {
      options.signal?.throwIfAborted();
      const next = await keys.next();
      if (next.done) return;
      await copyOne(next.value);
    }
  };
  // allSettled: every worker has stopped touching the target before the caller may remove it.
  const results = await Promise.allSettled(
    Array.from({ length: options.concurrency ?? DEFAULT_CONCURRENCY }, () =>
      worker().catch((err: unknown) => {
        failed = true;
        throw err;
      }),
    ),
  );
  const failure = results.find((result): result is PromiseRejectedResult => result.status === "rejected");
  if (failure) throw failure.reason;

  for (const folder of folders.keys()) await fsyncDir(folder);
  for (const kind of BLOB_KINDS) await fsyncDir(join(target.root, kind));
  return counts;
}

/**
 * Copies a file's bytes and mode to a new file and fsyncs it (its folder's fsync is the
 * caller's). Never shares extents (no FICLONE), so the copy survives damage to the source's blocks.
 */
export async function copyFileDurably(from: string, to: string): Promise<void> {
  await copyFile(from, to, fsConstants.COPYFILE_EXCL);
  const copy = await open(to, "r");
  try {
    await copy.sync();
  } finally {
    await copy.close();
  }
}
