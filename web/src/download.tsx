/**
 * A download link to a file's `resolve` URL. Anonymous callers follow it like any link. A link
 * cannot carry the `Authorization` header a signed-in caller's private files need, and fetching
 * the file with it would hold the whole body in the tab before it could be saved; so a signed-in
 * click asks castor for a short-lived signed link to the file (`POST /api/castor/download-links`,
 * src/auth/download-link.ts) and hands that to the browser, whose download manager streams the
 * file to disk, with its own progress and resume.
 */
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { type DownloadLinkBody, type RepoId, resolveUrl, type DownloadLink as SignedLink, sendJson, storedToken } from "./api.js";

interface DownloadLinkProps {
  repo: RepoId;
  revision: string;
  path: string;
  filename: string;
  children: ComponentChildren;
  label?: string;
}

export function DownloadLink({ repo, revision, path, filename, children, label }: DownloadLinkProps) {
  const [error, setError] = useState<string | null>(null);
  const onClick = async (event: MouseEvent) => {
    if (storedToken() === null) return;
    event.preventDefault();
    setError(null);
    try {
      const body: DownloadLinkBody = { repo: `${repo.type}:${repo.name}`, revision, path };
      const { url } = await sendJson<SignedLink>("POST", "/api/castor/download-links", body);
      const anchor = document.createElement("a");
      anchor.href = url;
      anchor.download = filename;
      document.body.append(anchor);
      anchor.click();
      anchor.remove();
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  return (
    <>
      <a href={resolveUrl(repo, revision, path)} download={filename} onClick={onClick} aria-label={label}>
        {children}
      </a>
      {error && (
        <span class="error" role="alert">
          {" "}
          {error}
        </span>
      )}
    </>
  );
}
