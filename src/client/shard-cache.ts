/**
 * The client's local shard cache: what it learnt about a CAS server's xorbs, kept between runs
 * so a repeat upload (or a near-duplicate, or a re-run after Ctrl-C) sends only new chunks.
 * Global dedup alone answers only for the first chunk of a file and ~1 in 1,024 others, so
 * most xorbs of a file the server already holds would otherwise never be discovered.
 *
 * Layout, one folder per CAS URL (xorbs known to one server mean nothing to another):
 *
 *     <root>/shards-v1/<sha256(casUrl)[0..16]>/url            the CAS URL, for people
 *     <root>/shards-v1/<…>/shards/<64 hex>.shard   complete shards (footer, no files)
 *     <root>/shards-v1/<…>/chunks/<chunk hash hex> the name of a shard holding it
 *
 * Shards are of two kinds. An upload's shard lists every xorb the upload sent so far (raw
 * chunk hashes); it is rewritten after each acknowledged xorb, so an interrupted upload leaves
 * what it stored, and a later hit on any of its xorbs brings all of them — the rest of a
 * near-duplicate file included, whatever was edited in between. The global-dedup answers
 * received are kept as they came (hashes keyed with the answer's key). A shard is indexed
 * under a few of its chunks: for an uploaded xorb its first chunk, its 1-in-1,024 chunks and
 * every chunk a file started at; for a dedup answer the chunk that was asked about. The
 * uploader checks every chunk it does not know yet against the index (an in-memory set read
 * once per run), so a hit comes at the latest at the next xorb boundary.
 *
 * Concurrent processes: every file is written under a temporary name and renamed into place,
 * so readers see whole files or none; an index entry naming a shard that vanished (evicted by
 * another process) is a miss. The size is bounded across all servers (default 256 MiB of
 * shards, ~350 GiB of uploaded data): the least recently used shards (by mtime, touched on
 * use) are removed after each upload.
 *
 * Everything here is best effort: a cache that cannot be read or written costs deduplication,
 * never an upload. A stale cache (the server lost a xorb since, e.g. `castor gc`) makes the
 * shard registration fail; the uploader then clears this server's folder and uploads again.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, unlink, utimes, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { hashToHex, isGlobalDedupEligible, parseFullShard, serializeFullShard, type Hash, type ParsedFullShard, type ShardXorb } from "../format/index.js";

export const DEFAULT_CACHE_MAX_BYTES = 256 * 1024 * 1024;
const LAYOUT = "shards-v1";
/** Chunk records per upload shard (48 bytes each): ~1.5 MiB of shard, ~1.4 GiB of data. */
const MAX_SESSION_CHUNKS = 32_768;

/**
 * Where the cache lives unless the caller says: `CASTOR_CACHE_DIR`, else
 * `$XDG_CACHE_HOME/castor`, else `~/.cache/castor`. `off` (or `none`, `0`) turns it off: null.
 */
export function defaultCacheDir(env: NodeJS.ProcessEnv = process.env): string | null {
  const configured = env.CASTOR_CACHE_DIR?.trim();
  if (configured !== undefined && configured !== "") return ["off", "none", "0"].includes(configured.toLowerCase()) ? null : configured;
  const xdg = env.XDG_CACHE_HOME?.trim();
  return join(xdg !== undefined && xdg !== "" ? xdg : join(homedir(), ".cache"), "castor");
}

export class ShardCache {
  private readonly shardsDir: string;
  private readonly chunksDir: string;
  /** Index entries present when the run started, plus those this run wrote. */
  private readonly indexed: Set<string>;
  /** Shards this run loaded already: a second index entry naming one is no news. */
  private readonly loadedShards = new Set<string>();
  private readonly writes: Promise<unknown>[] = [];
  /** This run's upload shard: its name, the xorbs it lists so far, and their record bytes. */
  private session = { name: "", xorbs: [] as ShardXorb[], chunks: 0 };
  /** Session writes run one after another: each rewrites the whole shard. */
  private sessionChain: Promise<void> = Promise.resolve();

  private constructor(
    readonly root: string,
    readonly serverDir: string,
    indexed: Set<string>,
    private readonly maxBytes: number,
  ) {
    this.shardsDir = join(serverDir, "shards");
    this.chunksDir = join(serverDir, "chunks");
    this.indexed = indexed;
  }

  /** The cache of `casUrl` under `root`; never fails (an unusable folder is an empty cache). */
  static async open(root: string, casUrl: string, maxBytes: number = DEFAULT_CACHE_MAX_BYTES): Promise<ShardCache> {
    const id = createHash("sha256").update(casUrl).digest("hex").slice(0, 16);
    const serverDir = join(root, LAYOUT, id);
    const names = await readdir(join(serverDir, "chunks")).catch(() => [] as string[]);
    const cache = new ShardCache(root, serverDir, new Set(names.filter((name) => /^[0-9a-f]{64}$/.test(name))), maxBytes);
    await mkdir(join(serverDir, "shards"), { recursive: true })
      .then(() => mkdir(join(serverDir, "chunks"), { recursive: true }))
      .then(() => writeFile(join(serverDir, "url"), `${casUrl}\n`))
      .catch(() => undefined);
    return cache;
  }

  /** How many chunks the index names (for reports and tests). */
  get size(): number {
    return this.indexed.size;
  }

  /** Whether the index names `hash` (a shard may still turn out to be gone). */
  has(hash: Hash): boolean {
    return this.indexed.has(hashToHex(hash));
  }

  /**
   * The shard the index names for `hash`, parsed; null when there is none, it was loaded by
   * this run already, or it vanished or is damaged (the entry is then dropped).
   */
  async load(hash: Hash): Promise<ParsedFullShard | null> {
    const hex = hashToHex(hash);
    const entry = join(this.chunksDir, hex);
    const name = (await readFile(entry, "utf8").catch(() => "")).trim();
    if (!/^[0-9a-f]{64}\.shard$/.test(name)) return null;
    if (this.loadedShards.has(name)) return null;
    this.loadedShards.add(name);
    const path = join(this.shardsDir, name);
    try {
      const shard = parseFullShard(new Uint8Array(await readFile(path)));
      const now = new Date();
      // Touched: eviction removes the least recently used shards first.
      await utimes(path, now, now).catch(() => undefined);
      return shard;
    } catch {
      this.indexed.delete(hex);
      await unlink(entry).catch(() => undefined);
      return null;
    }
  }

  /**
   * Keeps a uploaded xorb's chunk list (raw hashes), indexed under its first chunk, its
   * 1-in-1,024 chunks and `alsoIndex` (chunks of it where files start). Runs in the background;
   * `flush` waits for it.
   */
  putXorb(block: ShardXorb, alsoIndex: (hash: Hash) => boolean): void {
    const keys = block.chunks.filter((chunk, i) => i === 0 || isGlobalDedupEligible(chunk.hash) || alsoIndex(chunk.hash)).map((chunk) => chunk.hash);
    // A new upload shard once this one lists ~1.4 GiB of chunk records (a 1 GiB shard would
    // be loaded whole for one hit, and rewritten after every xorb).
    if (this.session.name === "" || this.session.chunks + block.chunks.length > MAX_SESSION_CHUNKS) {
      this.session = { name: `${randomBytes(32).toString("hex")}.shard`, xorbs: [], chunks: 0 };
    }
    const session = this.session;
    session.xorbs.push(block);
    session.chunks += block.chunks.length;
    const xorbs = session.xorbs.slice();
    const write = this.sessionChain.then(async () => {
      const now = Math.floor(Date.now() / 1000);
      const bytes = serializeFullShard({ files: [], xorbs }, { creationTimestamp: now, keyExpiry: 0 });
      await this.put(bytes, keys, session.name);
    });
    this.sessionChain = write.catch(() => undefined);
    this.background(write);
  }

  /** Keeps a global-dedup answer (a complete shard as received), indexed under the chunk asked about. */
  putAnswer(bytes: Uint8Array, asked: Hash): void {
    this.background(this.put(bytes, [asked]));
  }

  /** Waits for the writes started so far (their failures are ignored). */
  async flush(): Promise<void> {
    await Promise.allSettled(this.writes);
    this.writes.length = 0;
  }

  /** Forgets everything about this server (it lost xorbs the cache named). */
  async clear(): Promise<void> {
    await this.flush();
    this.indexed.clear();
    this.loadedShards.clear();
    await rm(this.serverDir, { recursive: true, force: true }).catch(() => undefined);
  }

  /** Removes the least recently used shards, of every server, until `maxBytes` are left. */
  async evict(): Promise<void> {
    await this.flush();
    const layout = join(this.root, LAYOUT);
    const servers = await readdir(layout).catch(() => [] as string[]);
    const shards: { path: string; size: number; mtimeMs: number }[] = [];
    for (const server of servers) {
      const dir = join(layout, server, "shards");
      for (const name of await readdir(dir).catch(() => [] as string[])) {
        if (!name.endsWith(".shard")) continue;
        const info = await stat(join(dir, name)).catch(() => null);
        if (info !== null) shards.push({ path: join(dir, name), size: info.size, mtimeMs: info.mtimeMs });
      }
    }
    let total = shards.reduce((sum, shard) => sum + shard.size, 0);
    shards.sort((a, b) => a.mtimeMs - b.mtimeMs);
    // Index entries of removed shards stay behind as misses: they are a few bytes each, and
    // another process may be about to point them at a fresh shard.
    for (const shard of shards) {
      if (total <= this.maxBytes) break;
      await unlink(shard.path).catch(() => undefined);
      total -= shard.size;
    }
  }

  private background(write: Promise<void>): void {
    this.writes.push(write.catch(() => undefined));
  }

  private async put(bytes: Uint8Array, keys: readonly Hash[], name = `${createHash("sha256").update(bytes).digest("hex")}.shard`): Promise<void> {
    await writeAtomically(join(this.shardsDir, name), bytes);
    this.loadedShards.add(name);
    for (const key of keys) {
      const hex = hashToHex(key);
      await writeAtomically(join(this.chunksDir, hex), name);
      this.indexed.add(hex);
    }
  }
}

/** Whole file or nothing, even with other processes reading and writing the same names. */
async function writeAtomically(path: string, data: Uint8Array | string): Promise<void> {
  const temporary = `${path}.tmp-${randomBytes(6).toString("hex")}`;
  try {
    await writeFile(temporary, data);
    await rename(temporary, path);
  } catch (error) {
    await unlink(temporary).catch(() => undefined);
    throw error;
  }
}
