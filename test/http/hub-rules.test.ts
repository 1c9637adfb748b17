/**
 * Rules the HTTP routes and the admin commands once decided each their own way, now decided once
 * by the hub's services (src/hub): the HTTP half of each regression test (the CLI half is in
 * test/cli/admin.test.ts and test/cli/repo-client.test.ts).
 *
 * - A branch or tag cannot be named like a commit id (it could never be told from one) nor
 *   `HEAD` (which names `main` where revisions are read): names.ts `requireNewRevisionName`.
 * - The revision `HEAD` names `main` for the token operation as it does for `tree`, `resolve`
 *   and `revision` (hf_xet clients pass the revision they were given).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { startTestApp, type TestApp } from "../helpers/app.js";

let castor: TestApp;
const tokens = { write: "", read: "" };
const COMMIT_LIKE = "0123456789abcdef0123456789abcdef01234567";

before(async () => {
  castor = await startTestApp({ name: "hub-rules" });
  await castor.hub.createRepo("model", "alice/bert");
  tokens.write = (await castor.hub.createToken({ repos: ["model:alice/bert"], access: "write", expiresAt: null })).secret;
  tokens.read = (await castor.hub.createToken({ repos: ["model:alice/bert"], access: "read", expiresAt: null })).secret;
});

after(() => castor?.close());

function call(method: string, path: string, token: string, json?: unknown) {
  return castor.app.inject({
    method: method as "GET",
    url: path,
    headers: { authorization: `Bearer ${token}`, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    ...(json === undefined ? {} : { payload: JSON.stringify(json) }),
  });
}

describe("one set of hub rules for every transport (HTTP)", () => {
  it("refuses a branch or a tag named like a commit id or HEAD, with the CLI's words, and creates neither", async () => {
    const refusals = [
      { name: COMMIT_LIKE, reason: /revision name "0123456789abcdef0123456789abcdef01234567" is not valid: it looks like a commit id/ },
      { name: "HEAD", reason: /revision name "HEAD" is reserved: it names the default branch \(main\)/ },
    ];
    for (const { name, reason } of refusals) {
      const branch = await call("POST", `/api/models/alice/bert/branch/${name}`, tokens.write, {});
      assert.equal(branch.statusCode, 400, branch.body);
      assert.match(branch.json().error, reason);
      const tag = await call("POST", "/api/models/alice/bert/tag/main", tokens.write, { tag: name });
      assert.equal(tag.statusCode, 400, tag.body);
      assert.match(tag.json().error, reason);
    }
    const refs = (await call("GET", "/api/models/alice/bert/refs", tokens.read)).json();
    assert.deepEqual(
      [...refs.branches, ...refs.tags].map((ref: { name: string }) => ref.name),
      ["main"],
    );
  });

  it("issues a read token at HEAD, the revision tree/HEAD and resolve/HEAD answer for", async () => {
    const tree = await call("GET", "/api/models/alice/bert/tree/HEAD", tokens.read);
    assert.equal(tree.statusCode, 200, tree.body);
    for (const spelling of ["xet", "cas"]) {
      const token = await call("GET", `/api/models/alice/bert/${spelling}-read-token/HEAD`, tokens.read);
      assert.equal(token.statusCode, 200, token.body);
      assert.equal(typeof token.json().accessToken, "string");
    }
    // An unknown revision is still 404, and HEAD asked of a repository the token does not cover too.
    assert.equal((await call("GET", "/api/models/alice/bert/xet-read-token/nope", tokens.read)).statusCode, 404);
    assert.equal((await call("GET", "/api/models/alice/other/xet-read-token/HEAD", tokens.read)).statusCode, 404);
  });
});
