/**
 * Administration, for admin tokens: hub tokens (create — the secret is shown once —, revoke),
 * repositories (create, change visibility, delete) and the last gc and fsck runs. Repositories
 * go through the Hub's own routes, tokens and runs through /api/castor/.
 */
import { useState } from "preact/hooks";
import {
  type CreatedToken,
  type CreateTokenBody,
  getJson,
  type MaintenanceRun,
  type Me,
  PLURAL,
  REPO_TYPES,
  type RepoSummary,
  type RepoType,
  request,
  sendJson,
  type TokenInfo,
} from "../api.js";
import { ErrorNote, Head, Loading, Section, useAsync } from "../common.js";
import { formatDate } from "../format.js";
import { href, Link } from "../router.js";

export function AdminPage({ me }: { me: Me }) {
  if (!me.admin) {
    return (
      <>
        <h1 tabIndex={-1}>Admin</h1>
        <p>
          Administration needs an admin token (write access to all repositories: <code>castor token create --all-repos --access write</code>).{" "}
          {me.anonymous && <Link href={href("signin")}>Sign in</Link>}
        </p>
      </>
    );
  }
  return (
    <>
      <h1 tabIndex={-1}>Admin</h1>
      <Tokens />
      <Repositories />
      <Maintenance />
    </>
  );
}

/** Runs an action, keeping its error to show next to the form that started it. */
function useAction(): [Error | undefined, boolean, (action: () => Promise<void>) => Promise<void>] {
  const [error, setError] = useState<Error | undefined>();
  const [busy, setBusy] = useState(false);
  const run = async (action: () => Promise<void>) => {
    setError(undefined);
    setBusy(true);
    try {
      await action();
    } catch (err) {
      setError(err instanceof Error ? err : new Error(String(err)));
    } finally {
      setBusy(false);
    }
  };
  return [error, busy, run];
}

function list(text: string): string[] {
  return text
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
}

function Tokens() {
  const tokens = useAsync(() => getJson<TokenInfo[]>("/api/castor/tokens"), []);
  const [access, setAccess] = useState<"read" | "write">("read");
  const [allRepos, setAllRepos] = useState(false);
  const [repos, setRepos] = useState("");
  const [namespaces, setNamespaces] = useState("");
  const [owner, setOwner] = useState("");
  const [expires, setExpires] = useState("");
  const [created, setCreated] = useState<{ id: string; secret: string } | null>(null);
  const [error, busy, run] = useAction();

  const create = (event: Event) => {
    event.preventDefault();
    void run(async () => {
      const body: CreateTokenBody = {
        access,
        repos: allRepos ? "all" : list(repos),
        namespaces: allRepos ? [] : list(namespaces),
        owner: owner.trim() || null,
        expires: expires.trim() || null,
      };
      const answer = await sendJson<CreatedToken>("POST", "/api/castor/tokens", body);
      setCreated({ id: answer.token.id, secret: answer.secret });
      tokens.reload();
    });
  };
  const revoke = (id: string) =>
    run(async () => {
      await request(`/api/castor/tokens/${encodeURIComponent(id)}`, { method: "DELETE" });
      tokens.reload();
    });

  return (
    <Section title="Hub tokens">
      <form class="grid-form" onSubmit={create} aria-label="Create a hub token">
        <label for="token-access">Access</label>
        <select id="token-access" value={access} onChange={(event) => setAccess(event.currentTarget.value as "read" | "write")}>
          <option value="read">read</option>
          <option value="write">write</option>
        </select>
        <label for="token-all">All repositories</label>
        <input id="token-all" type="checkbox" checked={allRepos} onChange={(event) => setAllRepos(event.currentTarget.checked)} />
        <label for="token-repos">Repositories</label>
        <input
          id="token-repos"
          value={repos}
          disabled={allRepos}
          placeholder="model:alice/bert, dataset:alice/corpus"
          onInput={(event) => setRepos(event.currentTarget.value)}
        />
        <label for="token-namespaces">Namespaces</label>
        <input
          id="token-namespaces"
          value={namespaces}
          disabled={allRepos}
          placeholder="alice, team"
          onInput={(event) => setNamespaces(event.currentTarget.value)}
        />
        <label for="token-owner">User</label>
        <input id="token-owner" value={owner} placeholder="optional" onInput={(event) => setOwner(event.currentTarget.value)} />
        <label for="token-expires">Expires</label>
        <input id="token-expires" value={expires} placeholder="never, or 30d, 12h, 2030-01-31" onInput={(event) => setExpires(event.currentTarget.value)} />
        <span />
        <button type="submit" disabled={busy}>
          Create token
        </button>
      </form>
      <ErrorNote error={error} />
      {created && (
        <div class="secret" role="status" data-testid="new-token">
          <p>
            Token <code>{created.id}</code> created. Copy it now: castor keeps only its hash, so it cannot be shown again.
          </p>
          <label for="new-secret">Secret</label>
          <input id="new-secret" readOnly value={created.secret} onFocus={(event) => event.currentTarget.select()} data-testid="new-token-secret" />
          <button type="button" onClick={() => setCreated(null)}>
            Done, hide it
          </button>
        </div>
      )}
      <ErrorNote error={tokens.error} />
      {tokens.data === undefined ? (
        !tokens.error && <Loading what="tokens" />
      ) : (
        <table class="list" data-testid="token-list">
          <Head columns={["Id", "User", "Access", "Covers", "State", "Expires", "Created", ["Actions", "hidden"]]} />
          <tbody>
            {tokens.data.map((token) => (
              <tr key={token.id} data-token={token.id}>
                <td>
                  <code>{token.id}</code>
                </td>
                <td>{token.owner ?? "–"}</td>
                <td>{token.access}</td>
                <td>{token.repos === "all" ? "all repositories" : [...token.repos, ...token.namespaces.map((ns) => `${ns}/*`)].join(", ")}</td>
                <td data-testid="token-state">
                  <span class={`badge ${token.state}`}>{token.state}</span>
                </td>
                <td>{token.expiresAt ? formatDate(token.expiresAt) : "never"}</td>
                <td>{formatDate(token.createdAt)}</td>
                <td>
                  {token.state === "active" && (
                    <button type="button" class="danger" onClick={() => revoke(token.id)} aria-label={`Revoke token ${token.id}`}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

interface AdminRepo extends RepoSummary {
  type: RepoType;
}

function Repositories() {
  const repos = useAsync(
    async () =>
      (
        await Promise.all(REPO_TYPES.map(async (type) => (await getJson<RepoSummary[]>(`/api/${PLURAL[type]}`)).map((repo): AdminRepo => ({ ...repo, type }))))
      ).flat(),
    [],
  );
  const [type, setType] = useState<RepoType>("model");
  const [name, setName] = useState("");
  const [isPrivate, setPrivate] = useState(true);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [error, busy, run] = useAction();

  const create = (event: Event) => {
    event.preventDefault();
    void run(async () => {
      await sendJson("POST", "/api/repos/create", { type, name: name.trim(), private: isPrivate });
      setName("");
      repos.reload();
    });
  };
  const setVisibility = (repo: AdminRepo, makePrivate: boolean) =>
    run(async () => {
      await sendJson("PUT", `/api/${PLURAL[repo.type]}/${repo.id}/settings`, { private: makePrivate });
      repos.reload();
    });
  const remove = (repo: AdminRepo) =>
    run(async () => {
      await sendJson("DELETE", "/api/repos/delete", { type: repo.type, name: repo.id });
      setConfirming(null);
      repos.reload();
    });

  return (
    <Section title="Repositories" id="admin-repos">
      <form class="grid-form" onSubmit={create} aria-label="Create a repository">
        <label for="repo-type">Type</label>
        <select id="repo-type" value={type} onChange={(event) => setType(event.currentTarget.value as RepoType)}>
          {REPO_TYPES.map((t) => (
            <option key={t} value={t}>
              {t}
            </option>
          ))}
        </select>
        <label for="repo-name">Name</label>
        <input id="repo-name" value={name} placeholder="namespace/name" required onInput={(event) => setName(event.currentTarget.value)} />
        <label for="repo-private">Private</label>
        <input id="repo-private" type="checkbox" checked={isPrivate} onChange={(event) => setPrivate(event.currentTarget.checked)} />
        <span />
        <button type="submit" disabled={busy}>
          Create repository
        </button>
      </form>
      <ErrorNote error={error} />
      <ErrorNote error={repos.error} />
      {repos.data === undefined ? (
        !repos.error && <Loading what="repositories" />
      ) : (
        <table class="list" data-testid="admin-repo-list">
          <Head columns={["Repository", "Type", "Visibility", ["Actions", "hidden"]]} />
          <tbody>
            {repos.data.map((repo) => {
              const key = `${repo.type}:${repo.id}`;
              return (
                <tr key={key} data-repo={key}>
                  <td>
                    <Link href={href(`${PLURAL[repo.type]}/${repo.id}`)}>{repo.id}</Link>
                  </td>
                  <td>{repo.type}</td>
                  <td>{repo.private ? "private" : "public"}</td>
                  <td class="actions">
                    <button
                      type="button"
                      onClick={() => setVisibility(repo, !repo.private)}
                      aria-label={`Make ${repo.private ? "public" : "private"} ${repo.id}`}
                    >
                      Make {repo.private ? "public" : "private"}
                    </button>
                    {confirming === key ? (
                      <>
                        <button type="button" class="danger" onClick={() => remove(repo)} aria-label={`Confirm delete ${repo.id}`}>
                          Confirm delete
                        </button>
                        <button type="button" onClick={() => setConfirming(null)}>
                          Keep
                        </button>
                      </>
                    ) : (
                      <button type="button" class="danger" onClick={() => setConfirming(key)} aria-label={`Delete ${repo.id}`}>
                        Delete
                      </button>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </Section>
  );
}

function Maintenance() {
  const runs = useAsync(() => getJson<MaintenanceRun[]>("/api/castor/maintenance"), []);
  return (
    <Section title="Maintenance">
      <ErrorNote error={runs.error} />
      {runs.data === undefined ? (
        !runs.error && <Loading what="maintenance runs" />
      ) : runs.data.length === 0 ? (
        <p>
          No garbage collection or fsck has run yet (<code>castor gc</code>, <code>castor fsck</code>, or <code>CASTOR_GC_INTERVAL</code>).
        </p>
      ) : (
        <div class="runs">
          {runs.data.map((run) => (
            <div key={run.kind} class="run" data-testid={`run-${run.kind}`}>
              <h3>Last {run.kind}</h3>
              <p class="muted">
                {formatDate(run.startedAt)}, {((Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000).toFixed(1)} s
              </p>
              <dl class="facts">
                {Object.entries(run.totals).map(([name, value]) => (
                  <div key={name}>
                    <dt>{name}</dt>
                    <dd>{value.toLocaleString("en")}</dd>
                  </div>
                ))}
              </dl>
            </div>
          ))}
        </div>
      )}
    </Section>
  );
}
