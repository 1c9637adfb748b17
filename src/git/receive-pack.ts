/**
 * git-receive-pack, the pushing side of git's smart protocol (gitprotocol-pack), over any
 * transport that carries one request and its answer: the ref advertisement, then a request of
 * ref update commands followed by a pack, answered with a report of each update.
 *
 * The pack is read as it arrives, within limits, every object hashed to its id and kept in a
 * spool file (object-spool.ts), never in memory; nothing is applied until all of it has been
 * read and checked. Then each command goes to the target, which applies it as one
 * compare-and-set or says why not. A pack that cannot be read (corrupt, truncated, too large,
 * an object not its id) changes nothing: the report says `unpack <error>` and every command
 * fails, which git shows as "remote unpack failed".
 *
 * castor asks for full packs (`no-thin`) and does not offer atomic pushes or push options.
 */
import { FormatError } from "../format/errors.js";
import { isGitOid } from "../format/git.js";
import { readPack, type PackLimits } from "../format/git-pack.js";
import { BAND_DATA, BAND_PROGRESS, FLUSH_PKT, PktLineDecoder, pktLine, pktText, sidebandPackets } from "../format/pkt-line.js";
import { ObjectSpool } from "./object-spool.js";
import type { GitPushTarget, GitRef, PushCommand } from "./source.js";
import { GitProtocolError } from "./walk.js";

export interface ReceivePackOptions {
  agent: string;
  limits: PackLimits;
  /** Where the pushed objects wait while the push is checked. */
  spoolDir: string;
}

/** Ref updates in one push at most. */
export const MAX_PUSH_COMMANDS = 1000;
/** The command list is small; a few MiB of pkt-lines before the pack is already abuse. */
const MAX_COMMAND_BYTES = 4 * 1024 * 1024;

const ZERO_OID = "0".repeat(40);

const CAPABILITIES = ["report-status", "delete-refs", "side-band-64k", "quiet", "ofs-delta", "no-thin", "object-format=sha1"];

/** The advertisement of protocol v0 (after smart HTTP's `# service=` header), the capabilities on the first ref. */
export async function advertiseReceivePack(target: Pick<GitPushTarget, "refs">, options: Pick<ReceivePackOptions, "agent">): Promise<Buffer> {
  const refs: GitRef[] = await target.refs();
  const capabilities = [...CAPABILITIES, `agent=${options.agent}`].join(" ");
  const lines =
    refs.length === 0
      ? [`${ZERO_OID} capabilities^{}\0${capabilities}\n`]
      : refs.map((ref, i) => (i === 0 ? `${ref.oid} ${ref.name}\0${capabilities}\n` : `${ref.oid} ${ref.name}\n`));
  return Buffer.concat([...lines.map((line) => pktLine(line)), FLUSH_PKT]);
}

interface PushRequest {
  commands: PushCommand[];
  capabilities: Set<string>;
}

/** Reads the command list; what follows it (the pack) stays in `decoder` and `input`. */
async function readCommands(decoder: PktLineDecoder, input: AsyncIterator<Uint8Array>): Promise<PushRequest> {
  const commands: PushCommand[] = [];
  const capabilities = new Set<string>();
  let received = 0;
  for (;;) {
    const line = decoder.read();
    if (line === null) {
      const next = await input.next();
      if (next.done) throw new GitProtocolError("the push request ends inside its command list");
      received += next.value.length;
      if (received > MAX_COMMAND_BYTES) throw new GitProtocolError(`the push's command list exceeds ${MAX_COMMAND_BYTES} bytes`);
      decoder.push(next.value);
      continue;
    }
    if (line.kind === "flush") return { commands, capabilities };
    const text = pktText(line);
    if (text === null) throw new GitProtocolError("unexpected special packet in the push's command list");
    if (text.startsWith("shallow ")) continue;
    const nul = text.indexOf("\0");
    const command = nul < 0 ? text : text.slice(0, nul);
    if (nul >= 0 && commands.length === 0) for (const capability of text.slice(nul + 1).split(" ")) if (capability !== "") capabilities.add(capability);
    const [old, next, ref, extra] = command.split(" ");
    if (!isGitOid(old ?? "") || !isGitOid(next ?? "") || ref === undefined || ref === "" || extra !== undefined) {
      throw new GitProtocolError(`expected "<old id> <new id> <ref>", got ${JSON.stringify(command.slice(0, 120))}`);
    }
    if (commands.length >= MAX_PUSH_COMMANDS) throw new GitProtocolError(`a push may update at most ${MAX_PUSH_COMMANDS} refs`);
    if (old === ZERO_OID && next === ZERO_OID) throw new GitProtocolError(`the command for ${ref} neither creates, updates nor deletes it`);
    commands.push({ ref, old: old === ZERO_OID ? null : old, new: next === ZERO_OID ? null : next });
  }
}

/** The message of a pack that cannot be stored, as `unpack <message>` and git's "remote unpack failed". */
function unpackError(error: FormatError, limits: PackLimits): string {
  if (error.code === "git_object_too_large") {
    return `${error.message}: files of ${limits.maxObjectBytes} bytes or more go through Git LFS (git lfs track "<pattern>", then commit again)`;
  }
  return error.message;
}

/**
 * Answers one push (`POST …/git-receive-pack`): `body` is the request as it arrives. Resolves
 * once the pack is read and the commands applied, with the report; GitProtocolError for a
 * command list it cannot read (the caller answers with an ERR packet).
 */
export async function serveReceivePack(target: GitPushTarget, body: AsyncIterable<Uint8Array>, options: ReceivePackOptions): Promise<Buffer[]> {
  const input = body[Symbol.asyncIterator]();
  const decoder = new PktLineDecoder();
  const { commands, capabilities } = await readCommands(decoder, input);
  // An empty command list: git probing whether the request gets through (and its credentials).
  if (commands.length === 0) return [];

  let unpacked: string | null = null;
  let spool: ObjectSpool | null = null;
  let results: (string | null)[];
  try {
    if (commands.some((command) => command.new !== null)) {
      spool = await ObjectSpool.create(options.spoolDir);
      const pack = (async function* () {
        const rest = decoder.rest();
        if (rest.length > 0) yield rest;
        for (let next = await input.next(); !next.done; next = await input.next()) yield next.value;
      })();
      try {
        for await (const object of readPack(pack, options.limits, spool)) await spool.put(object);
      } catch (error) {
        if (!(error instanceof FormatError)) throw error;
        unpacked = unpackError(error, options.limits);
      }
    }
    results = unpacked !== null ? commands.map(() => "unpacker error") : await target.push(commands, spool ?? { get: async () => null });
  } finally {
    await spool?.close();
  }

  const report = Buffer.concat([
    pktLine(`unpack ${unpacked ?? "ok"}\n`),
    ...commands.map((command, i) => pktLine(results[i] === null ? `ok ${command.ref}\n` : `ng ${command.ref} ${oneLine(results[i]!)}\n`)),
    FLUSH_PKT,
  ]);
  if (!capabilities.has("report-status")) return [];
  if (!capabilities.has("side-band-64k")) return [report];
  const progress =
    capabilities.has("quiet") || unpacked !== null
      ? []
      : sidebandPackets(BAND_PROGRESS, Buffer.from(`castor: ${spool?.count ?? 0} objects received and checked\n`));
  return [...progress, ...sidebandPackets(BAND_DATA, report), FLUSH_PKT];
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " ");
}
