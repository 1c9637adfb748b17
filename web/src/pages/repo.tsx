/**
 * One repository: its branches and tags, its files at any revision (folders, sizes, Xet or
 * inline, downloads through `resolve`), the README, a file's details (with, for admins, how many
 * of its chunks other files share), and the commit history with each commit's changed files.
 *
 * The address says everything shown: `?rev=` (branch, tag or commit id; default main),
 * `?path=` (a folder), `?file=` (a file), `?tab=history`.
 */
import { useState } from "preact/hooks";
import {
  apiBase,
  type Commit,
  getAllPages,
  getJson,
  type Me,
  PLURAL,
  type Refs,
  type RepoId,
  type RepoSummary,
  request,
  resolveUrl,
  sendJson,
  type Sharing,
  type TreeEntry,
} from "../api.js";
import { Bytes, ErrorNote, Head, Loading, Section, useAsync } from "../common.js";
import { DownloadLink } from "../download.js";
import { formatDate, percent, shortId } from "../format.js";
import { Markdown } from "../markdown.js";
import { href, Link, navigate } from "../router.js";

/** Commits per page of the history. */
const COMMITS_PAGE = 30;

interface View {
  repo: RepoId;
  rev: string;
  path: string;
}

function repoHref(view: View, query: Record<string, string | undefined>): string {
  return href(`${PLURAL[view.repo.type]}/${view.repo.name}`, { rev: view.rev === "main" ? undefined : view.rev, ...query });
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

export function RepoPage({ repo, query, me }: { repo: RepoId; query: URLSearchParams; me: Me }) {
  const rev = query.get("rev") || "main";
  const file = query.get("file");
  const path = query.get("path") ?? "";
  const tab = query.get("tab") === "history" ? "history" : "files";
  const view: View = { repo, rev, path };

  const info = useAsync(() => getJson<RepoSummary>(apiBase(repo)), [repo.type, repo.name]);
  const refs = useAsync(() => getJson<Refs>(`${apiBase(repo)}/refs`), [repo.type, repo.name]);

  if (info.error) {
    return (
      <>
        <h1 tabIndex={-1}>{repo.name}</h1>
        <ErrorNote error={info.error} />
        {me.anonymous && (
          <p>
            Private repositories need a hub token: <Link href={href("signin")}>sign in</Link>.
          </p>
        )}
      </>
    );
  }
  const isRef = refs.data !== undefined && [...refs.data.branches, ...refs.data.tags].some((ref) => ref.name === rev);

  return (
    <>
      <div class="repo-head">
        <h1 tabIndex={-1}>
          <span class="muted">{repo.type} </span>
          {repo.name}
        </h1>
        {info.data && <span class={info.data.private ? "badge private" : "badge"}>{info.data.private ? "private" : "public"}</span>}
        {info.data?.mirror && (
          <span class="badge mirror" title="files are fetched from the upstream hub when first asked for, then served from castor">
            read-only mirror
          </span>
        )}
      </div>
      <div class="toolbar">
        <label for="revision">Revision</label>
        <select id="revision" value={rev} onChange={(event) => navigate(repoHref({ ...view, rev: event.currentTarget.value, path: "" }, { tab }))}>
          {!isRef && <option value={rev}>{/^[0-9a-f]{40}$/.test(rev) ? `commit ${shortId(rev)}` : rev}</option>}
          {refs.data && (
            <>
              <optgroup label="Branches">
                {refs.data.branches.map((branch) => (
                  <option key={branch.name} value={branch.name}>
                    {branch.name}
                  </option>
                ))}
              </optgroup>
              {refs.data.tags.length > 0 && (
                <optgroup label="Tags">
                  {refs.data.tags.map((tag) => (
                    <option key={tag.name} value={tag.name}>
                      {tag.name}
                    </option>
                  ))}
                </optgroup>
              )}
            </>
          )}
        </select>
        <nav aria-label="Repository" class="tabs">
          <Link href={repoHref(view, {})} aria-current={tab === "files" ? "page" : undefined}>
            Files
          </Link>
          <Link href={repoHref(view, { tab: "history" })} aria-current={tab === "history" ? "page" : undefined}>
            History
          </Link>
        </nav>
      </div>
      {refs.data && <RefsSummary refs={refs.data} />}
      {tab === "history" ? <History view={view} /> : file !== null ? <FileView view={view} file={file} me={me} /> : <Folder view={view} />}
    </>
  );
}

function RefsSummary({ refs }: { refs: Refs }) {
  return (
    <p class="muted refs" data-testid="refs">
      {refs.branches.length} {refs.branches.length === 1 ? "branch" : "branches"}: {refs.branches.map((branch) => branch.name).join(", ")}
      {refs.tags.length > 0 && ` · ${refs.tags.length} ${refs.tags.length === 1 ? "tag" : "tags"}: ${refs.tags.map((tag) => tag.name).join(", ")}`}
    </p>
  );
}

function Breadcrumbs({ view, last }: { view: View; last?: string }) {
  const parts = view.path === "" ? [] : view.path.split("/");
  return (
    <nav aria-label="Folder" class="crumbs">
      <Link href={repoHref({ ...view, path: "" }, {})}>{view.repo.name.split("/")[1]}</Link>
      {parts.map((part, index) => (
        <span key={index}>
          {" / "}
          <Link href={repoHref(view, { path: parts.slice(0, index + 1).join("/") })}>{part}</Link>
        </span>
      ))}
      {last !== undefined && <span aria-current="page"> / {last}</span>}
    </nav>
  );
}

function Folder({ view }: { view: View }) {
  const { repo, rev, path } = view;
  const listing = useAsync(
    () =>
      getAllPages<TreeEntry>(`${apiBase(repo)}/tree/${encodeURIComponent(rev)}${path === "" ? "" : `/${path.split("/").map(encodeURIComponent).join("/")}`}`),
    [repo.type, repo.name, rev, path],
  );
  const entries = [...(listing.data ?? [])].sort((a, b) => (a.type === b.type ? a.path.localeCompare(b.path) : a.type === "directory" ? -1 : 1));
  const readme = entries.find((entry) => entry.type === "file" && /^readme\.md$/i.test(baseName(entry.path)));
  return (
    <>
      <Breadcrumbs view={view} />
      <ErrorNote error={listing.error} />
      {listing.loading && listing.data === undefined ? (
        <Loading what="files" />
      ) : entries.length === 0 ? (
        <p>This folder is empty at {rev}.</p>
      ) : (
        <table class="list" data-testid="file-tree">
          <caption class="visually-hidden">
            Files of {path === "" ? "the repository" : path} at {rev}
          </caption>
          <Head columns={["Name", ["Size", "num"], "Storage", ["Download", "hidden"]]} />
          <tbody>
            {entries.map((entry) => (
              <tr key={entry.path}>
                <td>
                  {entry.type === "directory" ? (
                    <Link href={repoHref(view, { path: entry.path })} class="folder">
                      {baseName(entry.path)}/
                    </Link>
                  ) : (
                    <Link href={repoHref(view, { path, file: entry.path })}>{baseName(entry.path)}</Link>
                  )}
                </td>
                <td class="num">{entry.type === "file" ? <Bytes value={entry.size} /> : ""}</td>
                <td>{entry.type === "file" ? entry.xetHash ? <span class="badge xet">Xet</span> : <span class="badge">inline</span> : ""}</td>
                <td>
                  {entry.type === "file" && (
                    <DownloadLink repo={repo} revision={rev} path={entry.path} filename={baseName(entry.path)} label={`Download ${entry.path}`}>
                      Download
                    </DownloadLink>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {readme && <Readme view={view} path={readme.path} />}
    </>
  );
}

function Readme({ view, path }: { view: View; path: string }) {
  const text = useAsync(async () => (await request(resolveUrl(view.repo, view.rev, path))).text(), [view.repo.type, view.repo.name, view.rev, path]);
  return (
    <Section title={path} id="readme">
      <ErrorNote error={text.error} />
      {text.data !== undefined ? <Markdown text={text.data} /> : <Loading what="the README" />}
    </Section>
  );
}

function FileView({ view, file, me }: { view: View; file: string; me: Me }) {
  const { repo, rev } = view;
  const entry = useAsync(async () => {
    const [found] = await sendJson<TreeEntry[]>("POST", `${apiBase(repo)}/paths-info/${encodeURIComponent(rev)}`, { paths: [file] });
    if (found === undefined || found.type !== "file") throw new Error(`${file} is not a file at ${rev}`);
    return found;
  }, [repo.type, repo.name, rev, file]);
  const data = entry.data;
  return (
    <>
      <Breadcrumbs view={view} last={baseName(file)} />
      <ErrorNote error={entry.error} />
      {data === undefined ? (
        !entry.error && <Loading what="the file" />
      ) : (
        <Section title={file} id="file">
          <dl class="facts">
            <dt>Size</dt>
            <dd>
              <Bytes value={data.size} testId="file-size" />
            </dd>
            <dt>Stored</dt>
            <dd>{data.xetHash ? "Xet (deduplicated chunks)" : "inline (in the git history)"}</dd>
            {data.lfs && (
              <>
                <dt>SHA-256</dt>
                <dd>
                  <code>{data.lfs.oid}</code>
                </dd>
              </>
            )}
            {data.xetHash && (
              <>
                <dt>Xet hash</dt>
                <dd>
                  <code>{data.xetHash}</code>
                </dd>
              </>
            )}
            <dt>Git blob id</dt>
            <dd>
              <code>{data.oid}</code>
            </dd>
          </dl>
          <p>
            <DownloadLink repo={repo} revision={rev} path={file} filename={baseName(file)}>
              Download {baseName(file)}
            </DownloadLink>
          </p>
          {data.xetHash && me.admin && <ChunkSharing view={view} file={file} />}
        </Section>
      )}
    </>
  );
}

function ChunkSharing({ view, file }: { view: View; file: string }) {
  const sharing = useAsync(
    () => getJson<Sharing>(`/api/castor/sharing?${new URLSearchParams({ repo: `${view.repo.type}:${view.repo.name}`, revision: view.rev, path: file })}`),
    [view.repo.type, view.repo.name, view.rev, file],
  );
  const data = sharing.data;
  return (
    <div data-testid="chunk-sharing">
      <h3>Deduplication</h3>
      <ErrorNote error={sharing.error} />
      {data === undefined ? (
        !sharing.error && <Loading what="chunk sharing" />
      ) : (
        <p>
          <data value={String(data.sharedChunks)}>{data.sharedChunks}</data> of <data value={String(data.chunks)}>{data.chunks}</data> chunks (
          {percent(data.sharedChunks, data.chunks)}, <Bytes value={data.sharedBytes} /> of <Bytes value={data.bytes} />) are shared with {data.otherFiles} other{" "}
          {data.otherFiles === 1 ? "file" : "files"}
          {data.repositories.length > 0 && ` in ${data.repositories.join(", ")}`}.
        </p>
      )}
    </div>
  );
}

function History({ view }: { view: View }) {
  const { repo, rev } = view;
  const [pages, setPages] = useState(1);
  const commits = useAsync(
    () => getJson<Commit[]>(`${apiBase(repo)}/commits/${encodeURIComponent(rev)}?limit=${COMMITS_PAGE * pages}`),
    [repo.type, repo.name, rev, pages],
  );
  const list = commits.data ?? [];
  return (
    <>
      <ErrorNote error={commits.error} />
      {commits.loading && commits.data === undefined ? (
        <Loading what="the history" />
      ) : (
        <ol class="commits" data-testid="commit-list">
          {list.map((commit) => (
            <li key={commit.id} class="card">
              <div class="commit-head">
                <strong>{commit.title}</strong>
                <span class="muted">
                  {commit.authors.map((author) => author.user).join(", ")} · {formatDate(commit.date)} · <code>{shortId(commit.id)}</code>
                </span>
                <Link href={repoHref({ ...view, rev: commit.id, path: "" }, {})} aria-label={`Browse files at commit ${shortId(commit.id)}`}>
                  Browse files
                </Link>
              </div>
              {commit.message && <p class="commit-message">{commit.message}</p>}
              <Changes repo={repo} commit={commit} />
            </li>
          ))}
        </ol>
      )}
      {list.length === COMMITS_PAGE * pages && (
        <button type="button" onClick={() => setPages(pages + 1)}>
          Show older commits
        </button>
      )}
    </>
  );
}

interface Change {
  path: string;
  change: "added" | "modified" | "deleted";
}

/** The files whose git blob differs between the commit's tree and its first parent's. */
async function changesOf(repo: RepoId, commit: Commit): Promise<Change[]> {
  const files = async (oid: string) =>
    new Map(
      (await getAllPages<TreeEntry>(`${apiBase(repo)}/tree/${oid}?recursive=true`))
        .filter((entry) => entry.type === "file")
        .map((entry) => [entry.path, entry.oid] as const),
    );
  const after = await files(commit.id);
  const before = commit.parents.length === 0 ? new Map<string, string>() : await files(commit.parents[0]);
  const changes: Change[] = [];
  for (const [path, oid] of after) {
    const was = before.get(path);
    if (was === undefined) changes.push({ path, change: "added" });
    else if (was !== oid) changes.push({ path, change: "modified" });
  }
  for (const path of before.keys()) if (!after.has(path)) changes.push({ path, change: "deleted" });
  return changes.sort((a, b) => a.path.localeCompare(b.path));
}

/** Loaded when opened: each commit's changes take two tree listings. */
function Changes({ repo, commit }: { repo: RepoId; commit: Commit }) {
  const [open, setOpen] = useState(false);
  return (
    <details onToggle={(event) => setOpen(event.currentTarget.open)}>
      <summary>Changed files</summary>
      {open && <ChangedFiles repo={repo} commit={commit} />}
    </details>
  );
}

function ChangedFiles({ repo, commit }: { repo: RepoId; commit: Commit }) {
  const changes = useAsync(() => changesOf(repo, commit), [repo.type, repo.name, commit.id]);
  if (changes.error) return <ErrorNote error={changes.error} />;
  if (changes.data === undefined) return <Loading what="the changes" />;
  if (changes.data.length === 0) return <p class="muted">No file changed.</p>;
  return (
    <ul class="changes">
      {changes.data.map((change) => (
        <li key={change.path}>
          <span class={`change ${change.change}`}>{change.change}</span> <code>{change.path}</code>
        </li>
      ))}
    </ul>
  );
}
