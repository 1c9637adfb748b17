/**
 * A download link to a file's `resolve` URL. Anonymous callers follow it like any link; a signed-in
 * caller's click fetches the file with the bearer token instead (a link cannot carry the
 * `Authorization` header private repositories need) and saves what arrives.
 */
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { request, storedToken } from "./api.js";

export function DownloadLink({ url, filename, children, label }: { url: string; filename: string; children: ComponentChildren; label?: string }) {
  const [error, setError] = useState<string | null>(null);
  const onClick = async (event: MouseEvent) => {
    if (storedToken() === null) return;
    event.preventDefault();
    setError(null);
    try {
      const blob = await (await request(url)).blob();
      const objectUrl = URL.createObjectURL(blob);
      const anchor = document.createElement("a");
      anchor.href = objectUrl;
      anchor.download = filename;
      document.body.append(anchor);
      anchor.click();
      anchor.remove();
      // Revoked later: the browser reads the object URL after the click returns.
      setTimeout(() => URL.revokeObjectURL(objectUrl), 60_000);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  return (
    <>
      <a href={url} download={filename} onClick={onClick} aria-label={label}>
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
