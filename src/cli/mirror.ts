/**
 * `castor mirror pull` and `castor mirror list`: the mirror of the upstream hub
 * (CASTOR_UPSTREAM_URL) from the command line, on the server's stores like the other admin
 * commands. `pull` fetches a snapshot ahead of time — so it is there when clients ask, and when
 * the upstream is no longer reachable (an air gap) — with progress on stderr; `list` shows the
 * mirrored repositories with their revisions, the bytes castor holds of them and their last use.
 */
import { FileReader } from "../cas/file-reader.js";
import { XorbIngestService } from "../cas/xorb-ingest.js";
import { formatBytes, ProgressRenderer } from "../client/progress.js";
import { OPERATOR } from "../hub/access.js";
import { HubError } from "../hub/errors.js";
import { formatRepoRef, parseRepoRef } from "../hub/names.js";
import { TreeReader } from "../hub/paths.js";
import type { MetadataStore, Repo, TreeFileEntry } from "../metadata/store.js";
import { MirrorSource } from "../mirror/source.js";
import { hashFromHex } from "../format/hash.js";
import type { BlobStore } from "../storage/blob-store.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, formatTable, formatTime, parseCommandLine, runCommand, runSubcommand, UsageError } from "./args.js";
import { loadAdminConfig, withStores } from "./stores.js";
import type { CastorConfig, UpstreamConfig } from "../config.js";

const USAGE = `Usage: castor mirror pull TYPE:NAMESPACE/NAME[@REVISION] [--include GLOB]…
       castor mirror list

The mirror of the upstream hub CASTOR_UPSTREAM_URL names (castor mirrors one when it is set):

  pull    fetch a repository's files at a revision (default main) ahead of time, so that
          clients get them from castor, also once the upstream cannot be reached
  list    the mirrored repositories: revisions, bytes held, last use

Run 'castor mirror pull --help' for its options.
`;

const PULL_USAGE = `Usage: castor mirror pull TYPE:NAMESPACE/NAME[@REVISION] [--include GLOB]… [--json]

Fetches the files of a repository of the upstream hub (CASTOR_UPSTREAM_URL) at REVISION — a
branch, tag or commit id; default main — into castor, as if clients had asked for them: Xet
files through the upstream's Xet protocol, only the chunks castor does not hold, each file
verified before it is stored. Files castor holds already are skipped. Progress on stderr.

  --include GLOB  only the paths matching GLOB (* and ? as in 'hf download --include'; may be
                  repeated; default: every file)
  --json          print the summary as JSON

castor's identity upstream is CASTOR_UPSTREAM_TOKEN; CASTOR_UPSTREAM_REPOS must admit the
repository. Run it next to the server (same data dir or database): the server serves what it
pulls at once.

${CONFIG_FLAGS_HELP}

Exit codes: 0 pulled, 1 a file could not be fetched or verified (what was fetched stays), 2 bad
command line or no upstream configured.
`;

const LIST_USAGE = `Usage: castor mirror list [--json]

The repositories castor mirrors from its upstream hub: each known revision and the commit it
pointed at when last asked, the files and bytes castor holds of those revisions, and when the
repository was last used. Mirrored files are evicted by 'castor gc --mirror-unused D' and by
CASTOR_UPSTREAM_MAX_BYTES.

${CONFIG_FLAGS_HELP}
`;

export function run(argv: string[]): Promise<number> {
  return runSubcommand("mirror", USAGE, { pull, list }, argv);
}

function upstreamOf(config: CastorConfig): UpstreamConfig {
  if (config.upstream === null) throw new UsageError("castor mirrors no hub: set CASTOR_UPSTREAM_URL (e.g. https://huggingface.co), as for 'castor serve'");
  return config.upstream;
}

function sourceFor(config: CastorConfig, store: MetadataStore, blobs: BlobStore): MirrorSource {
  const quiet = { info: () => undefined, warn: (_fields: Record<string, unknown>, message: string) => process.stderr.write(`castor mirror: ${message}\n`) };
  return new MirrorSource({
    settings: upstreamOf(config),
    store,
    blobs,
    xorbs: new XorbIngestService({ blobs, metadata: store, maxBodyBytes: config.maxXorbBytes }),
    reader: new FileReader({ metadata: store, blobs }),
    log: quiet,
  });
}

/** `*` and `?` as fnmatch reads them (what `hf download --include` uses): `*` crosses `/` too. */
function includePattern(glob: string): RegExp {
  return new RegExp(
    `^${glob
      .replace(/[.+^${}()|[\]\\]/g, "\\$&")
      .replace(/\*/g, ".*")
      .replace(/\?/g, ".")}$`,
  );
}

function pull(argv: string[]): Promise<number> {
  return runCommand("mirror pull", async () => {
    const args = parseCommandLine(argv, { include: { type: "string", multiple: true }, json: { type: "boolean" } });
    if (args.help) {
      process.stdout.write(PULL_USAGE);
      return EXIT_OK;
    }
    const [target] = expectPositionals(args.positionals, ["TYPE:NAMESPACE/NAME[@REVISION]"]);
    const at = target.indexOf("@");
    const ref = parseRepoRef(at === -1 ? target : target.slice(0, at));
    const revision = at === -1 ? "main" : target.slice(at + 1);
    if (revision === "") throw new UsageError("the revision after @ is empty: name a branch, tag or commit id, or leave out @");
    const includes = (args.values.include ?? []).map(includePattern);
    const config = loadAdminConfig(args.configFlags);
    upstreamOf(config);
    const summary = await withStores(config, async (store, blobs) => {
      const source = sourceFor(config, store, blobs);
      const repo = await mirroredRepo(store, source, ref.type, ref.name);
      const commit = await source.resolve(repo, revision);
      const files: { path: string; entry: TreeFileEntry }[] = [];
      for await (const { path, entry } of new TreeReader(store, repo.id).walk(commit.treeOid, "", true)) {
        if (entry.type === "file" && (includes.length === 0 || includes.some((pattern) => pattern.test(path)))) files.push({ path, entry });
      }
      const total = files.reduce((sum, file) => sum + file.entry.size, 0);
      let done = 0;
      let fetched = 0;
      let pulled = 0;
      const progress = new ProgressRenderer(process.stderr);
      source.countInto({ upstreamRequest: () => undefined, fetched: (bytes) => (fetched += bytes), served: () => undefined, read: () => undefined });
      for (const { path, entry } of files) {
        progress.update({ operation: "download", phase: "downloading", bytesDone: done, bytesTotal: total, transferredBytes: fetched, file: path });
        try {
          if ((await source.ensureFile(repo, commit, path, entry)) !== null) pulled++;
        } catch (error) {
          progress.clear();
          throw error;
        }
        done += entry.size;
      }
      progress.update({ operation: "download", phase: "downloading", bytesDone: done, bytesTotal: total, transferredBytes: fetched });
      progress.finish();
      return { repo: formatRepoRef(repo), revision, commit: commit.oid, files: files.length, pulled, bytes: total, fetchedBytes: fetched };
    });
    if (args.values.json) {
      process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
    } else {
      process.stdout.write(
        `Pulled ${summary.repo} at ${summary.revision} (commit ${summary.commit}): ${summary.files} files, ${formatBytes(summary.bytes)}; ` +
          `${summary.pulled} fetched (${formatBytes(summary.fetchedBytes)} from the upstream), ${summary.files - summary.pulled} held already.\n`,
      );
    }
    return EXIT_OK;
  });
}

/** The mirrored repository of that name, looked up upstream the first time; a local repository of that name is refused. */
async function mirroredRepo(store: MetadataStore, source: MirrorSource, type: Repo["type"], name: string): Promise<Repo> {
  const held = await store.getRepo(type, name);
  if (held !== null && !held.mirror)
    throw new UsageError(`${type}:${name} is castor's own repository, not a mirrored one: local names win over the upstream's`);
  if (held !== null) return held;
  if (!source.admits(type, name)) throw new UsageError(`CASTOR_UPSTREAM_REPOS does not admit ${type}:${name}`);
  const found = await source.lookup(OPERATOR, type, name);
  if (found === null)
    throw new HubError(
      404,
      `the upstream hub ${source.origin} has no repository ${type}:${name} (or castor's identity there, CASTOR_UPSTREAM_TOKEN, may not see it)`,
      "RepoNotFound",
    );
  return found;
}

function list(argv: string[]): Promise<number> {
  return runCommand("mirror list", async () => {
    const args = parseCommandLine(argv, { json: { type: "boolean" } });
    if (args.help) {
      process.stdout.write(LIST_USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    const config = loadAdminConfig(args.configFlags);
    const rows = await withStores(config, async (store) => {
      const uses = await store.mirror.mirroredRepoUses();
      const repos = (await store.listRepos()).filter((repo) => repo.mirror);
      const out = [];
      for (const repo of repos) {
        const refs = (await store.mirror.listMirrorRefs(repo.id)).filter((ref) => ref.commitOid !== null);
        const held = await heldOf(
          store,
          repo,
          refs.map((ref) => ref.commitOid!),
        );
        out.push({
          repo: formatRepoRef(repo),
          private: repo.private,
          revisions: refs.map((ref) => ({ name: ref.name, commit: ref.commitOid!, checkedAt: ref.checkedAt.toISOString() })),
          files: held.files,
          bytes: held.bytes,
          lastUsed: (uses.get(repo.id) ?? repo.createdAt).toISOString(),
        });
      }
      return { repositories: out, totals: await store.mirror.mirroredTotals() };
    });
    if (args.values.json) {
      process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
      return EXIT_OK;
    }
    if (rows.repositories.length === 0) {
      process.stderr.write("castor mirrors no repository yet: clients' first requests, or 'castor mirror pull', add them.\n");
      return EXIT_OK;
    }
    process.stdout.write(
      formatTable(
        ["REPOSITORY", "REVISIONS", "FILES", "BYTES", "LAST USED"],
        rows.repositories.map((row) => [
          row.repo,
          row.revisions.map((r) => `${r.name}@${r.commit.slice(0, 8)}`).join(", ") || "-",
          String(row.files),
          formatBytes(row.bytes),
          formatTime(new Date(row.lastUsed)),
        ]),
      ),
    );
    const { totals } = rows;
    process.stderr.write(
      `${totals.files} mirrored files held, ${formatBytes(totals.bytes)}; ${formatBytes(totals.fetchedBytes)} fetched from the upstream for them.\n`,
    );
    return EXIT_OK;
  });
}

/** The distinct files of the commits castor holds for the repository, and their bytes. */
async function heldOf(store: MetadataStore, repo: Repo, commits: string[]): Promise<{ files: number; bytes: number }> {
  const seen = new Set<string>();
  let files = 0;
  let bytes = 0;
  const reader = new TreeReader(store, repo.id);
  for (const oid of new Set(commits)) {
    const commit = await store.getCommit(repo.id, oid);
    if (commit === null) continue;
    for await (const { entry } of reader.walk(commit.treeOid, "", true)) {
      if (entry.type !== "file" || seen.has(entry.oid)) continue;
      seen.add(entry.oid);
      const isHeld =
        entry.xetHash !== null
          ? await store.isFileInRepo(hashFromHex(entry.xetHash), repo.id)
          : entry.size === 0 || (await store.mirror.findMirroredInline(entry.oid)) !== null;
      if (!isHeld) continue;
      files++;
      bytes += entry.size;
    }
  }
  return { files, bytes };
}
