/** Signing in: a hub token (`castor token create`, or one an admin made here), checked before it is kept. */
import { useState } from "preact/hooks";
import { ApiError, type Me } from "../api.js";
import { href, navigate } from "../router.js";

export function SignInPage({ onSignIn }: { onSignIn: (token: string) => void }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    const value = token.trim();
    if (!/^hf_[A-Za-z0-9_-]+$/.test(value)) {
      setError("A hub token starts with hf_ and has only letters, digits, '-' and '_'.");
      return;
    }
    setBusy(true);
    try {
      // Checked with the token itself before anything is stored.
      const response = await fetch("/api/castor/me", { headers: { authorization: `Bearer ${value}` } });
      if (!response.ok) {
        const body = (await response.json().catch(() => ({}))) as { error?: string };
        throw new ApiError(response.status, body.error ?? `castor answered ${response.status}`);
      }
      const me = (await response.json()) as Me;
      onSignIn(value);
      navigate(href(me.admin ? "storage" : ""));
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <h1 tabIndex={-1}>Sign in</h1>
      <form class="card narrow" onSubmit={submit}>
        <p>
          Sign in with a hub token. It stays in this browser tab only (session storage) and is sent to castor with each request. Public repositories can be
          browsed without one.
        </p>
        <label for="token">Hub token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          spellcheck={false}
          placeholder="hf_…"
          value={token}
          onInput={(event) => setToken(event.currentTarget.value)}
          aria-describedby={error ? "token-error" : undefined}
          required
        />
        {error && (
          <p id="token-error" class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy}>
          {busy ? "Checking…" : "Sign in"}
        </button>
      </form>
    </>
  );
}
