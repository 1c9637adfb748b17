/**
 * A fetch's pack as a stream: the planned objects (walk.ts) read from the source a few at a
 * time, deflated and written in order, so the server holds a handful of objects however large
 * the pack. Reading runs ahead of writing by READ_AHEAD objects, which keeps the store (a
 * database for trees, the blob store for files) busy while the client receives.
 */
import { encodeTreeObject } from "../format/git.js";
import { PackWriter, type PackObjectType } from "../format/git-pack.js";
import type { GitObjectSource } from "./source.js";
import type { PlannedObject } from "./walk.js";

/** Objects read ahead of the one being written. */
const READ_AHEAD = 16;

async function bodyOf(source: GitObjectSource, object: PlannedObject): Promise<Buffer> {
  if (object.body !== undefined) return object.body;
  if (object.type === "commit") {
    const commit = await source.commit(object.oid);
    if (commit === null) throw new Error(`commit ${object.oid} disappeared from the repository while it was packed`);
    return commit.body;
  }
  if (object.type === "tree") {
    const tree = await source.tree(object.oid);
    if (tree === null) throw new Error(`tree ${object.oid} disappeared from the repository while it was packed`);
    return encodeTreeObject(tree.entries);
  }
  const blob = await source.blob(object.oid);
  if (blob === null) throw new Error(`blob ${object.oid} could not be read from the repository`);
  return blob;
}

/** The pack's bytes, piece by piece (header, one piece per object, checksum). */
export async function* packObjects(source: GitObjectSource, objects: readonly PlannedObject[], level = 1): AsyncGenerator<Buffer> {
  const writer = new PackWriter({ level });
  yield writer.header(objects.length);
  const reads: Promise<Buffer>[] = [];
  const start = (index: number) => {
    if (index >= objects.length) return;
    const read = bodyOf(source, objects[index]);
    // Read ahead; a failure is seen (and thrown) when its object's turn comes.
    read.catch(() => undefined);
    reads[index] = read;
  };
  for (let i = 0; i < Math.min(READ_AHEAD, objects.length); i++) start(i);
  for (let i = 0; i < objects.length; i++) {
    const body = await reads[i];
    delete reads[i];
    start(i + READ_AHEAD);
    yield writer.object(objects[i].type as PackObjectType, body);
  }
  yield writer.trailer();
}
