/** Pieces every page uses: loading data, showing errors, numbers with their exact value. */
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import { formatBytes } from "./format.js";

export interface Async<T> {
  data?: T;
  error?: Error;
  loading: boolean;
  reload: () => void;
}

/** Runs `load` when `deps` change (and on `reload`); an answer to an older run is dropped. */
export function useAsync<T>(load: () => Promise<T>, deps: unknown[]): Async<T> {
  const [state, setState] = useState<{ data?: T; error?: Error; loading: boolean }>({ loading: true });
  const [generation, setGeneration] = useState(0);
  // `deps` are the caller's, `load` is a new closure each render.
  useEffect(() => {
    let current = true;
    setState((previous) => ({ data: previous.data, loading: true }));
    load().then(
      (data) => current && setState({ data, loading: false }),
      (error: unknown) => current && setState({ error: error instanceof Error ? error : new Error(String(error)), loading: false }),
    );
    return () => {
      current = false;
    };
  }, [...deps, generation]);
  const reload = useCallback(() => setGeneration((n) => n + 1), []);
  return { ...state, reload };
}

export function ErrorNote({ error }: { error: Error | undefined }) {
  if (error === undefined) return null;
  return (
    <p class="error" role="alert">
      {error.message}
    </p>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" role="status">
      Loading {what}…
    </p>
  );
}

/** A size in words, its exact byte count in the markup (`<data value>`), for people and for tests alike. */
export function Bytes({ value, testId }: { value: number; testId?: string }) {
  return (
    <data value={String(value)} title={`${value.toLocaleString("en")} bytes`} data-testid={testId}>
      {formatBytes(value)}
    </data>
  );
}

export function Section({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  const headingId = `${id ?? title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}-heading`;
  return (
    <section aria-labelledby={headingId} class="card">
      <h2 id={headingId}>{title}</h2>
      {children}
    </section>
  );
}

/** A column of `Head`: its title, `num` for right-aligned numbers, `hidden` for a title only screen readers need. */
export type Column = string | [title: string, kind: "num" | "hidden"];

/** A table's header row: every table of the app has one, with column scopes. */
export function Head({ columns }: { columns: Column[] }) {
  return (
    <thead>
      <tr>
        {columns.map((column) => {
          const [title, kind] = typeof column === "string" ? [column, undefined] : column;
          return (
            <th key={title} scope="col" class={kind === "num" ? "num" : undefined}>
              {kind === "hidden" ? <span class="visually-hidden">{title}</span> : title}
            </th>
          );
        })}
      </tr>
    </thead>
  );
}
