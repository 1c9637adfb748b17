/**
 * Git LFS (`/{prefix}{ns}/{name}.git/info/lfs/…`) over plain HTTP against a real app on SQLite:
 * an upload offering the `xet` transfer is answered with `transfer: "xet"` and upload actions at
 * the repository's Xet write-token route (which then issues a CAS write token); git-lfs's
 * `basic` transfer gets signed actions at the object routes, which take uploads into the CAS
 * and serve downloads rebuilt from Xet with Range; content this repository already holds gets
 * no upload action, and what castor does not take is refused with a JSON error: transfers it
 * does not serve (400), too many objects (413), malformed objects (422), tokens that may not
 * write (401/403/404), unknown branches (404). And the `.gitattributes` a commit of a Xet file
 * gets, when the commit writes one itself.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { upload } from "../../src/client/index.js";
import { MAX_BATCH_OBJECTS } from "../../src/hub/lfs-batch.js";
import { startTestApp, type TestApp } from "../helpers/app.js";

const LFS_TYPE = "application/vnd.git-lfs+json";

let castor: TestApp;
let base: string;
const tokens = { alice: "", aliceRead: "", bob: "" };
/** Content uploaded through Xet to dataset alice/corpus only. */
const stored = { bytes: randomBytes(200_000), sha256: "" };

before(async () => {
  castor = await startTestApp({ name: "hub-lfs-batch" });
  const { hub } = castor;
  base = castor.url;
  const token = async (owner: string, access: "read" | "write") =>
    (await hub.createToken({ repos: [], namespaces: [owner], owner, access, expiresAt: null })).secret;
  tokens.alice = await token("alice", "write");
  tokens.aliceRead = await token("alice", "read");
  tokens.bob = await token("bob", "write");

  for (const [name, type] of [
    ["alice/bert", "model"],
    ["alice/corpus", "dataset"],
    ["alice/demo", "space"],
  ]) {
    const created = await fetch(`${base}/api/repos/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${tokens.alice}`, "content-type": "application/json" },
      body: JSON.stringify({ name, type }),
    });
    assert.equal(created.status, 200, await created.text());
  }
  const branch = await fetch(`${base}/api/models/alice/bert/branch/dev`, { method: "POST", headers: { authorization: `Bearer ${tokens.alice}` } });
  assert.equal(branch.status, 200, await branch.text());

  stored.sha256 = createHash("sha256").update(stored.bytes).digest("hex");
  const path = join(castor.dataDir, "stored.bin");
  await writeFile(path, stored.bytes);
  await upload({ endpoint: base, hubToken: tokens.alice, repo: "dataset:alice/corpus", files: [path] });
});

after(async () => {
  await castor?.close();
});

interface BatchAnswer {
  status: number;
  headers: Headers;
  body: any;
}

/** What `@huggingface/hub` sends, with `overrides` merged into the JSON body. */
function uploadRequest(objects: unknown[], overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { operation: "upload", transfers: ["basic", "multipart", "xet"], hash_algo: "sha_256", ref: { name: "main" }, objects, ...overrides };
}

async function batch(repoPath: string, body: unknown, options: { token?: string | null; type?: string; raw?: string } = {}): Promise<BatchAnswer> {
  const token = options.token === undefined ? tokens.alice : options.token;
  const type = options.type ?? LFS_TYPE;
  const response = await fetch(`${base}/${repoPath}/info/lfs/objects/batch`, {
    method: "POST",
    headers: { accept: LFS_TYPE, "content-type": type, ...(token === null ? {} : { authorization: `Bearer ${token}` }) },
    body: options.raw ?? JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: JSON.parse(text) };
}

function assertRefused(answer: BatchAnswer, status: number, message?: RegExp): void {
  assert.equal(answer.status, status, JSON.stringify(answer.body));
  assert.equal(typeof answer.body.error, "string", "errors are JSON {error}");
  assert.match(answer.headers.get("content-type") ?? "", /^application\/json/, "@huggingface/hub reads the message of JSON errors only");
  assert.match(answer.headers.get("x-error-message") ?? "", /^[\x20-\x7e]+$/);
  if (message) assert.match(answer.body.error, message);
}

const object = (size = 1234, seed = "a") => ({ oid: createHash("sha256").update(`${seed}${size}`).digest("hex"), size });

describe("LFS batch", () => {
  it("answers an upload offering xet with transfer xet and upload actions at the write-token route of the branch", async () => {
    const objects = [object(10, "x"), object(20 * 1024 * 1024, "y")];
    const answer = await batch("alice/bert.git", uploadRequest(objects));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.match(answer.headers.get("content-type") ?? "", /^application\/vnd\.git-lfs\+json/);
    assert.equal(answer.body.transfer, "xet");
    assert.equal(answer.body.objects.length, 2);
    const sessions = new Set<string>();
    for (const [index, answered] of answer.body.objects.entries()) {
      assert.equal(answered.oid, objects[index].oid);
      assert.equal(answered.size, objects[index].size);
      assert.equal(answered.error, undefined);
      assert.equal(answered.actions.upload.href, `${base}/api/models/alice/bert/xet-write-token/main`);
      const session = answered.actions.upload.header["X-Xet-Session-Id"];
      assert.match(session, /^[0-9a-f-]{36}$/);
      sessions.add(session);
    }
    assert.equal(sessions.size, 1, "one session id per batch");
  });

  it("serves datasets and spaces under their prefixes, with or without .git, as JSON or the LFS media type, for other branches", async () => {
    const dataset = await batch("datasets/alice/corpus", uploadRequest([object()]), { type: "application/json" });
    assert.equal(dataset.status, 200, JSON.stringify(dataset.body));
    assert.equal(dataset.body.objects[0].actions.upload.href, `${base}/api/datasets/alice/corpus/xet-write-token/main`);
    const space = await batch("spaces/alice/demo.git", uploadRequest([object()]));
    assert.equal(space.body.objects[0].actions.upload.href, `${base}/api/spaces/alice/demo/xet-write-token/main`);
    const dev = await batch("alice/bert.git", uploadRequest([object()], { ref: { name: "refs/heads/dev" } }));
    assert.equal(dev.body.objects[0].actions.upload.href, `${base}/api/models/alice/bert/xet-write-token/dev`);
    const noRef = await batch("alice/bert.git", uploadRequest([object()], { ref: undefined }));
    assert.equal(noRef.body.objects[0].actions.upload.href, `${base}/api/models/alice/bert/xet-write-token/main`, "no ref (a pull request) → main");
    const empty = await batch("alice/bert.git", uploadRequest([]));
    assert.equal(empty.status, 200);
    assert.deepEqual(empty.body.objects, []);
  });

  it("the upload action's href issues a CAS write token for the repository", async () => {
    const answer = await batch("datasets/alice/corpus.git", uploadRequest([object()]));
    const { href, header } = answer.body.objects[0].actions.upload;
    const token = await fetch(href, { headers: { authorization: `Bearer ${tokens.alice}`, ...header } });
    assert.equal(token.status, 200);
    const json = (await token.json()) as { accessToken: string; exp: number; casUrl: string };
    assert.equal(json.casUrl, base);
    assert.ok(json.accessToken.length > 20);
    assert.ok(json.exp > Date.now() / 1000);
  });

  it("content this repository already holds gets no action; another size is that object's 422; other repositories must upload it", async () => {
    const fresh = object(99, "fresh");
    const answer = await batch("datasets/alice/corpus.git", uploadRequest([{ oid: stored.sha256, size: stored.bytes.length }, fresh]));
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.deepEqual(answer.body.objects[0], { oid: stored.sha256, size: stored.bytes.length, authenticated: true });
    assert.ok(answer.body.objects[1].actions.upload, "content not stored yet is to be uploaded");

    const mismatch = await batch("datasets/alice/corpus.git", uploadRequest([{ oid: stored.sha256, size: stored.bytes.length + 1 }]));
    assert.equal(mismatch.status, 200);
    assert.equal(mismatch.body.objects[0].actions, undefined);
    assert.equal(mismatch.body.objects[0].error.code, 422);
    assert.match(mismatch.body.objects[0].error.message, new RegExp(`stored with ${stored.bytes.length} bytes`));

    // The SHA-256 index is per repository: knowing a hash does not let another repository skip the upload.
    const elsewhere = await batch("alice/bert.git", uploadRequest([{ oid: stored.sha256, size: stored.bytes.length }]));
    assert.ok(elsewhere.body.objects[0].actions.upload);
  });

  it("asks for content again once a xorb of it was removed as damaged (castor fsck --repair)", async () => {
    const bytes = randomBytes(150_000);
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    const path = join(castor.dataDir, "damaged.bin");
    await writeFile(path, bytes);
    await upload({ endpoint: base, hubToken: tokens.alice, repo: "dataset:alice/corpus", files: [path] });
    const request = uploadRequest([{ oid: sha256, size: bytes.length }]);
    assert.equal((await batch("datasets/alice/corpus.git", request)).body.objects[0].actions, undefined, "held: no action");

    const fileHash = (await castor.store.findFileBySha256((await castor.store.getRepo("dataset", "alice/corpus"))!.id, Buffer.from(sha256, "hex")))!;
    const [term] = (await castor.store.getFile(fileHash))!.terms;
    await castor.store.condemnXorbs([term.xorbHash], null);
    const answer = await batch("datasets/alice/corpus.git", request);
    assert.ok(answer.body.objects[0].actions.upload, "the file cannot be rebuilt: upload it again");
  });

  it("refuses transfers it does not serve (400), too many objects (413), malformed objects (422) and bodies (400)", async () => {
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { transfers: ["multipart", "ssh"] })), 400, /"basic" and \(for uploads\) "xet"/);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { operation: "download", transfers: ["xet"] })), 400, /"basic"/);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { operation: "verify" })), 400);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { hash_algo: "md5" })), 400, /sha256/);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { ref: { name: 7 } })), 400, /ref/);
    const tooMany = Array.from({ length: MAX_BATCH_OBJECTS + 1 }, (_, i) => object(i));
    assertRefused(await batch("alice/bert.git", uploadRequest(tooMany)), 413, /at most 1000 objects/);
    assert.equal((await batch("alice/bert.git", uploadRequest(tooMany.slice(0, MAX_BATCH_OBJECTS)))).status, 200, "1000 objects are fine");
    for (const bad of [
      { oid: "abc", size: 1 },
      { oid: "A".repeat(64), size: 1 },
      { size: 1 },
      { oid: object().oid, size: -1 },
      { oid: object().oid, size: 1.5 },
      { oid: object().oid, size: "12" },
      { oid: object().oid },
      null,
    ]) {
      assertRefused(await batch("alice/bert.git", uploadRequest([object(), bad])), 422, /object #1/);
    }
    assertRefused(await batch("alice/bert.git", null, { raw: "{not json" }), 400, /not valid JSON/);
    assertRefused(await batch("alice/bert.git", [1, 2]), 400);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { objects: "all" })), 400, /objects/);
  });

  it("answers git-lfs's basic transfer: actions at the object routes with the batch's own credentials", async () => {
    const held = { oid: stored.sha256, size: stored.bytes.length };
    const download = await batch("datasets/alice/corpus.git", {
      operation: "download",
      transfers: ["basic", "lfs-standalone-file", "ssh"],
      ref: { name: "refs/heads/main" },
      objects: [held, object(5, "missing"), { ...held, size: held.size + 1 }],
      hash_algo: "sha256",
    });
    assert.equal(download.status, 200, JSON.stringify(download.body));
    assert.equal(download.body.transfer, "basic");
    const [found, missing, otherSize] = download.body.objects;
    const objectUrl = `${base}/datasets/alice/corpus.git/info/lfs/objects/${stored.sha256}`;
    assert.match(found.actions.download.href, new RegExp(`^${objectUrl}\\?x=\\d+&s=[A-Za-z0-9_-]{43}$`), "a signed URL");
    assert.equal(found.actions.download.header, undefined, "no credentials in the answer");
    assert.equal(found.actions.download.expires_in, 3600);
    assert.equal(missing.error.code, 404);
    assert.equal(otherSize.error.code, 422);
    // The signed URL needs no credentials, and authorises nothing else.
    const signed = await fetch(found.actions.download.href);
    assert.equal(signed.status, 200);
    assert.deepEqual(Buffer.from(await signed.arrayBuffer()), stored.bytes);
    const query = found.actions.download.href.slice(objectUrl.length);
    const tampered = query.replace(/s=(.)/, (_: string, c: string) => `s=${c === "A" ? "B" : "A"}`);
    assert.equal((await fetch(`${objectUrl}${tampered}`)).status, 403);
    assert.equal((await fetch(`${base}/alice/bert.git/info/lfs/objects/${stored.sha256}${query}`)).status, 403, "another repository");
    const asUpload = await fetch(`${objectUrl}${query}`, { method: "PUT", body: stored.bytes });
    assert.equal(asUpload.status, 403, "a download URL is no upload URL");
    // No transfers at all means basic; an upload of content already held gets no action.
    const upload = await batch("datasets/alice/corpus", { operation: "upload", objects: [held, object(7, "new")] });
    assert.equal(upload.body.transfer, "basic");
    assert.equal(upload.body.objects[0].actions, undefined);
    assert.match(upload.body.objects[1].actions.upload.href, new RegExp(`^${base}/datasets/alice/corpus\\.git/info/lfs/objects/${object(7, "new").oid}\\?x=`));
    // A read token may download, not upload.
    const read = await batch("datasets/alice/corpus.git", { operation: "download", objects: [held] }, { token: tokens.aliceRead });
    assert.equal(read.status, 200);
    assertRefused(await batch("datasets/alice/corpus.git", { operation: "upload", objects: [held] }, { token: tokens.aliceRead }), 403, /read-only/);
  });

  it("takes a basic upload at its signed URL into the CAS, and refuses bytes that are not the object", async () => {
    const bytes = randomBytes(150_000);
    const oid = createHash("sha256").update(bytes).digest("hex");
    const answer = await batch("alice/bert.git", { operation: "upload", transfers: ["basic"], objects: [{ oid, size: bytes.length }] });
    const href: string = answer.body.objects[0].actions.upload.href;
    const wrong = await fetch(href, { method: "PUT", body: randomBytes(bytes.length), headers: { "content-type": "application/octet-stream" } });
    assert.equal(wrong.status, 422);
    assert.match(((await wrong.json()) as { message: string }).message, new RegExp(`LFS object ${oid}: the upload's SHA-256 is`));
    const again = await batch("alice/bert.git", { operation: "upload", transfers: ["basic"], objects: [{ oid, size: bytes.length }] });
    assert.ok(again.body.objects[0].actions, "nothing was registered: it is asked for again");
    const put = await fetch(href, { method: "PUT", body: bytes });
    assert.equal(put.status, 200, await put.clone().text());
    const held = await batch("alice/bert.git", { operation: "upload", transfers: ["basic"], objects: [{ oid, size: bytes.length }] });
    assert.equal(held.body.objects[0].actions, undefined, "held now");
    const download = await batch("alice/bert.git", { operation: "download", objects: [{ oid, size: bytes.length }] });
    assert.deepEqual(Buffer.from(await (await fetch(download.body.objects[0].actions.download.href)).arrayBuffer()), bytes);
  });

  it("serves an object's bytes, whole and by Range, to whoever may read the repository", async () => {
    const url = `${base}/datasets/alice/corpus.git/info/lfs/objects/${stored.sha256}`;
    const auth = { authorization: `Basic ${Buffer.from(`git:${tokens.aliceRead}`).toString("base64")}` };
    const whole = await fetch(url, { headers: auth });
    assert.equal(whole.status, 200);
    assert.deepEqual(Buffer.from(await whole.arrayBuffer()), stored.bytes);
    const part = await fetch(url, { headers: { ...auth, range: "bytes=1000-1999" } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get("content-range"), `bytes 1000-1999/${stored.bytes.length}`);
    assert.deepEqual(Buffer.from(await part.arrayBuffer()), stored.bytes.subarray(1000, 2000));
    assert.equal((await fetch(url, { headers: { ...auth, range: `bytes=${stored.bytes.length}-` } })).status, 416);
    const anonymous = await fetch(url);
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.headers.get("lfs-authenticate"), 'Basic realm="castor"');
    const elsewhere = await fetch(`${base}/alice/bert.git/info/lfs/objects/${stored.sha256}`, { headers: auth });
    assert.equal(elsewhere.status, 404, "content of another repository");
    assert.match(((await elsewhere.json()) as { message: string }).message, /holds no LFS object/);
  });

  it("needs a write token covering the repository and an existing branch", async () => {
    assertRefused(await batch("alice/bert.git", uploadRequest([object()]), { token: tokens.aliceRead }), 403, /read-only/);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()]), { token: null }), 401);
    assertRefused(await batch("alice/bert.git", uploadRequest([object()]), { token: "hf_unknown" }), 401);
    const bob = await batch("alice/bert.git", uploadRequest([object()]), { token: tokens.bob });
    assertRefused(bob, 404);
    assert.equal(bob.headers.get("x-error-code"), "RepoNotFound");
    assertRefused(await batch("alice/nothing.git", uploadRequest([object()])), 404);
    // A write to a repository the token cannot write is refused before the body is looked at.
    assertRefused(await batch("alice/bert.git", uploadRequest([object()], { transfers: ["basic"] }), { token: tokens.aliceRead }), 403);
    const branch = await batch("alice/bert.git", uploadRequest([object()], { ref: { name: "nope" } }));
    assertRefused(branch, 404);
    assert.equal(branch.headers.get("x-error-code"), "RevisionNotFound");
  });

  it("extends the .gitattributes a commit writes itself to cover the Xet files it adds", async () => {
    const lines = [
      { key: "header", value: { summary: "attributes and data together" } },
      { key: "file", value: { path: ".gitattributes", content: Buffer.from("*.txt text\n").toString("base64"), encoding: "base64" } },
      { key: "lfsFile", value: { path: "data/stored.bin", algo: "sha256", oid: stored.sha256, size: stored.bytes.length } },
    ];
    const committed = await fetch(`${base}/api/datasets/alice/corpus/commit/main`, {
      method: "POST",
      headers: { authorization: `Bearer ${tokens.alice}`, "content-type": "application/x-ndjson" },
      body: lines.map((line) => JSON.stringify(line)).join("\n"),
    });
    assert.equal(committed.status, 200, await committed.text());
    const attributes = await fetch(`${base}/datasets/alice/corpus/resolve/main/.gitattributes`, { headers: { authorization: `Bearer ${tokens.alice}` } });
    assert.equal(attributes.status, 200);
    assert.equal(await attributes.text(), "*.txt text\ndata/stored.bin filter=lfs diff=lfs merge=lfs -text\n");
  });
});
