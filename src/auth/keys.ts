/**
 * The server's secrets: the Ed25519 key that signs CAS access tokens, the HMAC key of transfer
 * URLs and the seed of the dedup-response keys. Each comes from configuration when given (the
 * scaled-out case: every node must hold the same values) and is otherwise generated once into
 * `${dataDir}/keys/` and reused on every later start.
 *
 * Generated secrets are written in the very form the matching setting accepts, so moving from
 * one node to several is a copy: `CASTOR_URL_KEY="$(cat keys/url-key)"`,
 * `CASTOR_SIGNING_KEY_FILE=keys/jwt-signing-key.pem`.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, type KeyObject } from "node:crypto";
import { link, mkdir, open, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { ConfigError, type CastorConfig } from "../config.js";
import { fsyncDir } from "../storage/fsync-dir.js";

export interface CastorKeys {
  /** Ed25519 private key; signs CAS access tokens. */
  jwtSigningKey: KeyObject;
  /** Its public half: everything a node needs to verify a CAS access token. */
  jwtPublicKey: KeyObject;
  /** HMAC key of signed transfer URLs (the UTF-8 bytes of the secret string). */
  urlKey: Buffer;
  /** Seed the rotating dedup-response HMAC keys derive from (the UTF-8 bytes of the secret string). */
  dedupKeySeed: Buffer;
}

export type KeyConfig = Pick<CastorConfig, "dataDir" | "signingKeyFile" | "urlKey" | "dedupKeySeed">;

export const KEYS_DIR_NAME = "keys";
export const SIGNING_KEY_FILE_NAME = "jwt-signing-key.pem";
export const URL_KEY_FILE_NAME = "url-key";
export const DEDUP_KEY_SEED_FILE_NAME = "dedup-key-seed";

/** Same floor as the CASTOR_URL_KEY / CASTOR_DEDUP_KEY_SEED settings. */
const MIN_SECRET_CHARS = 32;
/** A PEM Ed25519 key is ~120 bytes; anything far larger is not a key, so never read it whole. */
const MAX_KEY_FILE_BYTES = 64 * 1024;

export function keysDir(dataDir: string): string {
  return join(dataDir, KEYS_DIR_NAME);
}

/**
 * Loads every secret, generating the missing ones. Safe when several processes start on one
 * data dir at once: all of them end up with the same keys (see `createOnce`).
 */
export async function loadOrCreateKeys(config: KeyConfig): Promise<CastorKeys> {
  const dir = keysDir(config.dataDir);
  const needsDir = config.signingKeyFile === null || config.urlKey === null || config.dedupKeySeed === null;
  if (needsDir) await mkdir(dir, { recursive: true, mode: 0o700 });

  const jwtSigningKey =
    config.signingKeyFile !== null
      ? parseSigningKey(await readKeyFile(config.signingKeyFile, "CASTOR_SIGNING_KEY_FILE"), `CASTOR_SIGNING_KEY_FILE (${config.signingKeyFile})`)
      : parseSigningKey(await createOnce(join(dir, SIGNING_KEY_FILE_NAME), generateSigningKeyPem), generatedKeyLabel(dir, SIGNING_KEY_FILE_NAME));

  const urlKey = config.urlKey ?? (await generatedSecret(dir, URL_KEY_FILE_NAME));
  const dedupKeySeed = config.dedupKeySeed ?? (await generatedSecret(dir, DEDUP_KEY_SEED_FILE_NAME));

  return {
    jwtSigningKey,
    jwtPublicKey: createPublicKey(jwtSigningKey),
    urlKey: Buffer.from(urlKey, "utf8"),
    dedupKeySeed: Buffer.from(dedupKeySeed, "utf8"),
  };
}

function generateSigningKeyPem(): string {
  return generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }).toString();
}

/** 32 random bytes as base64url: 43 characters, valid as the matching setting's value. */
function generateSecret(): string {
  return `${randomBytes(32).toString("base64url")}\n`;
}

async function generatedSecret(dir: string, fileName: string): Promise<string> {
  const secret = (await createOnce(join(dir, fileName), generateSecret)).trim();
  if (secret.length < MIN_SECRET_CHARS) {
    throw new ConfigError(
      `${generatedKeyLabel(dir, fileName)} is damaged (shorter than ${MIN_SECRET_CHARS} characters): delete it to generate a new one, which invalidates the URLs and keys handed out with the old one`,
    );
  }
  return secret;
}

function generatedKeyLabel(dir: string, fileName: string): string {
  return `the generated key file ${join(dir, fileName)}`;
}

function parseSigningKey(pem: string, label: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch {
    throw new ConfigError(
      `${label} is not a PEM private key: give an Ed25519 key, e.g. one made by \`openssl genpkey -algorithm ed25519 -out jwt-signing-key.pem\``,
    );
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new ConfigError(
      `${label} holds a ${key.asymmetricKeyType ?? "non-asymmetric"} key, but CAS access tokens are signed with Ed25519: give a key made by \`openssl genpkey -algorithm ed25519\``,
    );
  }
  return key;
}

async function readKeyFile(path: string, setting: string): Promise<string> {
  try {
    return await readBounded(path);
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new ConfigError(`${setting} names ${path}, which cannot be read (${reason}): check the path and its permissions`);
  }
}

async function readBounded(path: string): Promise<string> {
  const handle = await open(path, "r");
  try {
    const { size } = await handle.stat();
    if (size > MAX_KEY_FILE_BYTES) {
      throw new ConfigError(`${path} is ${size} bytes, far too large for a key file: point the setting at the PEM key itself`);
    }
    return await handle.readFile("utf8");
  } finally {
    await handle.close();
  }
}

/**
 * Returns the content of `path`, creating it with `generate()` if it does not exist yet.
 *
 * Race-free across processes: the content is written and fsynced to a private temp file,
 * then hard-linked to the final name. `link` fails with EEXIST instead of overwriting, so the
 * first process to link wins and every other one discards its candidate and reads the
 * winner's file. Readers never see a partly written key, which an exclusive-create-then-write
 * would allow, and nobody's key is replaced after use, which a plain rename would allow.
 */
async function createOnce(path: string, generate: () => string): Promise<string> {
  const existing = await readIfExists(path);
  if (existing !== null) return existing;

  const content = generate();
  const tempPath = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  const handle = await open(tempPath, "wx", 0o600);
  try {
    await handle.writeFile(content, "utf8");
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await link(tempPath, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    const winner = await readIfExists(path);
    if (winner === null) throw new Error(`key file ${path} vanished right after another process created it`);
    return winner;
  } finally {
    await unlink(tempPath).catch(() => undefined);
  }
  // The new directory entry made durable, so a key that signed tokens survives a power cut.
  await fsyncDir(dirname(path));
  return content;
}

async function readIfExists(path: string): Promise<string | null> {
  try {
    return await readBounded(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}
