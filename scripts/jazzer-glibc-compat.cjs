// Loaded with `node --require` by scripts/fuzz.mjs, only on Linux x64 hosts whose glibc is older
// than 2.38. The prebuilt libFuzzer addon of @jazzer.js/fuzzer 4.0.0 needs glibc 2.38 for just
// two symbols, the C23 variants `__isoc23_strtol` and `__isoc23_strtoul` (they differ from
// strtol/strtoul only in also accepting a "0b" prefix, which libFuzzer's flag parsing never
// sees). This hook makes a patched copy of the addon in a cache directory — those two imports
// renamed to the plain glibc 2.2.5 functions, the then-unused GLIBC_2.38 requirement marked weak
// — and points `process.dlopen` at the copy. node_modules is never written to.
"use strict";
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

/** Import → [replacement, its version]; each replacement is shorter, so it is written in place. */
const RENAMES = new Map([
  ["__isoc23_strtol", ["strtol", "GLIBC_2.2.5"]],
  ["__isoc23_strtoul", ["strtoul", "GLIBC_2.2.5"]],
  // GCC 13's <iostream> references this only to pull in libstdc++'s stream initialisation, which
  // an older libstdc++ runs on its own; ios_base::Init's constructor is an equally inert anchor.
  ["_ZSt21ios_base_library_initv", ["_ZNSt8ios_base4InitC1Ev", "GLIBCXX_3.4"]],
]);
/** The version requirements the renames leave unused; marked weak so their absence is not fatal. */
const DROPPED_VERSIONS = ["GLIBC_2.38", "GLIBCXX_3.4.32"];

function cstr(buf, at) {
  let end = at;
  while (buf[end] !== 0) end++;
  return buf.toString("latin1", at, end);
}

/** Returns the patched bytes, or null when the addon needs no patch. */
function patchElf(input) {
  const b = Buffer.from(input);
  if (b.readUInt32BE(0) !== 0x7f454c46 || b[4] !== 2 || b[5] !== 1) return null; // ELF64 LE only
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const sections = [];
  for (let i = 0; i < shnum; i++) {
    const at = shoff + i * shentsize;
    sections.push({
      type: b.readUInt32LE(at + 4),
      offset: Number(b.readBigUInt64LE(at + 0x18)),
      size: Number(b.readBigUInt64LE(at + 0x20)),
      link: b.readUInt32LE(at + 0x28),
      info: b.readUInt32LE(at + 0x2c),
    });
  }
  const dynsym = sections.find((s) => s.type === 11);
  const versym = sections.find((s) => s.type === 0x6fffffff);
  const verneed = sections.find((s) => s.type === 0x6ffffffe);
  if (!dynsym || !versym || !verneed) return null;
  const dynstr = sections[dynsym.link];
  // Version indexes by name, and the vernaux entries by name.
  const versionIndex = new Map();
  const auxByName = new Map();
  let vn = verneed.offset;
  for (let i = 0; i < verneed.info; i++) {
    const cnt = b.readUInt16LE(vn + 2);
    let aux = vn + b.readUInt32LE(vn + 8);
    for (let j = 0; j < cnt; j++) {
      const name = cstr(b, dynstr.offset + b.readUInt32LE(aux + 8));
      versionIndex.set(name, b.readUInt16LE(aux + 6) & 0x7fff);
      auxByName.set(name, aux);
      aux += b.readUInt32LE(aux + 12);
    }
    vn += b.readUInt32LE(vn + 12);
  }
  let renamed = 0;
  for (let i = 0; i < dynsym.size / 24; i++) {
    const nameOff = dynstr.offset + b.readUInt32LE(dynsym.offset + i * 24);
    const rename = RENAMES.get(cstr(b, nameOff));
    if (rename === undefined) continue;
    const [target, version] = rename;
    const index = versionIndex.get(version);
    if (index === undefined) return null;
    b.write(`${target}\0`, nameOff, "latin1"); // shorter than the original: fits in place
    b.writeUInt16LE(index, versym.offset + i * 2);
    renamed++;
  }
  if (renamed === 0) return null;
  for (const name of DROPPED_VERSIONS) {
    const aux = auxByName.get(name);
    if (aux !== undefined) b.writeUInt16LE(b.readUInt16LE(aux + 4) | 0x2, aux + 4); // VER_FLG_WEAK
  }
  return b;
}

function glibcOlderThan238() {
  const v = process.report?.getReport?.().header?.glibcVersionRuntime;
  if (typeof v !== "string") return false;
  const [maj, min] = v.split(".").map(Number);
  return maj < 2 || (maj === 2 && min < 38);
}

if (process.platform === "linux" && process.arch === "x64" && glibcOlderThan238()) {
  const originalDlopen = process.dlopen;
  const cacheDir = path.join(os.tmpdir(), "castor-jazzer-compat");
  process.dlopen = function dlopen(module, filename, ...rest) {
    if (typeof filename === "string" && filename.endsWith(`${path.sep}prebuilds${path.sep}fuzzer-linux-x64.node`)) {
      const bytes = fs.readFileSync(filename);
      const patched = patchElf(bytes);
      if (patched !== null) {
        fs.mkdirSync(cacheDir, { recursive: true });
        const out = path.join(cacheDir, `fuzzer-linux-x64-${bytes.length}.node`);
        if (!fs.existsSync(out) || !fs.readFileSync(out).equals(patched)) {
          const tmp = `${out}.${process.pid}.tmp`;
          fs.writeFileSync(tmp, patched);
          fs.renameSync(tmp, out);
        }
        return originalDlopen.call(this, module, out, ...rest);
      }
    }
    return originalDlopen.call(this, module, filename, ...rest);
  };
}
