#!/usr/bin/env node
// Writes the seed corpus fuzz/corpus/<target>/ from the protocol vectors
// (/work/shared/protocol/vectors, or the directory given as the first argument) plus a few
// hand-made cases. Run once and commit the result; the fuzz runner copies it before each run.
import { createHash } from "node:crypto";
import { deflateSync } from "node:zlib";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const vectors = process.argv[2] ?? "/work/shared/protocol/vectors";
const load = (name) => JSON.parse(readFileSync(path.join(vectors, name), "utf8"));

function seed(target, label, bytes) {
  const dir = path.join(here, "corpus", target);
  mkdirSync(dir, { recursive: true });
  const data = typeof bytes === "string" ? Buffer.from(bytes, "utf8") : Buffer.from(bytes);
  const digest = createHash("sha1").update(data).digest("hex").slice(0, 12);
  writeFileSync(path.join(dir, `${label}-${digest}`), data);
}
const hex = (h) => Buffer.from(h, "hex");
const u24 = (n) => Buffer.from([n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff]);

// xorb: byte 0 is the piece size (0 = whole body at once).
const xorb = load("xorb-small.json");
for (const [label, body] of [
  ["vector-body", hex(xorb.body_hex)],
  ["vector-footer", hex(xorb.with_footer_hex)],
]) {
  seed("xorb", `${label}-whole`, Buffer.concat([Buffer.from([0]), body]));
  seed("xorb", `${label}-pieces7`, Buffer.concat([Buffer.from([7]), body]));
}
seed("xorb", "empty", Buffer.from([0]));
seed("xorb", "one-header", Buffer.concat([Buffer.from([0]), hex(xorb.expected.chunks[0].header_hex)]));

// shard
const upload = load("shard-upload-small.json");
seed("shard", "vector-xet-core", hex(upload.xet_core_style_hex));
seed("shard", "vector-hf-js", hex(upload.huggingface_js_style_hex));
seed("shard", "vector-dedup-small", hex(load("shard-dedup-response-small.json").response_hex));
seed("shard", "vector-dedup-gpt2", Buffer.from(load("shard-dedup-response-gpt2.json").shard_base64, "base64"));
seed("shard", "header-only", hex(upload.xet_core_style_hex).subarray(0, 48));

// chunk: scheme byte, u24 declared size, payload.
const bodyBytes = hex(xorb.body_hex);
let at = 0;
for (const [i, chunk] of xorb.expected.chunks.entries()) {
  const header = hex(chunk.header_hex);
  const compressed = header[1] | (header[2] << 8) | (header[3] << 16);
  const scheme = header[4];
  const uncompressed = header[5] | (header[6] << 8) | (header[7] << 16);
  const payload = bodyBytes.subarray(at + 8, at + 8 + compressed);
  seed("chunk", `vector-chunk${i}`, Buffer.concat([Buffer.from([scheme]), u24(uncompressed), payload]));
  at += 8 + compressed;
}
for (const [i, frame] of xorb.extra_lz4_frames_for_decoder_tests.entries()) {
  seed("chunk", `vector-lz4-frame${i}`, Buffer.concat([Buffer.from([1]), u24(1000), hex(frame.frame_hex)]));
}
seed("chunk", "none-empty", Buffer.from([0, 0, 0, 0]));
seed("chunk", "lz4-magic-only", Buffer.from([1, 16, 0, 0, 0x04, 0x22, 0x4d, 0x18]));

// range
const http = load("http-formats.json");
for (const c of http.range_header_parsing.cases) seed("range", "vector", c.header);
for (const c of load("reconstruction.json").cases) if (c.range_header) seed("range", "vector", c.range_header);
for (const h of ["bytes=0-499,500-999", "bytes=4096-8191", "BYTES=1-", "bytes=-0", " bytes=0-499 , 500-999 ", "bytes=00-1"]) seed("range", "hand", h);

// transfer-url
const xorbHash = "a".repeat(64);
for (const q of ["x=1700000060000&r=0.dw,0.dw", "x=1700000060000&r=3.4", "x=0&r=0.1", "x=1700000060000&r=1a.zz,b.1"]) {
  seed("transfer-url", "hand", `/v1/transfer/${xorbHash}?${q}&s=${"A".repeat(43)}`);
}

// cas-token: the JWT payload.
const claims = { repo: { type: "model", id: "alice/bert" }, rev: "main", scope: "write", iat: 1_699_999_000, exp: 1_700_003_600, jti: "x" };
seed("cas-token", "valid", JSON.stringify(claims));
seed("cas-token", "expired", JSON.stringify({ ...claims, exp: 1_699_999_999 }));
seed("cas-token", "bad-repo", JSON.stringify({ ...claims, repo: { type: "model", id: "no-slash" } }));
seed("cas-token", "not-object", "[1,2,3]");

// hub-names
for (const s of ["alice/bert", "model:alice/bert", "dataset:a/b", "main", "refs/pr/1", "v1.0..x", "a".repeat(97)]) seed("hub-names", "hand", s);
for (const s of ["/api/models/alice/bert/tree/main/dir%2Fa/b", "/api/datasets/a/b/resolve/refs%2Fconvert%2Fparquet/x?y=1", "/api/models/a/b/tree/%E0%A4%A"]) {
  seed("hub-names", "hand", s);
}

// commit: byte 0 is the piece size (0 = whole body at once), then the NDJSON body. The target's
// bounds are 4,096 bytes inline and 8,192 bytes a line.
const line = (key, value) => JSON.stringify({ key, value });
const header = line("header", { summary: "add files", description: "from the fuzz seeds" });
const b64 = (text) => Buffer.from(text).toString("base64");
const sha = (c) => createHash("sha256").update(c).digest("hex");
const ops = {
  file: line("file", { path: "README.md", content: b64("# hello\n"), encoding: "base64" }),
  lfsFile: line("lfsFile", { path: "weights/model.bin", algo: "sha256", oid: sha("weights"), size: 47_700_000 }),
  lfsCopy: line("lfsFile", { path: "copy/model.bin", algo: "sha256", oid: sha("weights") }),
  deletedFile: line("deletedFile", { path: "old.txt" }),
  deletedFolder: line("deletedFolder", { path: "old-dir/" }),
  copyFile: line("copyFile", { path: "b.txt", srcPath: "a.txt", srcRevision: "main" }),
};
const commit = (piece, ...lines) => Buffer.concat([Buffer.from([piece]), Buffer.from(lines.join("\n"))]);
const all = Object.entries(ops)
  .filter(([kind]) => kind !== "copyFile")
  .map(([, op]) => op);
seed("commit", "valid-all", commit(0, header, ...all, ""));
seed("commit", "valid-all-pieces7", commit(7, header, ...all, ""));
seed("commit", "valid-all-pieces1", commit(1, header, ops.file, ops.deletedFolder, ""));
for (const [kind, op] of Object.entries(ops)) seed("commit", `one-${kind}`, commit(0, header, op, ""));
seed(
  "commit",
  "header-parent",
  commit(0, line("header", { summary: "s", description: null, parentCommit: "0123456789abcdef0123456789abcdef01234567" }), ops.deletedFile),
);
seed("commit", "header-only-no-newline", commit(0, line("header", { summary: "" })));
seed("commit", "crlf-blank-lines", commit(3, header, "", "  ", ops.file, "\r", `${ops.deletedFile}\r`, ""));
seed("commit", "empty-file", commit(0, header, line("file", { path: "empty", content: "" }), ""));
seed("commit", "unicode-path", commit(0, header, line("file", { path: "données/ñ/🤗.txt", content: b64("é") }), ""));
seed("commit", "inline-near-max", commit(0, header, line("file", { path: "big.txt", content: b64("x".repeat(4095)) }), ""));
seed("commit", "inline-at-max", commit(0, header, line("file", { path: "big.txt", content: b64("x".repeat(4096)) }), ""));
seed("commit", "line-over-max", commit(0, header, line("deletedFile", { path: "p".repeat(9000) }), ""));
seed("commit", "many-operations", commit(0, header, ...Array.from({ length: 200 }, (_, i) => line("deletedFile", { path: `dir/${i}.txt` })), ""));
seed("commit", "no-header", commit(0, ops.file, header, ""));
seed("commit", "two-headers", commit(0, header, header, ""));
seed("commit", "not-json", commit(0, header, "{key: file}", ""));
seed(
  "commit",
  "odd-values",
  commit(0, header, line("file", { path: "a", content: "!!!", encoding: "utf-8" }), line("lfsFile", { path: "b", oid: "AB", size: -1 }), ""),
);
seed("commit", "array-line", commit(0, header, JSON.stringify(["file", { path: "a" }]), ""));

// pkt-line: byte 0 is the piece size (0 = the whole stream at once), then the packets.
const pkt = (text) => {
  const payload = Buffer.from(text, "utf8");
  return Buffer.concat([Buffer.from((payload.length + 4).toString(16).padStart(4, "0")), payload]);
};
const fetchRequest = Buffer.concat([
  pkt("command=fetch\n"),
  pkt("agent=git/2.39.5\n"),
  Buffer.from("0001"),
  pkt("thin-pack\n"),
  pkt(`want ${"a".repeat(40)}\n`),
  pkt("done\n"),
  Buffer.from("0000"),
]);
seed("pkt-line", "fetch-v2-whole", Buffer.concat([Buffer.from([0]), fetchRequest]));
seed("pkt-line", "fetch-v2-pieces3", Buffer.concat([Buffer.from([3]), fetchRequest]));
seed("pkt-line", "specials", Buffer.concat([Buffer.from([0]), Buffer.from("000000010002")]));
seed(
  "pkt-line",
  "push-then-pack",
  Buffer.concat([Buffer.from([5]), pkt(`${"0".repeat(40)} ${"b".repeat(40)} refs/heads/main\0report-status\n`), Buffer.from("0000PACK")]),
);
seed("pkt-line", "max-length", Buffer.concat([Buffer.from([0]), Buffer.from("fff0"), Buffer.alloc(65516, 0x61)]));
seed("pkt-line", "bad-lengths", Buffer.concat([Buffer.from([0]), Buffer.from("0003fff1zzzz")]));

// git-pack: byte 0 is the piece size (0 = the whole pack at once), then the pack.
const objectHeader = (type, size) => {
  const bytes = [];
  let byte = (type << 4) | (size & 15);
  let rest = size >> 4;
  while (rest > 0) {
    bytes.push(byte | 0x80);
    byte = rest & 0x7f;
    rest >>= 7;
  }
  bytes.push(byte);
  return Buffer.from(bytes);
};
const gitPack = (entries) => {
  const header = Buffer.alloc(12);
  header.write("PACK", 0, "latin1");
  header.writeUInt32BE(2, 4);
  header.writeUInt32BE(entries.length, 8);
  const body = Buffer.concat([header, ...entries]);
  return Buffer.concat([body, createHash("sha1").update(body).digest()]);
};
const whole = (type, content) => Buffer.concat([objectHeader(type, content.length), deflateSync(content)]);
const blobText = Buffer.from("line one\nline two\nline three\n");
const blobId = createHash("sha1").update(`blob ${blobText.length}\0`).update(blobText).digest();
const treeBody = Buffer.concat([Buffer.from("100644 a.txt\0"), blobId]);
const treeId = createHash("sha1").update(`tree ${treeBody.length}\0`).update(treeBody).digest("hex");
const commitBody = Buffer.from(`tree ${treeId}\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nm\n`);
// A delta of the blob: copy its first 18 bytes, insert a new third line (ofs: distance back to it).
const deltaBody = Buffer.concat([Buffer.from([blobText.length, 27, 0x90, 18]), Buffer.from([9]), Buffer.from("line 3!\n\n")]);
const blobEntry = whole(3, blobText);
const ofsDelta = Buffer.concat([objectHeader(6, deltaBody.length), Buffer.from([blobEntry.length]), deflateSync(deltaBody)]);
const refDelta = Buffer.concat([objectHeader(7, deltaBody.length), blobId, deflateSync(deltaBody)]);
for (const [label, pack] of [
  ["commit-tree-blob", gitPack([whole(1, commitBody), whole(2, treeBody), blobEntry])],
  ["ofs-delta", gitPack([blobEntry, ofsDelta])],
  ["ref-delta", gitPack([blobEntry, refDelta])],
  ["empty", gitPack([])],
]) {
  seed("git-pack", `${label}-whole`, Buffer.concat([Buffer.from([0]), pack]));
  seed("git-pack", `${label}-pieces7`, Buffer.concat([Buffer.from([7]), pack]));
}
