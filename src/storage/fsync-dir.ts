import { open } from "node:fs/promises";

/**
 * Makes a folder's entries (a new file or link, an unlink) durable, so they survive a power
 * cut; data fsync alone does not. Shared by the fs blob store and the key files.
 */
export async function fsyncDir(path: string): Promise<void> {
  const dir = await open(path, "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
