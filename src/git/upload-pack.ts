/**
 * git-upload-pack, the fetching side of git's smart protocol, over any transport that carries
 * a request and streams back an answer (smart HTTP is stateless: each request is answered
 * alone). Both protocol versions:
 *
 * - v2 (gitprotocol-v2): a capability advertisement, then `ls-refs` and `fetch` commands;
 * - v0 (gitprotocol-pack, gitprotocol-http): the ref advertisement with capabilities, then
 *   stateless negotiation rounds of `want`/`have` lines answered with multi_ack_detailed
 *   acknowledgements, and the pack once the client says `done`.
 *
 * Refusals are `ERR` packets, which git prints as "remote error: …". Once a pack has started,
 * an error can only go on side-band 3 and cut the answer short.
 */
import {
  BAND_DATA,
  BAND_ERROR,
  BAND_PROGRESS,
  DELIM_PKT,
  FLUSH_PKT,
  pktLine,
  PktLineDecoder,
  pktText,
  sidebandPackets,
  type PktLine,
} from "../format/pkt-line.js";
import { isGitOid } from "../format/git.js";
import { packObjects } from "./pack-stream.js";
import type { GitObjectSource, GitRef } from "./source.js";
import { FetchPlanner, GitProtocolError, parseFilter, type FetchPlan, type FetchQuery, type ObjectFilter } from "./walk.js";

export { GitProtocolError } from "./walk.js";

export interface UploadPackOptions {
  /** `castor/<version>`: the `agent` capability. */
  agent: string;
  /** Most objects one fetch may walk or send. */
  maxObjects: number;
  /** zlib level of the pack's objects. */
  compressionLevel?: number;
}

/** An answer's bytes, in order: a few buffers, or a stream of them (a pack). */
export type GitAnswer = Iterable<Buffer> | AsyncIterable<Buffer>;

/** Pack bytes gathered into side-band packets of about this size, not one packet per object. */
const SIDEBAND_BATCH = 64 * 1024;

/** An answer made of one `ERR` packet (git shows "remote error: <message>"). */
export function errorPacket(message: string): Buffer {
  return pktLine(`ERR ${message.replace(/\n/g, " ")}\n`);
}

function packets(lines: readonly string[]): Buffer {
  return Buffer.concat(lines.map((line) => pktLine(`${line}\n`)));
}

/** Every packet of a whole request. GitProtocolError for bytes that are not pkt-lines. */
function requestPackets(body: Buffer): PktLine[] {
  const decoder = new PktLineDecoder();
  decoder.push(body);
  const out: PktLine[] = [];
  try {
    for (let line = decoder.read(); line !== null; line = decoder.read()) out.push(line);
  } catch (error) {
    throw new GitProtocolError(`the request is not in pkt-line format: ${(error as Error).message}`);
  }
  if (decoder.pending > 0) throw new GitProtocolError("the request ends inside a pkt-line");
  return out;
}

function oidArgument(line: string, keyword: string): string {
  const oid = line.slice(keyword.length + 1, keyword.length + 41);
  if (!isGitOid(oid)) throw new GitProtocolError(`expected "${keyword} <object id>", got ${JSON.stringify(line.slice(0, 80))}`);
  return oid;
}

function depthArgument(line: string): number {
  const text = line.slice("deepen ".length);
  const depth = /^\d{1,10}$/.test(text) ? Number(text) : Number.NaN;
  if (!(depth >= 0)) throw new GitProtocolError(`invalid depth ${JSON.stringify(text.slice(0, 40))}`);
  return depth;
}

function unsupportedDeepening(line: string): GitProtocolError | null {
  if (line.startsWith("deepen-since ")) return new GitProtocolError("castor does not support --shallow-since: use --depth");
  if (line.startsWith("deepen-not ")) return new GitProtocolError("castor does not support --shallow-exclude: use --depth");
  if (line === "deepen-relative") return new GitProtocolError("castor does not support --deepen: fetch with --depth (from the branch tips) or --unshallow");
  return null;
}

/** The commits among `oids` that the repository has. */
async function commonCommits(source: GitObjectSource, oids: readonly string[]): Promise<string[]> {
  const common: string[] = [];
  for (const oid of new Set(oids)) if ((await source.commit(oid)) !== null) common.push(oid);
  return common;
}

/**
 * The pack (and progress) as side-band packets, batched; a failure after the first byte goes
 * out on band 3, since the answer can no longer become an ERR.
 */
async function* sidebandPack(source: GitObjectSource, plan: FetchPlan, options: UploadPackOptions, progress: boolean): AsyncGenerator<Buffer> {
  if (progress) yield* sidebandPackets(BAND_PROGRESS, Buffer.from(`Enumerating objects: ${plan.objects.length}, done.\n`));
  let batch: Buffer[] = [];
  let batched = 0;
  try {
    for await (const piece of packObjects(source, plan.objects, options.compressionLevel)) {
      batch.push(piece);
      batched += piece.length;
      if (batched >= SIDEBAND_BATCH) {
        yield* sidebandPackets(BAND_DATA, Buffer.concat(batch, batched));
        batch = [];
        batched = 0;
      }
    }
    if (batched > 0) yield* sidebandPackets(BAND_DATA, Buffer.concat(batch, batched));
  } catch (error) {
    yield* sidebandPackets(BAND_ERROR, Buffer.from(`castor: the pack could not be sent: ${(error as Error).message}\n`));
    throw error;
  }
}

// --- protocol v2 ------------------------------------------------------------------------------

/** The answer to `GET …/info/refs?service=git-upload-pack` with `Git-Protocol: version=2`. */
export function advertiseV2(options: Pick<UploadPackOptions, "agent">): Buffer {
  return Buffer.concat([
    packets(["version 2", `agent=${options.agent}`, "ls-refs=unborn", "fetch=shallow filter", "server-option", "object-format=sha1"]),
    FLUSH_PKT,
  ]);
}

interface V2Request {
  command: string | null;
  args: string[];
}

function parseV2Request(body: Buffer): V2Request {
  const lines = requestPackets(body);
  if (lines.length === 0 || lines[0].kind === "flush") return { command: null, args: [] };
  const first = pktText(lines[0]);
  if (first === null || !first.startsWith("command=")) throw new GitProtocolError("a protocol v2 request must start with command=<name>");
  let at = 1;
  // Capabilities (agent, object-format, server-option…) until the delimiter.
  for (; at < lines.length && lines[at].kind === "data"; at++) {
    const capability = pktText(lines[at])!;
    if (capability.startsWith("object-format=") && capability !== "object-format=sha1") {
      throw new GitProtocolError(`castor repositories use SHA-1 object ids, not ${capability.slice("object-format=".length)}`);
    }
  }
  const args: string[] = [];
  if (at < lines.length && lines[at].kind === "delim") {
    for (at++; at < lines.length && lines[at].kind === "data"; at++) args.push(pktText(lines[at])!);
  }
  if (at >= lines.length || lines[at].kind !== "flush") throw new GitProtocolError("a protocol v2 request must end with a flush packet");
  return { command: first.slice("command=".length), args };
}

/** Answers one protocol v2 request (`POST …/git-upload-pack` with `Git-Protocol: version=2`). */
export async function serveV2(source: GitObjectSource, body: Buffer, options: UploadPackOptions): Promise<GitAnswer> {
  const request = parseV2Request(body);
  if (request.command === null) return [];
  if (request.command === "ls-refs") return [await lsRefs(source, request.args)];
  if (request.command === "fetch") return fetchV2(source, request.args, options);
  throw new GitProtocolError(`unknown command ${JSON.stringify(request.command.slice(0, 40))}`);
}

async function lsRefs(source: GitObjectSource, args: readonly string[]): Promise<Buffer> {
  const prefixes = args.filter((arg) => arg.startsWith("ref-prefix ")).map((arg) => arg.slice("ref-prefix ".length));
  const symrefs = args.includes("symrefs");
  const matches = (name: string) => prefixes.length === 0 || prefixes.some((prefix) => name.startsWith(prefix));
  const refs = await source.refs();
  const lines: string[] = [];
  const head = refs.find((ref) => ref.name === source.head);
  if (head !== undefined && matches("HEAD")) lines.push(`${head.oid} HEAD${symrefs ? ` symref-target:${source.head}` : ""}`);
  for (const ref of refs) if (matches(ref.name)) lines.push(`${ref.oid} ${ref.name}`);
  return Buffer.concat([packets(lines), FLUSH_PKT]);
}

interface FetchArgs extends FetchQuery {
  done: boolean;
  progress: boolean;
  waitForDone: boolean;
}

function parseFetchArgs(args: readonly string[]): FetchArgs {
  const parsed: FetchArgs = { wants: [], haves: [], shallows: [], depth: 0, filter: null, done: false, progress: true, waitForDone: false };
  const wants: string[] = [];
  const haves: string[] = [];
  const shallows: string[] = [];
  let filter: ObjectFilter | null = null;
  for (const arg of args) {
    if (arg.startsWith("want ")) wants.push(oidArgument(arg, "want"));
    else if (arg.startsWith("have ")) haves.push(oidArgument(arg, "have"));
    else if (arg.startsWith("shallow ")) shallows.push(oidArgument(arg, "shallow"));
    else if (arg.startsWith("deepen ")) parsed.depth = depthArgument(arg);
    else if (arg.startsWith("filter ")) filter = parseFilter(arg.slice("filter ".length));
    else if (arg === "done") parsed.done = true;
    else if (arg === "no-progress") parsed.progress = false;
    else if (arg === "wait-for-done") parsed.waitForDone = true;
    else if (arg === "thin-pack" || arg === "ofs-delta" || arg === "include-tag") continue;
    else throw unsupportedDeepening(arg) ?? new GitProtocolError(`unexpected fetch argument ${JSON.stringify(arg.slice(0, 80))}`);
  }
  if (wants.length === 0) throw new GitProtocolError("a fetch needs at least one want");
  return { ...parsed, wants, haves, shallows, filter };
}

async function fetchV2(source: GitObjectSource, rawArgs: readonly string[], options: UploadPackOptions): Promise<GitAnswer> {
  const args = parseFetchArgs(rawArgs);
  const common = await commonCommits(source, args.haves);
  const head: Buffer[] = [];
  if (!args.done) {
    const ready = common.length > 0 && !args.waitForDone;
    head.push(packets(["acknowledgments", ...(common.length > 0 ? common.map((oid) => `ACK ${oid}`) : ["NAK"]), ...(ready ? ["ready"] : [])]));
    if (!ready) return [Buffer.concat([...head, FLUSH_PKT])];
    head.push(DELIM_PKT);
  }
  const plan = await new FetchPlanner(source, options.maxObjects).plan({ ...args, haves: common });
  if (args.depth > 0 || args.shallows.length > 0) {
    head.push(packets(["shallow-info", ...plan.shallow.map((oid) => `shallow ${oid}`), ...plan.unshallow.map((oid) => `unshallow ${oid}`)]), DELIM_PKT);
  }
  head.push(packets(["packfile"]));
  return (async function* () {
    yield Buffer.concat(head);
    yield* sidebandPack(source, plan, options, args.progress);
    yield FLUSH_PKT;
  })();
}

// --- protocol v0 ------------------------------------------------------------------------------

/** The capabilities upload-pack announces on its first ref (gitprotocol-capabilities). */
function v0Capabilities(source: GitObjectSource, options: Pick<UploadPackOptions, "agent">): string {
  return [
    "multi_ack_detailed",
    "side-band-64k",
    "thin-pack",
    "ofs-delta",
    "shallow",
    "no-progress",
    "include-tag",
    "allow-tip-sha1-in-want",
    "allow-reachable-sha1-in-want",
    "filter",
    `symref=HEAD:${source.head}`,
    "object-format=sha1",
    `agent=${options.agent}`,
  ].join(" ");
}

/** The refs advertisement of protocol v0 (after smart HTTP's `# service=` header): HEAD first with the capabilities. */
export async function advertiseV0(source: GitObjectSource, options: Pick<UploadPackOptions, "agent">): Promise<Buffer> {
  const refs = await source.refs();
  const head = refs.find((ref) => ref.name === source.head);
  const listed: GitRef[] = head === undefined ? refs : [{ name: "HEAD", oid: head.oid }, ...refs];
  const capabilities = v0Capabilities(source, options);
  const lines =
    listed.length === 0
      ? [`${"0".repeat(40)} capabilities^{}\0${capabilities}`]
      : listed.map((ref, i) => (i === 0 ? `${ref.oid} ${ref.name}\0${capabilities}` : `${ref.oid} ${ref.name}`));
  return Buffer.concat([packets(lines), FLUSH_PKT]);
}

interface V0Request extends FetchQuery {
  capabilities: Set<string>;
  done: boolean;
}

function parseV0Request(body: Buffer): V0Request | null {
  const lines = requestPackets(body);
  if (lines.length === 0 || lines[0].kind === "flush") return null;
  const request: V0Request = { wants: [], haves: [], shallows: [], depth: 0, filter: null, capabilities: new Set(), done: false };
  const wants: string[] = [];
  const haves: string[] = [];
  const shallows: string[] = [];
  let at = 0;
  for (; at < lines.length && lines[at].kind === "data"; at++) {
    const line = pktText(lines[at])!;
    if (line.startsWith("want ")) {
      wants.push(oidArgument(line, "want"));
      if (wants.length === 1) for (const capability of line.slice(46).split(" ")) if (capability !== "") request.capabilities.add(capability);
    } else if (line.startsWith("shallow ")) shallows.push(oidArgument(line, "shallow"));
    else if (line.startsWith("deepen ")) request.depth = depthArgument(line);
    else if (line.startsWith("filter ")) request.filter = parseFilter(line.slice("filter ".length));
    else throw unsupportedDeepening(line) ?? new GitProtocolError(`unexpected line ${JSON.stringify(line.slice(0, 80))} among the wants`);
  }
  if (wants.length === 0) throw new GitProtocolError("a fetch needs at least one want");
  if (request.capabilities.has("deepen-relative")) throw unsupportedDeepening("deepen-relative")!;
  // Then `have` lines in flush-ended rounds, and perhaps `done`.
  for (at++; at < lines.length; at++) {
    const line = pktText(lines[at]);
    if (line === null) continue;
    if (line.startsWith("have ")) haves.push(oidArgument(line, "have"));
    else if (line === "done") request.done = true;
    else throw new GitProtocolError(`unexpected line ${JSON.stringify(line.slice(0, 80))} among the haves`);
  }
  return { ...request, wants, haves, shallows };
}

/** Answers one stateless protocol v0 request (`POST …/git-upload-pack` without `version=2`). */
export async function serveV0(source: GitObjectSource, body: Buffer, options: UploadPackOptions): Promise<GitAnswer> {
  const request = parseV0Request(body);
  if (request === null) return [];
  const deepening = request.depth > 0;
  const common = await commonCommits(source, request.haves);
  const planner = new FetchPlanner(source, options.maxObjects);
  const head: Buffer[] = [];
  let plan: FetchPlan | null = null;
  if (deepening || request.done) {
    plan = await planner.plan({ ...request, haves: common });
    if (deepening) {
      head.push(packets([...plan.shallow.map((oid) => `shallow ${oid}`), ...plan.unshallow.map((oid) => `unshallow ${oid}`)]), FLUSH_PKT);
    }
  }
  if (!request.done) {
    // A negotiation round: what is common, whether that is enough, NAK to end the round.
    const acks = common.map((oid) => `ACK ${oid} common`);
    if (common.length > 0) acks.push(`ACK ${common[common.length - 1]} ready`);
    if (request.haves.length > 0 || !deepening) head.push(packets([...acks, "NAK"]));
    return [Buffer.concat(head)];
  }
  head.push(packets([common.length > 0 ? `ACK ${common[common.length - 1]}` : "NAK"]));
  const sideband = request.capabilities.has("side-band-64k");
  const progress = !request.capabilities.has("no-progress");
  const finalPlan = plan!;
  return (async function* () {
    yield Buffer.concat(head);
    if (sideband) {
      yield* sidebandPack(source, finalPlan, options, progress);
      yield FLUSH_PKT;
    } else {
      yield* packObjects(source, finalPlan.objects, options.compressionLevel);
    }
  })();
}
