/**
 * The documentation test's own machinery (readme-blocks.ts), on small made-up READMEs: blocks
 * and directives are read, broken conventions are named, shown outputs are matched with their
 * placeholders, and a run fails — naming the block — when a command fails or prints something
 * else than shown. Without these, a README test that never compares anything would pass.
 */
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { conventionProblems, matchLines, parseReadme, runSection, sectionBlocks, shownLines, type DocBlock } from "./readme-blocks.js";

const SAMPLE = `# sample

## Walkthrough

### 1. Files

\`\`\`sh
printf 'a\\nb\\n' > two-lines.txt
wc -l < two-lines.txt
# → 2
export GREETING=hello
\`\`\`

<!-- doc-test: skip, it would wipe the disk -->
\`\`\`sh
rm -rf /
\`\`\`

\`\`\`python
# greet.py — python3 greet.py
import os
print(os.environ["GREETING"])
\`\`\`

\`\`\`sh
python3 greet.py
# → <greeting>
echo "$GREETING, again" 'http://127.0.0.1:8080/x'
# → <greeting>, again http://127.0.0.1:8080/…
\`\`\`

\`\`\`python
values = [1,
    2]
print(sum(values))
# → 3
\`\`\`

## Elsewhere

\`\`\`nginx
server {}
\`\`\`
`;

function blocksOf(text: string): DocBlock[] {
  return sectionBlocks("Walkthrough", parseReadme(text));
}

describe("the README test's machinery", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "castor-readme-blocks-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const run = (text: string) =>
    runSection({
      blocks: blocksOf(text),
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: dir },
      ports: new Map([[8080, 41234]]),
      venvDirs: {},
      timeoutMs: 60_000,
    });

  it("reads the blocks of a section with their headings, lines and directives", () => {
    const blocks = blocksOf(SAMPLE);
    assert.deepEqual(
      blocks.map((block) => [block.lang, block.heading, block.line, block.directive?.kind ?? null]),
      [
        ["sh", "1. Files", 7, null],
        ["sh", "1. Files", 15, "skip"],
        ["python", "1. Files", 19, null],
        ["sh", "1. Files", 25, null],
        ["python", "1. Files", 32, null],
      ],
    );
    assert.deepEqual(blocks[1].directive, { kind: "skip", reason: "it would wipe the disk" });
    assert.deepEqual(conventionProblems(blocks, {}), []);
    assert.throws(() => parseReadme("<!-- doc-test: skip -->\n```sh\nls\n```\n"), /unknown doc-test directive "skip"/);
    assert.throws(() => parseReadme("<!-- doc-test: skip, why -->\n\ntext\n```sh\nls\n```\n"), /must be right before a code block/);
  });

  it("names every broken convention", () => {
    const broken = `## Walkthrough

\`\`\`nginx
server {}
\`\`\`

\`\`\`js
console.log(1);
\`\`\`

\`\`\`python
# shown.py — a saved file
print(1)
# → 1
\`\`\`

\`\`\`sh
# → an output of nothing
\`\`\`

<!-- doc-test: venv hub-cli, linked -->
\`\`\`sh
python3 -m venv ~/v
~/v/bin/pip install huggingface_hub==1.0.0 extra
\`\`\`
`;
    const problems = conventionProblems(blocksOf(broken), { "hub-cli": ["huggingface_hub==2.0.0", "hf_xet==1.6.0"] });
    const expected = [
      /README\.md:3 .*```nginx block cannot run/,
      /README\.md:7 .*a js block names the file/,
      /README\.md:11 .*saved as shown\.py shows no output/,
      /README\.md:17 .*line 18: # → lines must follow the command/,
      /README\.md:22 .*installs huggingface_hub==1\.0\.0, the test's venv huggingface_hub==2\.0\.0/,
      /README\.md:22 .*installs extra, which the test's venv lacks/,
      /README\.md:22 .*does not install hf_xet==1\.6\.0/,
    ];
    assert.equal(problems.length, expected.length, problems.join("\n"));
    for (const [i, pattern] of expected.entries()) assert.match(problems[i], pattern);
  });

  it("matches shown lines: <name> binds once and must repeat, … is any text, a line of … any lines", () => {
    const none = new Map<string, string>();
    assert.deepEqual(matchLines(["commit <c>  http://x/commit/<c>"], ["commit ab12  http://x/commit/ab12"], none), new Map([["c", "ab12"]]));
    assert.equal(matchLines(["commit <c>  http://x/commit/<c>"], ["commit ab12  http://x/commit/cd34"], none), null);
    assert.equal(matchLines(["unchanged <c>"], ["unchanged cd34"], new Map([["c", "ab12"]])), null, "a bound name is that text");
    assert.deepEqual(matchLines(["a (…)", "…", "z"], ["a (anything)", "b", "c", "z"], none), new Map());
    assert.deepEqual(matchLines(["…", "z"], ["z"], none), new Map(), "a line of … takes zero lines too");
    assert.equal(matchLines(["a"], ["a", "b"], none), null, "every printed line is shown");
    assert.equal(matchLines(["a.c"], ["abc"], none), null, "the rest is literal");
    assert.deepEqual(shownLines("\x1b[32m✓ ok\x1b[0m  \r\nnext\n\n"), ["✓ ok", "next"]);
  });

  it("runs the blocks in one session and checks the shown outputs, with the README's ports rewritten", async () => {
    const result = await run(SAMPLE);
    assert.equal(result.bindings.get("greeting"), "hello");
    assert.equal(await readFile(join(dir, "greet.py"), "utf8"), '# greet.py — python3 greet.py\nimport os\nprint(os.environ["GREETING"])\n');
    assert.match(result.stdout, /http:\/\/127\.0\.0\.1:41234\/x/);
  });

  it("fails on a shown output that differs, saying where and what was printed", async () => {
    await assert.rejects(
      run(SAMPLE.replace("# → 2", "# → 3")),
      (error: Error) => /README\.md:7 \(1\. Files\), line 9: the output differs/.test(error.message) && /--- printed ---\n2\n/.test(error.message),
    );
  });

  it("fails on a failing command, naming its block and showing its stderr", async () => {
    await assert.rejects(
      run(SAMPLE.replace("python3 greet.py\n#", "python3 greet.py && ls /no-such-folder\n#")),
      (error: Error) =>
        /stopped \(exit 2\) in this block\nREADME\.md:25/.test(error.message) && /No such file or directory/.test(error.message) && /hello/.test(error.message),
    );
  });
});
