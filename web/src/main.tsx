/**
 * castor's web interface: browse repositories, their files and history; see what deduplication
 * saves; manage tokens and repositories (admin tokens). Every number comes from castor's HTTP
 * API on this origin, with the hub token the user signed in with.
 */
import { Fragment, render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, getJson, type Me, type RepoType, REPO_TYPES, storedToken, storeToken } from "./api.js";
import { useAsync } from "./common.js";
import { AdminPage } from "./pages/admin.js";
import { RepoPage } from "./pages/repo.js";
import { ReposPage } from "./pages/repos.js";
import { SignInPage } from "./pages/signin.js";
import { StoragePage } from "./pages/storage.js";
import { href, Link, navigate, useLocation } from "./router.js";
import "./styles.css";

const ANONYMOUS: Me = { anonymous: true, admin: false };

function App() {
  const where = useLocation();
  const [tokenVersion, setTokenVersion] = useState(0);
  const [notice, setNotice] = useState<string | null>(null);
  const session = useAsync(async () => {
    if (storedToken() === null) return ANONYMOUS;
    try {
      return await getJson<Me>("/api/castor/me");
    } catch (error) {
      // A token revoked or expired since sign-in: back to anonymous, and say so.
      if (error instanceof ApiError && error.status === 401) {
        storeToken(null);
        setNotice("Your hub token is no longer valid (revoked or expired): you are browsing anonymously.");
        return ANONYMOUS;
      }
      throw error;
    }
  }, [tokenVersion]);
  const me = session.data ?? ANONYMOUS;

  // Each page names itself in the title, and focus moves to its heading for screen readers.
  useEffect(() => {
    document.querySelector<HTMLElement>("main h1")?.focus({ preventScroll: true });
  }, [where.path]);

  const signIn = (token: string | null) => {
    storeToken(token);
    setNotice(null);
    setTokenVersion((n) => n + 1);
  };

  const parts = where.path.split("/");
  const repoType = REPO_TYPES.find((type) => `${type}s` === parts[0]) as RepoType | undefined;
  let page;
  if (session.data === undefined)
    page = session.error ? (
      <p class="error" role="alert">
        {session.error.message}
      </p>
    ) : (
      <p role="status">Loading…</p>
    );
  else if (where.path === "") page = <ReposPage query={where.query} />;
  else if (where.path === "signin") page = <SignInPage onSignIn={signIn} />;
  else if (where.path === "storage") page = <StoragePage me={me} />;
  else if (where.path === "admin") page = <AdminPage me={me} />;
  else if (repoType !== undefined && parts.length === 3)
    page = <RepoPage repo={{ type: repoType, name: `${parts[1]}/${parts[2]}` }} query={where.query} me={me} />;
  else
    page = (
      <>
        <h1 tabIndex={-1}>Page not found</h1>
        <p>
          Nothing lives at this address. <Link href={href("")}>Browse the repositories</Link>.
        </p>
      </>
    );

  const section = where.path === "storage" ? "storage" : where.path === "admin" ? "admin" : where.path === "signin" ? "signin" : "repos";
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <Link href={href("")} class="brand">
          castor
        </Link>
        <nav aria-label="Main">
          <ul>
            <li>
              <Link href={href("")} aria-current={section === "repos" ? "page" : undefined}>
                Repositories
              </Link>
            </li>
            {me.admin && (
              <>
                <li>
                  <Link href={href("storage")} aria-current={section === "storage" ? "page" : undefined}>
                    Storage
                  </Link>
                </li>
                <li>
                  <Link href={href("admin")} aria-current={section === "admin" ? "page" : undefined}>
                    Admin
                  </Link>
                </li>
              </>
            )}
          </ul>
        </nav>
        <div class="who">
          {me.anonymous ? (
            <>
              <span>Anonymous</span>
              <Link href={href("signin")} class="button">
                Sign in
              </Link>
            </>
          ) : (
            <>
              <span data-testid="signed-in-as">
                {me.user ?? me.id} ({me.admin ? "admin" : me.access})
              </span>
              <button
                type="button"
                onClick={() => {
                  signIn(null);
                  navigate(href(""));
                }}
              >
                Sign out
              </button>
            </>
          )}
        </div>
      </header>
      <main id="main">
        {notice && (
          <p class="error" role="alert">
            {notice}
          </p>
        )}
        {/* Keyed by the session: signing in or out loads every page's data anew. */}
        <Fragment key={tokenVersion}>{page}</Fragment>
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
