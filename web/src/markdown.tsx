/**
 * A README as HTML: marked renders the Markdown, DOMPurify removes whatever could run or load
 * (scripts, event handlers, `javascript:` links, forms, frames) before it reaches the page. The
 * page's Content-Security-Policy stops the rest (remote images, inline styles and scripts).
 */
import DOMPurify from "dompurify";
import { marked } from "marked";
import { useMemo } from "preact/hooks";

/** A model card's YAML header (`---` … `---`) is metadata, not text to show. */
const FRONT_MATTER = /^---\r?\n[\s\S]*?\r?\n---\r?\n/;

// An image the README gives no text for still needs one for screen readers: its file name.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "IMG" && !node.hasAttribute("alt")) {
    const src = node.getAttribute("src") ?? "";
    node.setAttribute("alt", src.slice(src.lastIndexOf("/") + 1) || "image");
  }
});

export function renderMarkdown(text: string): string {
  const html = marked.parse(text.replace(FRONT_MATTER, ""), { async: false, gfm: true });
  return DOMPurify.sanitize(html, { USE_PROFILES: { html: true }, FORBID_TAGS: ["style", "form", "input", "button"], FORBID_ATTR: ["style"] });
}

export function Markdown({ text }: { text: string }) {
  const html = useMemo(() => renderMarkdown(text), [text]);
  // Sanitised just above: the one place the app sets HTML.
  // DOMPurify's output.
  return <div class="markdown" dangerouslySetInnerHTML={{ __html: html }} />;
}
