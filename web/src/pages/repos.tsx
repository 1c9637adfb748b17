/** The repositories the caller can read, searchable and filtered by type, with size and last commit. */
import { useEffect, useState } from "preact/hooks";
import { getJson, PLURAL, REPO_TYPES, type RepoId, type RepoStorage, type RepoSummary, type RepoType } from "../api.js";
import { Bytes, ErrorNote, Head, Loading, useAsync } from "../common.js";
import { formatDate, shortId } from "../format.js";
import { href, Link, navigate } from "../router.js";

/** Repositories shown at once: each one's size is one request. */
const PAGE = 50;

interface Listed extends RepoSummary {
  type: RepoType;
}

/** Sizes of the listed repositories, a few requests at a time. */
function useSizes(repos: RepoId[]): Map<string, number | null> {
  const [sizes, setSizes] = useState(new Map<string, number | null>());
  const key = repos.map((repo) => `${repo.type}:${repo.name}`).join(",");
  // `key` stands for `repos`.
  useEffect(() => {
    let current = true;
    const queue = [...repos];
    const found = new Map<string, number | null>();
    const worker = async () => {
      for (let repo = queue.shift(); repo !== undefined && current; repo = queue.shift()) {
        const ref = `${repo.type}:${repo.name}`;
        try {
          found.set(ref, (await getJson<RepoStorage>(`/api/castor/repos/${PLURAL[repo.type]}/${repo.name}/storage`)).logicalBytes);
        } catch {
          found.set(ref, null);
        }
        if (current) setSizes(new Map(found));
      }
    };
    void Promise.all([worker(), worker(), worker(), worker()]);
    return () => {
      current = false;
    };
  }, [key]);
  return sizes;
}

export function ReposPage({ query }: { query: URLSearchParams }) {
  const search = query.get("q") ?? "";
  const typeFilter = (query.get("type") ?? "all") as RepoType | "all";
  const [text, setText] = useState(search);

  // The search box updates the address (so a search can be bookmarked) once typing pauses.
  useEffect(() => {
    if (text === search) return;
    const timer = setTimeout(() => navigate(href("", { q: text, type: typeFilter === "all" ? undefined : typeFilter }), { replace: true }), 250);
    return () => clearTimeout(timer);
  }, [text, search, typeFilter]);

  const listing = useAsync(async () => {
    const types = typeFilter === "all" ? REPO_TYPES : [typeFilter];
    const lists = await Promise.all(
      types.map(async (type) =>
        (await getJson<RepoSummary[]>(`/api/${PLURAL[type]}?${new URLSearchParams({ search, limit: String(PAGE) })}`)).map((repo) => ({ ...repo, type })),
      ),
    );
    return lists.flat().sort((a: Listed, b: Listed) => b.lastModified.localeCompare(a.lastModified));
  }, [search, typeFilter]);
  const shown = (listing.data ?? []).slice(0, PAGE);
  const sizes = useSizes(shown.map((repo) => ({ type: repo.type, name: repo.id })));

  return (
    <>
      <h1 tabIndex={-1}>Repositories</h1>
      <search class="filters">
        <div>
          <label for="search">Search by name</label>
          <input id="search" type="search" value={text} onInput={(event) => setText(event.currentTarget.value)} placeholder="namespace/name" />
        </div>
        <div>
          <label for="type">Type</label>
          <select
            id="type"
            value={typeFilter}
            onChange={(event) => {
              const type = event.currentTarget.value;
              navigate(href("", { q: text, type: type === "all" ? undefined : type }), { replace: true });
            }}
          >
            <option value="all">All types</option>
            <option value="model">Models</option>
            <option value="dataset">Datasets</option>
            <option value="space">Spaces</option>
          </select>
        </div>
      </search>
      <ErrorNote error={listing.error} />
      {listing.loading && listing.data === undefined ? (
        <Loading what="repositories" />
      ) : shown.length === 0 ? (
        <p>No repository matches{search ? ` “${search}”` : ""}. Private repositories are listed for a hub token that covers them.</p>
      ) : (
        <table class="list" data-testid="repo-list">
          <caption class="visually-hidden">Repositories, most recently changed first</caption>
          <Head columns={["Name", "Type", "Visibility", ["Size", "num"], "Last commit"]} />
          <tbody>
            {shown.map((repo) => {
              const size = sizes.get(`${repo.type}:${repo.id}`);
              return (
                <tr key={`${repo.type}:${repo.id}`}>
                  <td>
                    <Link href={href(`${PLURAL[repo.type]}/${repo.id}`)}>{repo.id}</Link>
                  </td>
                  <td>{repo.type}</td>
                  <td>
                    {repo.private ? <span class="badge private">private</span> : <span class="badge">public</span>}
                    {repo.mirror && (
                      <span class="badge mirror" title="a read-only mirror of the upstream hub's repository">
                        mirror
                      </span>
                    )}
                  </td>
                  <td class="num">{size === undefined ? "…" : size === null ? "–" : <Bytes value={size} />}</td>
                  <td>
                    {formatDate(repo.lastModified)}
                    {repo.sha && <code class="muted"> {shortId(repo.sha)}</code>}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {(listing.data?.length ?? 0) > PAGE && <p class="muted">Showing the {PAGE} most recently changed; search to narrow the list.</p>}
    </>
  );
}
