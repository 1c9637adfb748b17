/**
 * The MetadataStore contract: every backend (SQLite now, PostgreSQL later) must pass these
 * cases unchanged. Each case opens a fresh, empty store through `open` and cleans it up.
 * `reopen` must give a second, independent store instance on the same database; the
 * cross-instance cases fail with a message saying so when it is missing.
 */
import { describe, it, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { AlreadyExistsError, NotFoundError, REPO_TYPES, type MetadataStore, type NewHubToken } from "../../src/metadata/store.js";
import { runCasMetadataContract } from "./cas-metadata.js";
import { runGcRecordsContract } from "./gc-records.js";
import { runHubHistoryContract } from "./hub-history.js";
import { runMigrationContract } from "./metadata-migration.js";
import { runMirrorRecordsContract } from "./mirror-records.js";
import { runStatsMetadataContract } from "./stats-metadata.js";

export interface MetadataStoreFixture {
  store: MetadataStore;
  reopen?: () => Promise<MetadataStore>;
  cleanup(): Promise<void>;
}

export function runMetadataStoreContract(name: string, open: () => Promise<MetadataStoreFixture>): void {
  /** Runs `body` against a fresh store, closing every instance it opened and cleaning up. */
  const withStore = (body: (store: MetadataStore, reopen: () => Promise<MetadataStore>, t: TestContext) => Promise<void>) => async (t: TestContext) => {
    const fixture = await open();
    const extra: MetadataStore[] = [];
    const reopen = async (): Promise<MetadataStore> => {
      assert.ok(fixture.reopen, `${name}: the fixture must provide reopen() for the cross-instance cases`);
      const second = await fixture.reopen();
      extra.push(second);
      return second;
    };
    try {
      await body(fixture.store, reopen, t);
    } finally {
      for (const store of extra) await store.close();
      await fixture.store.close();
      await fixture.cleanup();
    }
  };

  /** A token whose id and hash are unique per call. */
  let serial = 0;
  const newToken = (fields: Partial<NewHubToken> = {}): NewHubToken => {
    serial += 1;
    const tag = serial.toString(16).padStart(12, "0");
    return {
      id: `tok_${tag}`,
      secretHash: tag.padStart(64, "a"),
      access: "read",
      repos: "all",
      expiresAt: null,
      ...fields,
    };
  };

  /** Asserts that `date` is a Date no earlier than `before` and no later than now. */
  const assertCreatedSince = (date: Date, before: number): void => {
    assert.ok(date instanceof Date, "timestamps are Date objects");
    assert.ok(date.getTime() >= before && date.getTime() <= Date.now(), `timestamp ${date.toISOString()} is the time of the call`);
  };

  describe(`MetadataStore contract: ${name}`, () => {
    describe("repositories", () => {
      it(
        "starts empty",
        withStore(async (store) => {
          assert.deepEqual(await store.listRepos(), []);
          assert.equal(await store.getRepo("model", "alice/bert"), null);
        }),
      );

      it(
        "creates a repository of each type and reads it back by name and by id",
        withStore(async (store) => {
          for (const type of REPO_TYPES) {
            const before = Date.now();
            const repo = await store.createRepo(type, `alice/${type}-repo`);
            assert.equal(repo.type, type);
            assert.equal(repo.name, `alice/${type}-repo`);
            assert.ok(Number.isSafeInteger(repo.id));
            assertCreatedSince(repo.createdAt, before);
            assert.deepEqual(await store.getRepo(type, `alice/${type}-repo`), repo);
            assert.deepEqual(await store.getRepoById(repo.id), repo);
          }
        }),
      );

      it(
        "returns null for unknown names and ids",
        withStore(async (store) => {
          const repo = await store.createRepo("model", "alice/bert");
          assert.equal(await store.getRepo("model", "alice/other"), null);
          assert.equal(await store.getRepo("dataset", "alice/bert"), null);
          assert.equal(await store.getRepoById(repo.id + 1000), null);
        }),
      );

      it(
        "keeps names exactly as given: case matters",
        withStore(async (store) => {
          const lower = await store.createRepo("model", "alice/bert");
          const upper = await store.createRepo("model", "Alice/Bert");
          assert.notEqual(lower.id, upper.id);
          assert.equal((await store.getRepo("model", "Alice/Bert"))?.id, upper.id);
        }),
      );

      it(
        "treats the same name under two types as two repositories",
        withStore(async (store) => {
          const model = await store.createRepo("model", "alice/bert");
          const dataset = await store.createRepo("dataset", "alice/bert");
          assert.notEqual(model.id, dataset.id);
          assert.equal((await store.getRepo("model", "alice/bert"))?.id, model.id);
          assert.equal((await store.getRepo("dataset", "alice/bert"))?.id, dataset.id);
        }),
      );

      it(
        "refuses a duplicate with AlreadyExistsError and leaves the original untouched",
        withStore(async (store) => {
          const original = await store.createRepo("space", "alice/demo");
          await assert.rejects(store.createRepo("space", "alice/demo"), AlreadyExistsError);
          assert.deepEqual(await store.listRepos(), [original]);
          assert.equal((await store.listRevisions(original.id)).length, 1);
        }),
      );

      it(
        "lists repositories in creation order",
        withStore(async (store) => {
          const created = [
            await store.createRepo("space", "zed/last-name-first"),
            await store.createRepo("model", "alice/bert"),
            await store.createRepo("dataset", "Bob/data"),
          ];
          assert.deepEqual(await store.listRepos(), created);
        }),
      );

      it(
        "creates the main branch together with the repository",
        withStore(async (store) => {
          const before = Date.now();
          const repo = await store.createRepo("model", "alice/bert");
          const main = await store.getRevision(repo.id, "main");
          assert.ok(main);
          assert.equal(main.repoId, repo.id);
          assert.equal(main.name, "main");
          assert.equal(main.kind, "branch");
          assertCreatedSince(main.createdAt, before);
          assert.deepEqual(await store.listRevisions(repo.id), [main]);
        }),
      );
    });

    describe("revisions", () => {
      it(
        "creates branches whose names contain slashes, and tags",
        withStore(async (store) => {
          const repo = await store.createRepo("model", "alice/bert");
          const before = Date.now();
          const branch = await store.createRevision(repo.id, "feature/deep/x", "branch");
          const tag = await store.createRevision(repo.id, "v1.0", "tag");
          assert.deepEqual({ repoId: branch.repoId, name: branch.name, kind: branch.kind }, { repoId: repo.id, name: "feature/deep/x", kind: "branch" });
          assert.deepEqual({ name: tag.name, kind: tag.kind }, { name: "v1.0", kind: "tag" });
          assertCreatedSince(branch.createdAt, before);
          assert.deepEqual(await store.getRevision(repo.id, "feature/deep/x"), branch);
          assert.deepEqual(await store.getRevision(repo.id, "v1.0"), tag);
          assert.equal(await store.getRevision(repo.id, "feature"), null, "a prefix of a name is not a revision");
          assert.deepEqual(
            (await store.listRevisions(repo.id)).map((r) => r.name),
            ["main", "feature/deep/x", "v1.0"],
          );
        }),
      );

      it(
        "refuses a second revision of the same name, whatever its kind",
        withStore(async (store) => {
          const repo = await store.createRepo("model", "alice/bert");
          await store.createRevision(repo.id, "dev", "branch");
          await assert.rejects(store.createRevision(repo.id, "dev", "branch"), AlreadyExistsError);
          await assert.rejects(store.createRevision(repo.id, "dev", "tag"), AlreadyExistsError);
          await assert.rejects(store.createRevision(repo.id, "main", "tag"), AlreadyExistsError);
          assert.equal((await store.getRevision(repo.id, "dev"))?.kind, "branch");
        }),
      );

      it(
        "scopes revision names to their repository",
        withStore(async (store) => {
          const a = await store.createRepo("model", "alice/a");
          const b = await store.createRepo("model", "alice/b");
          await store.createRevision(a.id, "dev", "branch");
          assert.equal(await store.getRevision(b.id, "dev"), null);
          const inB = await store.createRevision(b.id, "dev", "tag");
          assert.equal(inB.repoId, b.id);
          assert.deepEqual(
            (await store.listRevisions(b.id)).map((r) => r.name),
            ["main", "dev"],
          );
        }),
      );

      it(
        "refuses a revision for an unknown repository with NotFoundError",
        withStore(async (store) => {
          await assert.rejects(store.createRevision(424242, "dev", "branch"), NotFoundError);
          assert.deepEqual(await store.listRevisions(424242), []);
          assert.equal(await store.getRevision(424242, "main"), null);
        }),
      );
    });

    describe("hub tokens", () => {
      it(
        "creates a token and finds it by secret hash",
        withStore(async (store) => {
          const repo = await store.createRepo("model", "alice/bert");
          const input = newToken({ access: "write", repos: [repo.id] });
          const before = Date.now();
          const token = await store.createHubToken(input);
          assert.deepEqual(
            { ...token, createdAt: undefined },
            { ...input, createdAt: undefined, revokedAt: null, owner: null, namespaces: [] },
            "no owner, no namespaces by default",
          );
          assertCreatedSince(token.createdAt, before);
          assert.deepEqual(await store.findHubTokenBySecretHash(input.secretHash), token);
          assert.equal(await store.findHubTokenBySecretHash("f".repeat(64)), null);
        }),
      );

      it(
        "keeps a token's owner and namespaces (ascending, duplicates collapsed)",
        withStore(async (store) => {
          const repo = await store.createRepo("model", "alice/bert");
          const input = newToken({ access: "write", repos: [repo.id], owner: "alice", namespaces: ["zed-org", "alice", "Bob", "alice", "ünï"] });
          const token = await store.createHubToken(input);
          assert.equal(token.owner, "alice");
          assert.deepEqual(token.namespaces, ["Bob", "alice", "zed-org", "ünï"]);
          assert.deepEqual(await store.findHubTokenBySecretHash(input.secretHash), token);
          const ownerless = await store.createHubToken(newToken({ owner: null, namespaces: [] }));
          assert.deepEqual([ownerless.owner, ownerless.namespaces], [null, []]);
          assert.deepEqual(await store.listHubTokens(), [token, ownerless]);
        }),
      );

      it(
        "keeps all-repos tokens apart from tokens listing repositories",
        withStore(async (store) => {
          const a = await store.createRepo("model", "alice/a");
          const b = await store.createRepo("dataset", "alice/b");
          const all = await store.createHubToken(newToken({ repos: "all" }));
          const listed = await store.createHubToken(newToken({ repos: [b.id, a.id, b.id] }));
          assert.equal(all.repos, "all");
          assert.deepEqual(
            listed.repos,
            [a.id, b.id].sort((x, y) => x - y),
            "ascending, duplicates collapsed",
          );
          assert.equal((await store.findHubTokenBySecretHash(all.secretHash))?.repos, "all");
          assert.deepEqual((await store.findHubTokenBySecretHash(listed.secretHash))?.repos, listed.repos);
        }),
      );

      it(
        "lists every token in creation order with its repositories",
        withStore(async (store) => {
          const a = await store.createRepo("model", "alice/a");
          const b = await store.createRepo("model", "alice/b");
          const created = [
            await store.createHubToken(newToken({ id: "tok_ffffffffffff", repos: [b.id] })),
            await store.createHubToken(newToken({ id: "tok_000000000000", access: "write", repos: "all" })),
            await store.createHubToken(newToken({ id: "tok_888888888888", repos: [a.id, b.id] })),
          ];
          assert.deepEqual(await store.listHubTokens(), created);
        }),
      );

      it(
        "refuses a duplicate id or secret hash with AlreadyExistsError",
        withStore(async (store) => {
          const first = await store.createHubToken(newToken());
          await assert.rejects(store.createHubToken(newToken({ id: first.id })), AlreadyExistsError);
          await assert.rejects(store.createHubToken(newToken({ secretHash: first.secretHash })), AlreadyExistsError);
          assert.deepEqual(await store.listHubTokens(), [first]);
        }),
      );

      it(
        "refuses a token naming an unknown repository with NotFoundError, storing nothing",
        withStore(async (store) => {
          const repo = await store.createRepo("model", "alice/bert");
          const input = newToken({ repos: [repo.id, repo.id + 1000] });
          await assert.rejects(store.createHubToken(input), NotFoundError);
          assert.equal(await store.findHubTokenBySecretHash(input.secretHash), null);
          assert.deepEqual(await store.listHubTokens(), []);
        }),
      );

      it(
        "revokes idempotently and reports unknown ids",
        withStore(async (store) => {
          const token = await store.createHubToken(newToken());
          const other = await store.createHubToken(newToken());
          const before = Date.now();
          assert.equal(await store.revokeHubToken(token.id), true);
          const revoked = await store.findHubTokenBySecretHash(token.secretHash);
          assert.ok(revoked?.revokedAt);
          assertCreatedSince(revoked.revokedAt, before);
          assert.equal(await store.revokeHubToken(token.id), true, "revoking again still reports the token");
          assert.deepEqual((await store.findHubTokenBySecretHash(token.secretHash))?.revokedAt, revoked.revokedAt, "the first revocation time is kept");
          assert.equal(await store.revokeHubToken("tok_doesnotexist"), false);
          assert.equal((await store.findHubTokenBySecretHash(other.secretHash))?.revokedAt, null, "other tokens are untouched");
          assert.deepEqual(
            (await store.listHubTokens()).map((t) => [t.id, t.revokedAt !== null]),
            [
              [token.id, true],
              [other.id, false],
            ],
          );
        }),
      );

      it(
        "returns expired tokens as stored: judging expiry is the hub's job",
        withStore(async (store) => {
          const expiredAt = new Date("2001-02-03T04:05:06.789Z");
          const token = await store.createHubToken(newToken({ expiresAt: expiredAt }));
          const found = await store.findHubTokenBySecretHash(token.secretHash);
          assert.deepEqual(found?.expiresAt, expiredAt);
          assert.equal(found?.revokedAt, null);
        }),
      );
    });

    describe("dates", () => {
      it(
        "round-trip to the millisecond, near and far",
        withStore(async (store) => {
          for (const expiresAt of [new Date("2030-01-31T12:34:56.789Z"), new Date("2125-12-31T23:59:59.999Z"), new Date(Date.now() + 1), null]) {
            const token = await store.createHubToken(newToken({ expiresAt }));
            const found = await store.findHubTokenBySecretHash(token.secretHash);
            assert.deepEqual(found?.expiresAt, expiresAt);
            assert.deepEqual(found?.createdAt, token.createdAt);
          }
          const repo = await store.createRepo("model", "alice/bert");
          assert.equal((await store.getRepoById(repo.id))?.createdAt.getTime(), repo.createdAt.getTime());
        }),
      );
    });

    describe("two store instances on one database", () => {
      it(
        "each sees the other's writes at once",
        withStore(async (first, reopen) => {
          const second = await reopen();
          const repo = await first.createRepo("model", "alice/bert");
          assert.deepEqual(await second.getRepo("model", "alice/bert"), repo);
          const dev = await second.createRevision(repo.id, "dev", "branch");
          assert.deepEqual(await first.getRevision(repo.id, "dev"), dev);

          const token = await first.createHubToken(newToken({ repos: [repo.id], access: "write" }));
          assert.deepEqual(await second.findHubTokenBySecretHash(token.secretHash), token);
          assert.equal(await second.revokeHubToken(token.id), true);
          assert.notEqual((await first.findHubTokenBySecretHash(token.secretHash))?.revokedAt, null, "revocation seen at once");
          await assert.rejects(second.createRepo("model", "alice/bert"), AlreadyExistsError);
        }),
      );

      it(
        "a later instance finds everything written before it opened",
        withStore(async (first, reopen) => {
          const repo = await first.createRepo("dataset", "alice/kept");
          const token = await first.createHubToken(newToken({ repos: [repo.id] }));
          await first.ping();
          const again = await reopen();
          assert.deepEqual(await again.listRepos(), [repo]);
          assert.deepEqual(await again.listHubTokens(), [token]);
        }),
      );

      it(
        "answers ping",
        withStore(async (store, reopen) => {
          await store.ping();
          await (await reopen()).ping();
        }),
      );
    });

    runHubHistoryContract(withStore);
    runCasMetadataContract(withStore);
    runGcRecordsContract(withStore);
    runStatsMetadataContract(withStore);
    runMirrorRecordsContract(withStore);
    runMigrationContract(open);
  });
}
