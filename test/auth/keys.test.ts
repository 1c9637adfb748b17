import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import {
  DEDUP_KEY_SEED_FILE_NAME,
  keysDir,
  loadOrCreateKeys,
  SIGNING_KEY_FILE_NAME,
  URL_KEY_FILE_NAME,
  type CastorKeys,
  type KeyConfig,
} from "../../src/auth/keys.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { tempDirForFile } from "../helpers/temp-dir.js";

const root = tempDirForFile("castor-keys-");

let counter = 0;
function freshConfig(overrides: Partial<KeyConfig> = {}): KeyConfig {
  return { dataDir: join(root.path, `data-${counter++}`), signingKeyFile: null, urlKey: null, dedupKeySeed: null, ...overrides };
}

function publicPem(key: KeyObject): string {
  return key.export({ type: "spki", format: "pem" }).toString();
}

function fingerprint(keys: CastorKeys): string {
  return [publicPem(keys.jwtPublicKey), keys.urlKey.toString("hex"), keys.dedupKeySeed.toString("hex")].join("|");
}

async function rejectsWithConfigError(promise: Promise<unknown>, pattern: RegExp): Promise<void> {
  await assert.rejects(promise, (error: unknown) => error instanceof ConfigError && pattern.test(error.message));
}

describe("loadOrCreateKeys", () => {
  it("generates every key once into the data dir, private to the owner", async () => {
    const config = freshConfig();
    const keys = await loadOrCreateKeys(config);
    assert.equal(keys.jwtSigningKey.asymmetricKeyType, "ed25519");
    assert.equal(keys.jwtPublicKey.type, "public");
    assert.ok(keys.urlKey.length >= 32);
    assert.ok(keys.dedupKeySeed.length >= 32);
    assert.notDeepEqual(keys.urlKey, keys.dedupKeySeed);

    const dir = keysDir(config.dataDir);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    assert.deepEqual((await readdir(dir)).sort(), [DEDUP_KEY_SEED_FILE_NAME, SIGNING_KEY_FILE_NAME, URL_KEY_FILE_NAME].sort());
    for (const name of await readdir(dir)) {
      assert.equal((await stat(join(dir, name))).mode & 0o777, 0o600, name);
    }

    const again = await loadOrCreateKeys(config);
    assert.equal(fingerprint(again), fingerprint(keys));
  });

  it("gives every concurrent loader on one data dir the same keys and leaves no temp files", async () => {
    const config = freshConfig();
    const all = await Promise.all(Array.from({ length: 8 }, () => loadOrCreateKeys(config)));
    assert.equal(new Set(all.map(fingerprint)).size, 1);
    assert.equal((await readdir(keysDir(config.dataDir))).length, 3);
  });

  it("gives two processes starting on one data dir the same keys", async () => {
    const config = freshConfig();
    const keysModule = fileURLToPath(new URL("../../src/auth/keys.ts", import.meta.url));
    const script = `import { loadOrCreateKeys } from ${JSON.stringify(keysModule)};
      const keys = await loadOrCreateKeys(JSON.parse(process.argv[1]));
      process.stdout.write(keys.jwtPublicKey.export({ type: "spki", format: "pem" }) + keys.urlKey.toString("hex") + keys.dedupKeySeed.toString("hex"));`;
    const runOne = () =>
      new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "--eval", script, JSON.stringify(config)], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        let out = "";
        child.stdout.setEncoding("utf8").on("data", (text: string) => (out += text));
        child.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`key loader exited with ${code}`))));
      });
    const [first, second] = await Promise.all([runOne(), runOne()]);
    assert.match(first, /BEGIN PUBLIC KEY/);
    assert.equal(first, second);
    const local = await loadOrCreateKeys(config);
    assert.equal(publicPem(local.jwtPublicKey) + local.urlKey.toString("hex") + local.dedupKeySeed.toString("hex"), first);
  });

  it("writes generated secrets in the form the settings accept, so nodes can share them", async () => {
    const config = freshConfig();
    const generated = await loadOrCreateKeys(config);
    const dir = keysDir(config.dataDir);
    const shared = loadConfig({
      CASTOR_DATA_DIR: join(root.path, `other-${counter++}`),
      CASTOR_SIGNING_KEY_FILE: join(dir, SIGNING_KEY_FILE_NAME),
      CASTOR_URL_KEY: (await readFile(join(dir, URL_KEY_FILE_NAME), "utf8")).trim(),
      CASTOR_DEDUP_KEY_SEED: (await readFile(join(dir, DEDUP_KEY_SEED_FILE_NAME), "utf8")).trim(),
    });
    const otherNode = await loadOrCreateKeys(shared);
    assert.equal(fingerprint(otherNode), fingerprint(generated));
    await assert.rejects(stat(keysDir(shared.dataDir)), { code: "ENOENT" });
  });

  it("uses configured keys and generates only what is missing", async () => {
    const pemPath = join(root.path, `configured-${counter++}.pem`);
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    await writeFile(pemPath, privateKey.export({ type: "pkcs8", format: "pem" }));
    const config = freshConfig({ signingKeyFile: pemPath, urlKey: "u".repeat(40) });
    const keys = await loadOrCreateKeys(config);
    assert.equal(publicPem(keys.jwtPublicKey), publicPem(publicKey));
    assert.deepEqual(keys.urlKey, Buffer.from("u".repeat(40)));
    assert.deepEqual(await readdir(keysDir(config.dataDir)), [DEDUP_KEY_SEED_FILE_NAME]);
  });

  it("refuses a signing key file that is missing, not PEM, or not Ed25519", async () => {
    await rejectsWithConfigError(
      loadOrCreateKeys(freshConfig({ signingKeyFile: join(root.path, "absent.pem") })),
      /CASTOR_SIGNING_KEY_FILE names .*cannot be read \(ENOENT\)/,
    );

    const garbage = join(root.path, `garbage-${counter++}.pem`);
    await writeFile(garbage, "not a key");
    await rejectsWithConfigError(loadOrCreateKeys(freshConfig({ signingKeyFile: garbage })), /is not a PEM private key.*Ed25519/);

    const rsa = join(root.path, `rsa-${counter++}.pem`);
    await writeFile(rsa, generateKeyPairSync("rsa", { modulusLength: 1024 }).privateKey.export({ type: "pkcs8", format: "pem" }));
    await rejectsWithConfigError(loadOrCreateKeys(freshConfig({ signingKeyFile: rsa })), /holds a rsa key.*Ed25519/);

    const huge = join(root.path, `huge-${counter++}.pem`);
    await writeFile(huge, Buffer.alloc(100 * 1024, 0x41));
    await rejectsWithConfigError(loadOrCreateKeys(freshConfig({ signingKeyFile: huge })), /far too large/);
  });

  it("refuses a damaged generated secret instead of silently replacing it", async () => {
    const config = freshConfig();
    await loadOrCreateKeys(config);
    await writeFile(join(keysDir(config.dataDir), URL_KEY_FILE_NAME), "short\n");
    await rejectsWithConfigError(loadOrCreateKeys(config), /url-key is damaged.*delete it/);
  });
});
