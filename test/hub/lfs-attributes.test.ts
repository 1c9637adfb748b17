/**
 * The hub's reading of `.gitattributes` (does a path get `filter=lfs`?) and the lines it
 * appends, both checked against the real `git check-attr` on the same file.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { coversWithLfs, coverWithLfs, LFS_ATTRIBUTES } from "../../src/hub/lfs-attributes.js";

const repo = mkdtempSync(join(tmpdir(), "castor-attributes-"));
after(() => rmSync(repo, { recursive: true, force: true }));
execFileSync("git", ["init", "-q", repo], { env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", HOME: repo } });

/** What git says of each path's `filter` under `text` as the root `.gitattributes`. */
function gitCovers(text: string, paths: string[]): boolean[] {
  writeFileSync(join(repo, ".gitattributes"), text);
  const out = execFileSync("git", ["check-attr", "-z", "--stdin", "filter"], {
    cwd: repo,
    input: paths.map((path) => `${path}\0`).join(""),
    env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", HOME: repo },
  })
    .toString("utf8")
    .split("\0");
  // -z: path, attribute, value, … for each path in turn.
  return paths.map((_, i) => out[i * 3 + 2] === "lfs");
}

const HUB_DEFAULT = ["*.7z", "*.bin", "*.safetensors", "saved_model/**/*", "*.tar.*", "*tfevents*", "*.ckpt", "*.pt"].map(
  (pattern) => `${pattern} ${LFS_ATTRIBUTES}`,
);

const PATHS = [
  "model.bin",
  "sub/dir/model.bin",
  "model.bin.txt",
  "saved_model/x/y.pb",
  "saved_model.pb",
  "a.tar.gz",
  "events.out.tfevents.123",
  "weights.safetensors",
  "README.md",
  "data/train.parquet",
  "data/x.parquet",
  ".hidden.bin",
  "deep/.hidden/x.pt",
];

describe(".gitattributes coverage, as git check-attr sees it", () => {
  const files: Record<string, string> = {
    "the Hub's default patterns": `${HUB_DEFAULT.join("\n")}\n`,
    "anchored and nested patterns": `/root.bin ${LFS_ATTRIBUTES}\ndata/*.parquet ${LFS_ATTRIBUTES}\ndeep/**/x.pt ${LFS_ATTRIBUTES}\n`,
    "a later line unsetting or changing the filter": `*.bin ${LFS_ATTRIBUTES}\nsub/** -filter\n*.pt filter=other\n# a comment\n*.md   filter=lfs\n`,
    "classes and escapes": `[a-m]*.bin ${LFS_ATTRIBUTES}\n*.tar.? ${LFS_ATTRIBUTES}\n\\#weird ${LFS_ATTRIBUTES}\nsaved_model/ ${LFS_ATTRIBUTES}\n`,
  };
  for (const [what, text] of Object.entries(files)) {
    it(what, () => {
      const expected = gitCovers(text, PATHS);
      assert.deepEqual(
        PATHS.map((path) => coversWithLfs(text, path)),
        expected,
      );
    });
  }
});

describe("lines appended for Xet files", () => {
  const tricky = ["weights.bin", "data/with space/file one.bin", "odd/[x]*?.bin", "#hash.bin", "!bang.bin", "données/🤗 model.safetensors", "a\\b.bin"];

  it("cover exactly the paths asked for, as git reads them", () => {
    const text = coverWithLfs(null, tricky)!;
    assert.deepEqual(
      gitCovers(text, tricky),
      tricky.map(() => true),
    );
    assert.deepEqual(
      tricky.map((path) => coversWithLfs(text, path)),
      tricky.map(() => true),
    );
    // Not the siblings a glob would have caught.
    assert.deepEqual(gitCovers(text, ["odd/[x]ab.bin", "odd/xab.bin", "data/with space/file two.bin"]), [false, false, false]);
  });

  it("append only what is not covered, after the existing lines", () => {
    const existing = `*.bin ${LFS_ATTRIBUTES}`;
    assert.equal(coverWithLfs(`${existing}\n`, ["a.bin", "x/b.bin"]), null);
    assert.equal(coverWithLfs(existing, ["a.bin", "big.dat", "big.dat"]), `${existing}\nbig.dat ${LFS_ATTRIBUTES}\n`);
    assert.equal(coverWithLfs(`sub/** -filter\n`, ["sub/a.bin"]), `sub/** -filter\nsub/a.bin ${LFS_ATTRIBUTES}\n`);
  });
});
