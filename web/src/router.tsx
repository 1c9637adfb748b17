/**
 * A router of a few lines: the app's pages live below BASE and move with the History API, so
 * every page has an address that can be bookmarked and reloaded (castor answers the app for any
 * path below BASE). A router library would add more than the whole app needs.
 */
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";

export const BASE = "/-/ui/";

export interface Location {
  /** The path below BASE, without a leading slash: "" for the home page. */
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : "";
  return { path: decodeURIComponent(path).replace(/\/+$/, ""), query: new URLSearchParams(location.search) };
}

const CHANGE = "castor:navigate";

/** Goes to `href` (an address below BASE) without reloading the page. */
export function navigate(href: string, options: { replace?: boolean } = {}): void {
  if (options.replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  dispatchEvent(new Event(CHANGE));
}

export function useLocation(): Location {
  const [where, setWhere] = useState(current);
  useEffect(() => {
    const update = () => setWhere(current());
    addEventListener("popstate", update);
    addEventListener(CHANGE, update);
    return () => {
      removeEventListener("popstate", update);
      removeEventListener(CHANGE, update);
    };
  }, []);
  return where;
}

/** An address below BASE: `href("models/a/b", {rev: "main"})`. */
export function href(path: string, query: Record<string, string | undefined> = {}): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value !== undefined && value !== "") params.set(key, value);
  const search = params.toString();
  return `${BASE}${path}${search === "" ? "" : `?${search}`}`;
}

/** A real link (it opens in a new tab, it is reachable by keyboard) that navigates in place when clicked plainly. */
export function Link(props: { href: string; children: ComponentChildren; class?: string; "aria-current"?: "page"; "aria-label"?: string }) {
  const { href: target, children, ...rest } = props;
  const onClick = (event: MouseEvent) => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(target);
  };
  return (
    <a {...rest} href={target} onClick={onClick}>
      {children}
    </a>
  );
}
