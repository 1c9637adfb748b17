/**
 * README.md as a test: the code blocks of a section, run in order, exactly as printed, and the
 * outputs the README shows compared with what the commands print. Used by
 * test/docs/readme-walkthrough.test.ts ("Walkthrough", in `npm test`) and
 * test/scaleout/readme-scaling-out.test.ts ("Scaling out", in CI's scale-out step).
 *
 * The conventions, which the README's walkthrough introduces to its readers:
 *
 * - **What runs.** Every fenced block of the section, top to bottom, in ONE bash session (as a
 *   reader types them into one terminal: variables, the current folder, an activated venv and
 *   background jobs carry over), under `set -eo pipefail`, so a failing command fails the test.
 *   ```` ```sh ```` blocks run as they are. A ```` ```python ```` block runs as `python3 -`
 *   (pasted into the venv's python), unless its first line is a comment naming a file
 *   (`# hf-xet-demo.py — …`): then it is saved under that name, for a later sh block to run. A
 *   ```` ```js ```` block must name its file that way (`// client-demo.mjs — …`) and is saved.
 *   Any other block in the section needs a directive.
 * - **Directives**, an HTML comment on the line before the block (invisible on the rendered page):
 *   `<!-- doc-test: skip, WHY -->` leaves the block out, saying why it cannot run here;
 *   `<!-- doc-test: venv NAME, WHY -->` marks a block that makes a venv (`python3 -m venv PATH`
 *   and `PATH/bin/pip install PINS`): instead of building it, the test links PATH to the venv
 *   NAME of the interop tests (test/interop/hub-clients.ts, `PYTHON_VENVS`), after checking
 *   that the block installs exactly those packages at those pins.
 * - **Shown output.** Lines `# → TEXT` right after a command (in sh and python blocks) are what
 *   it prints on stdout, line for line (stderr is not compared; ANSI colours and trailing spaces
 *   are ignored). A command is the line before the `# →` lines, with the lines continued into it
 *   (a trailing `\` in sh, indented lines in python). In TEXT, `<name>` matches any text of one
 *   line and binds it: every later `<name>` in the section must be that same text (a commit id
 *   shown twice is one commit); `…` matches any text, or, alone on a line, any number of lines.
 * - **Addresses.** The README's servers listen on fixed ports (`127.0.0.1:8080`); the test's on
 *   ports the OS chose. Every `127.0.0.1:PORT` of a port the caller maps is rewritten, in the
 *   blocks and in the shown output alike; nothing else is changed.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const README_PATH = fileURLToPath(new URL("../../README.md", import.meta.url));

export type Directive = { kind: "skip"; reason: string } | { kind: "venv"; name: string; reason: string };

export interface DocBlock {
  /** The `##` section and the nearest `###` heading above the block. */
  section: string;
  heading: string;
  /** 1-based line of the opening fence in README.md. */
  line: number;
  /** The fence's info string: `sh`, `python`, `js`, … */
  lang: string;
  lines: string[];
  directive: Directive | null;
}

const FENCE = /^```(\S*)\s*$/;
const DIRECTIVE = /^<!--\s*doc-test:\s*(.*?)\s*-->\s*$/;
/** `# → TEXT` (sh, python): shown stdout. */
const OUTPUT_LINE = /^# →(?: (.*))?$/;
const SAVED_FILE = { python: /^#\s*([\w.-]+\.py)\b/, js: /^\/\/\s*([\w.-]+\.m?js)\b/ } as const;

/** Every fenced block of README.md with its section, heading and directive. */
export function parseReadme(text: string = readFileSync(README_PATH, "utf8")): DocBlock[] {
  const lines = text.split("\n");
  const blocks: DocBlock[] = [];
  let section = "";
  let heading = "";
  let pending: { directive: Directive; line: number } | null = null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence !== null) {
      const start = i;
      const body: string[] = [];
      for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i]);
      blocks.push({ section, heading, line: start + 1, lang: fence[1], lines: body, directive: pending?.directive ?? null });
      pending = null;
      continue;
    }
    const directive = DIRECTIVE.exec(line);
    if (directive !== null) {
      pending = { directive: parseDirective(directive[1], i + 1), line: i + 1 };
      continue;
    }
    if (line.startsWith("## ")) [section, heading] = [line.slice(3).trim(), ""];
    else if (line.startsWith("### ")) heading = line.slice(4).trim();
    if (line.trim() !== "" && pending !== null) throw new Error(`README.md:${pending.line}: a doc-test directive must be right before a code block`);
  }
  return blocks;
}

function parseDirective(text: string, line: number): Directive {
  const skip = /^skip,\s*(\S.*)$/.exec(text);
  if (skip !== null) return { kind: "skip", reason: skip[1] };
  const venv = /^venv\s+([\w.-]+),\s*(\S.*)$/.exec(text);
  if (venv !== null) return { kind: "venv", name: venv[1], reason: venv[2] };
  throw new Error(`README.md:${line}: unknown doc-test directive ${JSON.stringify(text)}: use "skip, WHY" or "venv NAME, WHY"`);
}

/** The blocks of the `## title` section. */
export function sectionBlocks(title: string, blocks: DocBlock[] = parseReadme()): DocBlock[] {
  const found = blocks.filter((block) => block.section === title);
  assert.ok(found.length > 0, `README.md has no code blocks in a "## ${title}" section`);
  return found;
}

export function where(block: DocBlock): string {
  return `README.md:${block.line} (${block.heading || block.section})`;
}

/** The file a python or js block is saved as, from its first line's comment; null: run directly. */
export function savedFileOf(block: DocBlock): string | null {
  const pattern = block.lang === "python" || block.lang === "js" ? SAVED_FILE[block.lang] : null;
  return pattern?.exec(block.lines[0] ?? "")?.[1] ?? null;
}

// ---------------------------------------------------------------------------------------------
// Venvs

/** What a venv block makes: the venv's path (as written) and the packages it installs, as written. */
export function venvBlockOf(block: DocBlock): { path: string; requirements: string[] } {
  const text = block.lines.join("\n");
  const made = /^python3 -m venv (\S+)\s*$/m.exec(text);
  assert.ok(made, `${where(block)}: a venv block runs "python3 -m venv PATH"`);
  const path = made[1];
  assert.match(path, /^[~\w./-]+$/, `${where(block)}: the venv path ${path} must be a plain path`);
  const install = new RegExp(`^${escapeRegExp(path)}/bin/pip install (.+)$`, "m").exec(text);
  assert.ok(install, `${where(block)}: a venv block installs with "${path}/bin/pip install …"`);
  const requirements = install[1]
    .replace(/\s#.*$/, "")
    .split(/\s+/)
    .filter((word) => word !== "" && !word.startsWith("-"));
  return { path, requirements };
}

const packageName = (requirement: string) =>
  requirement
    .split(/[=<>!~[]/)[0]
    .toLowerCase()
    .replace(/[-_.]+/g, "-");

/**
 * Problems with a venv block standing for the venv of `pins`: the block must name every
 * package of it and no other, each pinned as there (or unpinned: torch's build is the reader's
 * choice).
 */
export function venvPinProblems(block: DocBlock, pins: readonly string[]): string[] {
  const problems: string[] = [];
  const { requirements } = venvBlockOf(block);
  const ours = new Map(pins.map((pin) => [packageName(pin), pin]));
  const theirs = new Map(requirements.map((requirement) => [packageName(requirement), requirement]));
  for (const [name, requirement] of theirs) {
    const pin = ours.get(name);
    if (pin === undefined) problems.push(`${where(block)} installs ${requirement}, which the test's venv lacks (${pins.join(" ")})`);
    else if (requirement.includes("==") && requirement !== pin) problems.push(`${where(block)} installs ${requirement}, the test's venv ${pin}`);
  }
  for (const [name, pin] of ours) if (!theirs.has(name)) problems.push(`${where(block)} does not install ${pin}, which the test's venv holds`);
  return problems;
}

// ---------------------------------------------------------------------------------------------
// The conventions, checked without running anything

/** Everything in `blocks` that breaks the conventions above; empty when all is well. */
export function conventionProblems(blocks: DocBlock[], venvPins: Readonly<Record<string, readonly string[]>>): string[] {
  const problems: string[] = [];
  for (const block of blocks) {
    const { directive } = block;
    if (directive?.kind === "skip") continue;
    if (directive?.kind === "venv") {
      const pins = venvPins[directive.name];
      if (pins === undefined) problems.push(`${where(block)}: no venv named ${directive.name} (known: ${Object.keys(venvPins).join(", ")})`);
      else problems.push(...venvPinProblems(block, pins));
      continue;
    }
    const saved = savedFileOf(block);
    if (block.lang !== "sh" && block.lang !== "python" && block.lang !== "js") {
      problems.push(`${where(block)}: a \`\`\`${block.lang} block cannot run: make it sh, python or js, or say why with <!-- doc-test: skip, WHY -->`);
    } else if (block.lang === "js" && saved === null) {
      problems.push(`${where(block)}: a js block names the file it is saved as on its first line (// NAME.mjs — …)`);
    } else if (saved !== null && block.lines.some((line) => OUTPUT_LINE.test(line))) {
      problems.push(`${where(block)}: a block saved as ${saved} shows no output: show it below the command that runs the file`);
    } else {
      for (const anchor of anchorsOf(block)) {
        if (anchor.problem !== null) problems.push(`${where(block)}, line ${block.line + 1 + anchor.end}: ${anchor.problem}`);
      }
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Shown output

interface Anchor {
  /** The command's first and last line, indexes into the block's lines. */
  start: number;
  end: number;
  /** The shown lines (after `# → `). */
  expected: string[];
  problem: string | null;
}

/** The commands of a block that show their output, with the output shown. */
function anchorsOf(block: DocBlock): Anchor[] {
  const anchors: Anchor[] = [];
  const { lines } = block;
  for (let i = 0; i < lines.length; i++) {
    if (!OUTPUT_LINE.test(lines[i])) continue;
    const expected: string[] = [];
    const first = i;
    for (; i < lines.length && OUTPUT_LINE.test(lines[i]); i++) expected.push(OUTPUT_LINE.exec(lines[i])![1] ?? "");
    i--;
    const end = first - 1;
    if (end < 0 || lines[end].trim() === "" || /^\s*#/.test(lines[end])) {
      anchors.push({ start: first, end: first, expected, problem: "# → lines must follow the command whose output they show" });
      continue;
    }
    let start = end;
    if (block.lang === "sh") {
      while (start > 0 && lines[start - 1].endsWith("\\")) start--;
    } else {
      while (start > 0 && /^[\s)\]}]/.test(lines[start])) start--;
    }
    anchors.push({ start, end, expected, problem: null });
  }
  return anchors;
}

const ANSI = /\x1b\[[0-9;?]*[ -/]*[@-~]/g;

/** What a terminal shows of `text`, line by line: no colours, no trailing spaces or `\r`, no trailing empty lines. */
export function shownLines(text: string): string[] {
  const lines = text
    .replace(ANSI, "")
    .split("\n")
    .map((line) => line.replace(/.*\r(?=.)/, "").trimEnd());
  while (lines.length > 0 && lines.at(-1) === "") lines.pop();
  return lines;
}

const PLACEHOLDER = /<([^<>\n]+)>|…/g;

/**
 * Whether `actual` matches the shown `pattern` (`<name>` placeholders, `…`), given the
 * placeholders bound so far: the bindings it adds, or null.
 */
export function matchLine(pattern: string, actual: string, bound: ReadonlyMap<string, string>): Map<string, string> | null {
  let source = "";
  let last = 0;
  const groups = new Map<string, string>();
  for (const match of pattern.matchAll(PLACEHOLDER)) {
    source += escapeRegExp(pattern.slice(last, match.index));
    last = match.index + match[0].length;
    const name = match[1];
    if (name === undefined) source += ".*?";
    else if (bound.has(name)) source += escapeRegExp(bound.get(name)!);
    else if (groups.has(name)) source += `\\k<${groups.get(name)}>`;
    else {
      const group = `g${groups.size}`;
      groups.set(name, group);
      source += `(?<${group}>.+?)`;
    }
  }
  source += escapeRegExp(pattern.slice(last));
  const found = new RegExp(`^${source}$`).exec(actual);
  if (found === null) return null;
  const added = new Map(bound);
  for (const [name, group] of groups) added.set(name, found.groups![group]);
  return added;
}

/** Matches shown lines against printed ones (a line of only `…` takes any number of lines): the new bindings, or null. */
export function matchLines(expected: readonly string[], actual: readonly string[], bound: ReadonlyMap<string, string>): Map<string, string> | null {
  const step = (i: number, j: number, bindings: ReadonlyMap<string, string>): Map<string, string> | null => {
    if (i === expected.length) return j === actual.length ? new Map(bindings) : null;
    if (expected[i] === "…") {
      for (let k = j; k <= actual.length; k++) {
        const found = step(i + 1, k, bindings);
        if (found !== null) return found;
      }
      return null;
    }
    if (j === actual.length) return null;
    const line = matchLine(expected[i], actual[j], bindings);
    return line === null ? null : step(i + 1, j + 1, line);
  };
  return step(0, 0, bound);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

// ---------------------------------------------------------------------------------------------
// The reader's machine

/** A stand-in for the castor checkout (`dir`), with a HOME of its own and the folder of the npx shim. */
export interface StandIn {
  dir: string;
  home: string;
  bin: string;
}

export const CHECKOUT = fileURLToPath(new URL("../../", import.meta.url));
/** What a stand-in checkout links to: enough for `npx castor`, the package's self-import and the scripts. */
const CHECKOUT_ENTRIES = ["package.json", "node_modules", "bin", "dist", "scripts"];
/**
 * `npx castor …` runs the checkout's bin/castor.js. npx gets there by installing the checkout
 * into its own cache (~/.npm/_npx) as a `file:` dependency, which runs the package's `prepare`
 * (a whole build, into the shared dist/, while other tests run from it) whenever that cache is
 * new — as it is in every run here, with a fresh HOME — and then costs about a second per call.
 * The shim skips straight to the command npx ends up running; any other npx call is npx's.
 */
const NPX_SHIM = `#!/bin/sh
if [ "$1" = castor ]; then shift; exec "CASTOR" "$@"; fi
exec "NPX" "$@"
`;
/**
 * A folder that looks like the castor checkout to node and the scripts, with a fresh HOME
 * inside, and `npx castor` as the checkout's bin/castor.js (see NPX_SHIM).
 */
export async function checkoutStandIn(prefix: string): Promise<StandIn> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await Promise.all(CHECKOUT_ENTRIES.map((entry) => symlink(join(CHECKOUT, entry), join(dir, entry))));
  const home = join(dir, ".home");
  const bin = join(dir, ".doc-test-bin");
  await Promise.all([mkdir(home), mkdir(bin)]);
  const npx = execFileSync("sh", ["-c", "command -v npx"], { encoding: "utf8" }).trim();
  await writeFile(join(bin, "npx"), NPX_SHIM.replace("CASTOR", join(CHECKOUT, "bin", "castor.js")).replace("NPX", npx), { mode: 0o755 });
  return { dir, home, bin };
}

/** The environment of a fresh shell: the test's own HF_*, CASTOR_*, npm_* and venv settings left out. */
export function freshShellEnv(work: StandIn, keep: readonly string[] = []): NodeJS.ProcessEnv {
  const own = /^(HF_|HUGGINGFACE_|CASTOR_|npm_|NODE_OPTIONS$|VIRTUAL_ENV$|PYTHON|XDG_)/;
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !own.test(name) || keep.includes(name)));
  // A venv's bin folder on the test's PATH would shadow the README's own venvs.
  env.PATH = [work.bin, ...(process.env.PATH ?? "").split(":").filter((dir) => !dir.includes("/.venv") && !dir.includes("node_modules"))].join(":");
  return { ...env, HOME: work.home, npm_config_update_notifier: "false" };
}

// ---------------------------------------------------------------------------------------------
// Running a section

export interface SectionRunOptions {
  blocks: DocBlock[];
  /** The folder the session starts in. */
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** README port → the port the test uses instead, for `127.0.0.1:PORT`. */
  ports: ReadonlyMap<number, number>;
  /** The venv folder each venv directive's name stands for. */
  venvDirs: Readonly<Record<string, string>>;
  timeoutMs: number;
  /** Added to a failure's message: the state of the servers involved. */
  diagnostics?: () => string;
}

export interface SectionRun {
  /** Every placeholder's value, by name. */
  bindings: Map<string, string>;
  /** Seconds each block took, in order (skipped blocks too, at about 0). */
  seconds: { block: DocBlock; seconds: number }[];
  stdout: string;
  stderr: string;
}

interface ScriptPart {
  block: DocBlock;
  anchors: Anchor[];
}

const MARK = "\x1eDOC ";
const HEREDOC_END = "DOC_TEST_END_OF_BLOCK";

/** Runs the blocks in one bash session and checks every shown output; fails with the block, the command and what it printed. */
export async function runSection(options: SectionRunOptions): Promise<SectionRun> {
  const rewrite = (text: string) =>
    text.replace(/127\.0\.0\.1:(\d+)/g, (whole, port: string) => {
      const to = options.ports.get(Number(port));
      return to === undefined ? whole : `127.0.0.1:${to}`;
    });
  const parts: ScriptPart[] = [];
  // Each mark carries the time (bash's $EPOCHREALTIME), for the time each block took.
  const script = ["set -eo pipefail", `doc_mark() { printf '${MARK}%s %s\\n' "$1" "$EPOCHREALTIME"; printf '${MARK}%s %s\\n' "$1" "$EPOCHREALTIME" >&2; }`];
  options.blocks.forEach((original, index) => {
    const block = { ...original, lines: original.lines.map(rewrite) };
    const anchors = anchorsOf(block);
    parts.push({ block, anchors });
    script.push(`doc_mark block-${index}`);
    if (block.directive?.kind === "skip") return;
    if (block.directive?.kind === "venv") {
      const { path } = venvBlockOf(block);
      const dir = options.venvDirs[block.directive.name];
      assert.ok(dir, `${where(block)}: no venv folder for ${block.directive.name}`);
      script.push(`mkdir -p "$(dirname ${path})" && ln -sfn '${dir}' ${path}`);
      return;
    }
    for (const line of block.lines) assert.notEqual(line.trim(), HEREDOC_END, `${where(block)}: a line reads ${HEREDOC_END}`);
    const saved = savedFileOf(block);
    if (saved !== null) {
      script.push(`cat > '${saved}' <<'${HEREDOC_END}'`, ...block.lines, HEREDOC_END);
      return;
    }
    const marked = withMarks(block, anchors, index);
    if (block.lang === "sh") script.push(...marked);
    else
      script.push(
        `python3 - <<'${HEREDOC_END}'`,
        "import sys as _doc_sys, time as _doc_time",
        `def _doc_mark(name): print("${MARK}" + name, _doc_time.time(), flush=True); print("${MARK}" + name, _doc_time.time(), file=_doc_sys.stderr, flush=True)`,
        ...marked,
        HEREDOC_END,
      );
  });
  const scriptFile = join(options.cwd, ".doc-test-session.sh");
  await writeFile(scriptFile, `${script.join("\n")}\n`);

  const { code, signal, stdout, stderr } = await runBash(scriptFile, options);
  const ended = Date.now() / 1000;
  const out = segments(stdout);
  const err = segments(stderr);
  const failure = (message: string, blockIndex: number, from: string) => {
    const { block } = parts[blockIndex];
    const printed = (list: Map<string, string>) => (list.get(from) ?? "").trimEnd().split("\n").slice(-80).join("\n");
    return (
      `${message}\n${where(block)}:\n${block.lines.map((line) => `    ${line}`).join("\n")}\n` +
      `--- stdout of that part ---\n${printed(out) || "(none)"}\n--- stderr of that part ---\n${printed(err) || "(none)"}\n` +
      (options.diagnostics?.() ?? "")
    );
  };
  if (code !== 0) {
    const lastBlock = Math.max(0, ...[...err.keys()].filter((name) => name.startsWith("block-")).map((name) => Number(name.slice(6))));
    const lastMark = [...err.keys()].at(-1) ?? `block-${lastBlock}`;
    assert.fail(failure(`the README's commands stopped (exit ${code}${signal ? `, signal ${signal}` : ""}) in this block`, lastBlock, lastMark));
  }

  let bindings = new Map<string, string>();
  parts.forEach(({ block, anchors }, index) => {
    anchors.forEach((anchor, k) => {
      const id = `a${index}.${k}`;
      const printed = out.get(`${id}-begin`);
      assert.ok(printed !== undefined, failure(`the command at line ${block.line + 1 + anchor.end} did not run`, index, `block-${index}`));
      const actual = shownLines(printed);
      const expected = anchor.expected.map((line) => rewrite(line));
      const matched = matchLines(expected, actual, bindings);
      if (matched === null) {
        const known = [...bindings].map(([name, value]) => `  <${name}> = ${value}`).join("\n");
        assert.fail(
          `${where(block)}, line ${block.line + 1 + anchor.end}: the output differs from what the README shows\n` +
            `$ ${block.lines.slice(anchor.start, anchor.end + 1).join("\n  ")}\n` +
            `--- shown (README) ---\n${expected.join("\n")}\n--- printed ---\n${actual.join("\n")}\n` +
            `--- placeholders bound so far ---\n${known || "(none)"}\n--- stderr ---\n${(err.get(`${id}-begin`) ?? "").trimEnd().split("\n").slice(-30).join("\n")}`,
        );
      }
      bindings = matched;
    });
  });
  const starts = blockStarts(stdout);
  const seconds = parts.map(({ block }, index) => ({ block, seconds: (starts.get(index + 1) ?? ended) - (starts.get(index) ?? ended) }));
  return { bindings, seconds, stdout, stderr };
}

/** The block's lines with a mark before and after each command that shows its output. */
function withMarks(block: DocBlock, anchors: Anchor[], index: number): string[] {
  const mark = (name: string) => (block.lang === "sh" ? `doc_mark ${name}` : `_doc_mark("${name}")`);
  const out: string[] = [];
  block.lines.forEach((line, i) => {
    anchors.forEach((anchor, k) => {
      if (anchor.start === i) out.push(mark(`a${index}.${k}-begin`));
    });
    out.push(line);
    anchors.forEach((anchor, k) => {
      if (anchor.end === i) out.push(mark(`a${index}.${k}-end`));
    });
  });
  return out;
}

/** What was printed after each mark, by the mark's name. */
function segments(text: string): Map<string, string> {
  const parts = text.split(new RegExp(`${MARK}(\\S+) [\\d.,]+\\n`));
  const found = new Map<string, string>();
  for (let i = 1; i < parts.length; i += 2) found.set(parts[i], parts[i + 1]);
  return found;
}

/** When each block started (its mark's time, seconds since the epoch), from the session's stdout. */
function blockStarts(text: string): Map<number, number> {
  const starts = new Map<number, number>();
  // $EPOCHREALTIME has the locale's decimal separator.
  for (const match of text.matchAll(new RegExp(`${MARK}block-(\\d+) ([\\d.,]+)\\n`, "g"))) starts.set(Number(match[1]), Number(match[2].replace(",", ".")));
  return starts;
}

/**
 * Runs the session script with bash in a process group of its own; once bash exits, whatever
 * it left running (a README's background servers) is stopped with the group.
 */
function runBash(
  scriptFile: string,
  options: SectionRunOptions,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [scriptFile], { cwd: options.cwd, env: options.env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    const killGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // The group is gone already.
      }
    };
    const timer = setTimeout(() => {
      stderr += `\n(the test stopped the session after ${options.timeoutMs} ms)\n`;
      killGroup("SIGKILL");
    }, options.timeoutMs);
    let status: { code: number | null; signal: NodeJS.Signals | null } = { code: null, signal: null };
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      status = { code, signal };
      clearTimeout(timer);
      killGroup("SIGTERM");
      // What ignores SIGTERM is killed; the pipes close once nothing holds them.
      setTimeout(() => killGroup("SIGKILL"), 10_000).unref();
    });
    child.once("close", () => resolve({ ...status, stdout, stderr }));
  });
}
