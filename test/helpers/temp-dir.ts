/** Temporary folders for tests, removed with everything in them when the tests are done. */
import { after, before } from "node:test";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A fresh folder under the OS temp dir whose name starts with `prefix`. */
export function makeTempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

export function removeTempDir(path: string): Promise<void> {
  return rm(path, { recursive: true, force: true });
}

/**
 * One folder shared by the tests of a file: made before they run, removed after them. Call at
 * the top level of the file; read `.path` inside the tests (it is set once `before` has run).
 */
export function tempDirForFile(prefix: string): { readonly path: string } {
  const dir = { path: "" };
  before(async () => {
    dir.path = await makeTempDir(prefix);
  });
  after(() => removeTempDir(dir.path));
  return dir;
}

/** Runs `body` in a fresh folder, removed afterwards whether `body` succeeds or not. */
export async function withTempDir<T>(prefix: string, body: (dir: string) => Promise<T>): Promise<T> {
  const dir = await makeTempDir(prefix);
  try {
    return await body(dir);
  } finally {
    await removeTempDir(dir);
  }
}
