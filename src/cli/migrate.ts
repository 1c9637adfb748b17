/**
 * `castor migrate --from DATA_DIR`: copies an embedded data dir into the configured PostgreSQL
 * and S3 stores with `migrateStores` (src/ops/migrate.ts, which says what is copied and in which
 * order), checking the source and target first and saying afterwards how to carry the keys.
 */
import { constants as fsConstants } from "node:fs";
import { access, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { DEDUP_KEY_SEED_FILE_NAME, keysDir, SIGNING_KEY_FILE_NAME, URL_KEY_FILE_NAME } from "../auth/keys.js";
import { loadConfig, type CastorConfig } from "../config.js";
import { openMetadataStore } from "../metadata/open.js";
import { METADATA_FILE_NAME, SqliteMetadataStore } from "../metadata/sqlite.js";
import { migrateStores, type MigrationSource, type MigrationTarget } from "../ops/migrate.js";
import type { BlobStore } from "../storage/blob-store.js";
import { openFsBlobStore } from "../storage/fs.js";
import { BLOBS_DIR_NAME, openBlobStore } from "../storage/open.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, UsageError, expectPositionals, formatTable, parseCommandLine, runCommand } from "./args.js";

const USAGE = `Usage: castor migrate --from DATA_DIR

Copies everything of the embedded data dir DATA_DIR (repositories, revisions, commits,
trees, hub tokens, xorbs, shards, inline files, the SHA-256 and dedup indexes, the daily
storage statistics samples) into the configured stores: PostgreSQL (CASTOR_DATABASE_URL) and
S3 (CASTOR_S3_BUCKET, CASTOR_S3_ENDPOINT, …). Safe to run again: an interrupted run
completes, a repeated one copies nothing. Stop the embedded server first (or run again after
stopping it). Progress goes to stderr; the summary, and how to carry the server's keys to the
new nodes, to stdout.

  --from DATA_DIR   the embedded data dir to copy (the CASTOR_DATA_DIR of the old server)

${CONFIG_FLAGS_HELP}
`;

export async function run(argv: string[]): Promise<number> {
  return runCommand("migrate", async () => {
    const args = parseCommandLine(argv, { from: { type: "string" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    if (args.values.from === undefined || args.values.from === "") {
      throw new UsageError("--from DATA_DIR is required: the embedded data dir to copy (the old server's CASTOR_DATA_DIR)");
    }
    const from = resolve(args.values.from);
    const config = loadConfig(process.env, args.configFlags);
    await checkSource(from);
    checkTarget(config, from);

    const say = (line: string) => process.stderr.write(`castor migrate: ${line}\n`);
    say(`copying ${from} into ${describeTarget(config)}`);
    const steps = await withStores(config, from, (source, target) => migrateStores(source, target, { progress: say }));
    const copied = steps.reduce((sum, step) => sum + step.copied, 0);
    process.stdout.write(
      formatTable(
        ["WHAT", "IN SOURCE", "COPIED NOW"],
        steps.map((step) => [step.name, String(step.inSource), String(step.copied)]),
      ),
    );
    process.stdout.write(
      copied === 0
        ? "Nothing new to copy: the target already holds everything of the source.\n"
        : `Copied ${copied} objects and rows; running again copies nothing more.\n`,
    );
    process.stdout.write(await keysAdvice(from, config));
    return EXIT_OK;
  });
}

async function checkSource(from: string): Promise<void> {
  const info = await stat(from).catch(() => null);
  if (info === null || !info.isDirectory()) {
    throw new UsageError(`--from ${from} does not exist or is not a folder: give the embedded server's data dir (its CASTOR_DATA_DIR)`);
  }
  const database = join(from, METADATA_FILE_NAME);
  if (
    !(await access(database, fsConstants.R_OK).then(
      () => true,
      () => false,
    ))
  ) {
    throw new UsageError(`${from} is not a castor data dir: it has no readable ${METADATA_FILE_NAME}`);
  }
}

/** Refuses a target that is the source itself (the embedded stores of the same data dir). */
function checkTarget(config: CastorConfig, from: string): void {
  const sameDir = resolve(config.dataDir) === from;
  const same = [
    ...(config.databaseUrl === null && sameDir ? [`its metadata (${METADATA_FILE_NAME})`] : []),
    ...(config.s3 === null && sameDir ? [`its objects (${BLOBS_DIR_NAME}/)`] : []),
  ];
  if (same.length > 0) {
    throw new UsageError(
      `the target is ${from} itself (${same.join(" and ")}): set CASTOR_DATABASE_URL (PostgreSQL) and CASTOR_S3_BUCKET with the other CASTOR_S3_* settings to migrate into the scale-out stores`,
    );
  }
}

function describeTarget(config: CastorConfig): string {
  const metadata = config.databaseUrl !== null ? `PostgreSQL ${describeDatabaseUrl(config.databaseUrl)}` : `SQLite in ${config.dataDir}`;
  const objects =
    config.s3 !== null
      ? `S3 bucket ${config.s3.bucket}${config.s3.prefix ? ` (prefix ${config.s3.prefix})` : ""}${config.s3.endpoint ? ` at ${config.s3.endpoint}` : ""}`
      : `files in ${join(config.dataDir, BLOBS_DIR_NAME)}`;
  return `${metadata} and ${objects}`;
}

/** host:port/database, never the password. */
function describeDatabaseUrl(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    return `${url.hostname}:${url.port || "5432"}${url.pathname}`;
  } catch {
    return "(CASTOR_DATABASE_URL)";
  }
}

/** Opens both sides, runs `work`, closes everything (also on failure). */
async function withStores<T>(config: CastorConfig, from: string, work: (source: MigrationSource, target: MigrationTarget) => Promise<T>): Promise<T> {
  const opened: { close(): unknown }[] = [];
  // The S3 store stages bodies in a local folder; the migration's own, removed afterwards.
  let stagingRoot: string | undefined;
  try {
    const sourceMetadata = await SqliteMetadataStore.open(from);
    opened.push(sourceMetadata);
    const blobsDir = join(from, BLOBS_DIR_NAME);
    const sourceBlobs = (await stat(blobsDir).catch(() => null))?.isDirectory() ? await openFsBlobStore(blobsDir) : null;
    const targetMetadata = await openMetadataStore(config);
    opened.push(targetMetadata);
    if (config.s3 !== null) stagingRoot = await mkdtemp(join(tmpdir(), "castor-migrate-"));
    const targetBlobs: BlobStore = await openBlobStore({ dataDir: stagingRoot ?? config.dataDir, s3: config.s3 });
    opened.push({ close: () => targetBlobs.close?.() });
    return await work({ metadata: sourceMetadata, blobs: sourceBlobs }, { metadata: targetMetadata, blobs: targetBlobs });
  } finally {
    for (const store of opened.reverse()) await store.close();
    if (stagingRoot !== undefined) await rm(stagingRoot, { recursive: true, force: true });
  }
}

/**
 * How to give the new nodes the embedded server's keys, so that what it handed out stays valid:
 * CAS access tokens (signing key), transfer URLs (URL key), dedup answers clients cached (seed).
 * Hub tokens live in the database and need nothing. Secrets are never printed, only where they are.
 */
async function keysAdvice(from: string, config: CastorConfig): Promise<string> {
  const dir = keysDir(from);
  const read = (name: string) =>
    readFile(join(dir, name), "utf8").then(
      (text) => text.trim(),
      () => null,
    );
  const signingKey = await read(SIGNING_KEY_FILE_NAME);
  const urlKey = await read(URL_KEY_FILE_NAME);
  const dedupSeed = await read(DEDUP_KEY_SEED_FILE_NAME);
  if (signingKey === null && urlKey === null && dedupSeed === null) {
    return `\nKeys: ${dir} holds no keys (the embedded server never started): nothing to carry over.\n`;
  }
  const lines = [
    "",
    "Keys: start every node with the embedded server's keys, so the CAS access tokens, transfer URLs",
    "and dedup answers it handed out stay valid (hub tokens are in the database already):",
  ];
  const warnings: string[] = [];
  if (signingKey !== null) {
    lines.push(`  CASTOR_SIGNING_KEY_FILE=${join(dir, SIGNING_KEY_FILE_NAME)}   (copy this file to each node and point the setting at the copy)`);
    const configured =
      config.signingKeyFile === null
        ? null
        : await readFile(config.signingKeyFile, "utf8").then(
            (text) => text.trim(),
            () => "",
          );
    if (configured !== null && configured !== signingKey)
      warnings.push("CASTOR_SIGNING_KEY_FILE here names another key: CAS access tokens of the old server would be refused");
  }
  if (urlKey !== null) {
    lines.push(`  CASTOR_URL_KEY="$(cat ${join(dir, URL_KEY_FILE_NAME)})"`);
    if (config.urlKey !== null && config.urlKey !== urlKey) warnings.push("CASTOR_URL_KEY here differs: transfer URLs of the old server would be refused");
  }
  if (dedupSeed !== null) {
    lines.push(`  CASTOR_DEDUP_KEY_SEED="$(cat ${join(dir, DEDUP_KEY_SEED_FILE_NAME)})"`);
    if (config.dedupKeySeed !== null && config.dedupKeySeed !== dedupSeed)
      warnings.push("CASTOR_DEDUP_KEY_SEED here differs: dedup answers clients cached would no longer match");
  }
  lines.push("Keep CASTOR_PUBLIC_URL as it was, or put the nodes behind the same path, for old transfer URLs to reach them.");
  for (const warning of warnings) lines.push(`Warning: ${warning}.`);
  return `${lines.join("\n")}\n`;
}
