/**
 * Space held back on the data disk for maintenance. Once uploads (or anything else) have filled
 * the disk, the one thing that frees space — `castor gc` — must itself write first: SQLite
 * deletes rows through its write-ahead log, and gc removes a xorb's record before its blob.
 * Measured on a full tmpfs, gc then fails at its first transaction with SQLITE_FULL, and the
 * store stays full.
 *
 * So castor keeps a file of `CASTOR_RESERVED_SPACE` bytes in the data dir (written out, not
 * sparse: a sparse file would reserve nothing). `castor serve` makes it at start-up when there
 * is room; `castor gc` and `castor fsck --repair` (and the scheduled gc) remove it when the disk
 * is nearly full, do their work in the space it leaves, and make it again afterwards if there is
 * room. A person can also delete it by hand to get a full store going; it comes back at the
 * next start.
 */
import { randomFillSync } from "node:crypto";
import { existsSync } from "node:fs";
import { open, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { CastorConfig } from "../config.js";
import { freeSpaceOf } from "./full.js";

export const RESERVE_FILE_NAME = "reserved-space";
const WRITE_PIECE_BYTES = 1024 * 1024;

const PARTIAL_PREFIX = `${RESERVE_FILE_NAME}.partial-`;

/** Removes reserves cut short by a process that died while writing one (its pid no longer runs). */
async function removeAbandonedPartials(dataDir: string): Promise<void> {
  for (const name of await readdir(dataDir)) {
    if (!name.startsWith(PARTIAL_PREFIX)) continue;
    const pid = Number(name.slice(PARTIAL_PREFIX.length));
    if (Number.isInteger(pid) && pid !== process.pid && isRunning(pid)) continue;
    await rm(join(dataDir, name), { force: true });
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

export type ReserveOutcome = "present" | "created" | "no room" | "off";

export interface Reserve {
  dataDir: string;
  /** CASTOR_RESERVED_SPACE. */
  bytes: number;
  /** CASTOR_MIN_FREE_BYTES: the reserve is not made where it would leave less available. */
  keepFreeBytes: number;
}

/** The reserve file's size in `dataDir`, or 0 when there is none. */
async function reserveSize(dataDir: string): Promise<number> {
  try {
    return (await stat(join(dataDir, RESERVE_FILE_NAME))).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw error;
  }
}

/**
 * Makes the reserve of `bytes` in `dataDir` unless it is there already. It is written under a
 * temporary name and renamed, so a reserve cut short (by a crash or a full disk) is never taken
 * for a whole one. Leaves at least `keepFreeBytes` available: the reserve must not itself be
 * what fills the disk.
 */
export async function ensureReserve({ dataDir, bytes, keepFreeBytes }: Reserve): Promise<ReserveOutcome> {
  if (bytes === 0) {
    await rm(join(dataDir, RESERVE_FILE_NAME), { force: true });
    return "off";
  }
  if ((await reserveSize(dataDir)) === bytes) return "present";
  await removeAbandonedPartials(dataDir);
  // One name per process: the workers of `castor serve --workers N` may make it at the same time.
  const temporary = join(dataDir, `${PARTIAL_PREFIX}${process.pid}`);
  if ((await freeSpaceOf(dataDir)).availableBytes - bytes < keepFreeBytes) return "no room";
  const file = await open(temporary, "w");
  try {
    // Random bytes, not zeros: a compressing filesystem (btrfs, ZFS) would store zeros in nothing.
    const piece = randomFillSync(Buffer.alloc(Math.min(bytes, WRITE_PIECE_BYTES)));
    for (let written = 0; written < bytes; written += piece.length) {
      await file.write(piece, 0, Math.min(piece.length, bytes - written));
    }
    await file.sync();
  } catch (error) {
    await file.close();
    await rm(temporary, { force: true });
    if ((error as NodeJS.ErrnoException).code === "ENOSPC" || (error as NodeJS.ErrnoException).code === "EDQUOT") return "no room";
    throw error;
  }
  await file.close();
  await rename(temporary, join(dataDir, RESERVE_FILE_NAME));
  return "created";
}

/**
 * Runs `work` (a maintenance command that writes) with the reserve released when the data disk
 * has less than the reserve's size available, and tries to make the reserve again afterwards.
 * `say` hears what was done with it.
 */
export async function withReserveReleased<T>(reserve: Reserve | null, say: (line: string) => void, work: () => Promise<T>): Promise<T> {
  if (reserve === null || reserve.bytes === 0) return work();
  const held = await reserveSize(reserve.dataDir);
  if (held > 0 && (await freeSpaceOf(reserve.dataDir)).availableBytes < reserve.bytes) {
    await rm(join(reserve.dataDir, RESERVE_FILE_NAME), { force: true });
    say(`the data disk is nearly full: released the ${held} bytes reserved for maintenance (CASTOR_RESERVED_SPACE)`);
  }
  try {
    return await work();
  } finally {
    // A command that failed before it made the data dir leaves nothing to reserve space in.
    const outcome = !existsSync(reserve.dataDir) ? "off" : await ensureReserve(reserve).catch(() => "no room" as const);
    if (outcome === "created") say(`reserved ${reserve.bytes} bytes for maintenance again (CASTOR_RESERVED_SPACE)`);
    if (outcome === "no room") say(`no room to reserve ${reserve.bytes} bytes for maintenance yet (CASTOR_RESERVED_SPACE): free more space`);
  }
}

/** Where and how much to reserve under `config`; null when the data dir holds no stored data (PostgreSQL and S3 both configured). */
export function reserveOf(config: Pick<CastorConfig, "dataDir" | "databaseUrl" | "s3" | "reservedSpaceBytes" | "minFreeBytes">): Reserve | null {
  if (config.databaseUrl !== null && config.s3 !== null) return null;
  return { dataDir: config.dataDir, bytes: config.reservedSpaceBytes, keepFreeBytes: config.minFreeBytes };
}
