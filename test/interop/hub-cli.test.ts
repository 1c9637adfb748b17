/**
 * The `hf` CLI and `huggingface_hub` 2.0.0 (with hf_xet 1.6.0) against a real `castor serve`,
 * pointed at it as a user would: HF_ENDPOINT, HF_TOKEN (a token of user alice made with
 * `castor token create --user alice --namespace alice --access write`), a fresh HF_HOME and
 * HF_XET_CACHE. For models, datasets and spaces: `hf repos create`, `hf upload` of a small text
 * file, a 12 MiB random file (through Xet) and a folder with a README.md (card validation) and
 * an empty file, `hf download` of one file, into `--local-dir` and of the whole repository, and
 * from Python `snapshot_download`, `hf_hub_download`, `list_repo_files`, `repo_info` and
 * `file_exists`; every download compared byte for byte. Then: the 12 MiB file travelled through
 * Xet (its `xetHash` in the tree, castor saw xorbs and a shard), uploading it again from another
 * machine stores no new xorb, `hf auth whoami`, plain HTTP `resolve` (whole and ranged, the Xet
 * file reconstructed by castor) with a token on a private repository and without one on a
 * public one, `HF_HUB_DISABLE_XET=1 hf download` of the Xet-stored file, and create, upload and
 * download with `HF_ENDPOINT=http://localhost:PORT` while castor names itself 127.0.0.1.
 *
 * A failing command reports its output, castor's requests meanwhile and castor's warnings.
 */
import assert from "node:assert/strict";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { assertSameBytes, expectedFileHash, MIB, pseudoRandomBytes, readBytes } from "./harness.js";
import {
  clientEnv,
  describeRequests,
  fetchExpecting,
  filesBelow,
  lastJson,
  plural,
  PYTHON_VENVS,
  pythonVenv,
  removeDir,
  REPO_TYPES,
  runChild,
  runOk,
  sha256Hex,
  startHub,
  tempDir,
  urlPrefix,
  USER,
  venvScript,
  type HubServer,
  type RepoType,
} from "./hub-clients.js";

const REQUIREMENTS = PYTHON_VENVS["hub-cli"];
const BIG_SIZE = 12 * MIB;

/** What each repository holds once the uploads are done, by path. */
function repoContents(type: RepoType): Map<string, Uint8Array> {
  return new Map<string, Uint8Array>([
    ["small.txt", Buffer.from(`a small text file in the ${type} repository\nsecond line: ünïcödé\n`)],
    ["big.bin", pseudoRandomBytes(`hub-cli: 12 MiB for the ${type}`, BIG_SIZE)],
    ["README.md", Buffer.from(`---\nlicense: apache-2.0\ntags:\n- castor-test\n---\n\n# ${type} uploaded by the hf CLI\n`)],
    ["data/notes.txt", Buffer.from(`notes of the ${type}\n`.repeat(50))],
    ["data/config.json", Buffer.from(JSON.stringify({ type, hidden: 32, nested: { list: [1, 2, 3] } }, null, 2))],
    ["data/empty.txt", Buffer.alloc(0)],
  ]);
}

/**
 * What each repository then holds: the uploaded files, and the .gitattributes line castor adds
 * for big.bin, the one file stored through Xet, as the Hub does for API uploads of large files.
 */
function storedContents(type: RepoType): Map<string, Uint8Array> {
  return new Map([[".gitattributes", Buffer.from("big.bin filter=lfs diff=lfs merge=lfs -text\n")], ...repoContents(type)]);
}

interface TreeEntry {
  type: "file" | "directory";
  path: string;
  size?: number;
  oid: string;
  lfs?: { oid: string; size: number; pointerSize: number };
  xetHash?: string;
}

function assertSameFiles(actual: Map<string, Uint8Array>, expected: Map<string, Uint8Array>, what: string): void {
  assert.deepEqual([...actual.keys()].sort(), [...expected.keys()].sort(), `${what}: the files`);
  for (const [path, bytes] of expected) assertSameBytes(actual.get(path)!, bytes, `${what}: ${path}`);
}

/** Python: what a script using huggingface_hub's download and listing functions sees. */
const PYTHON_API_SCRIPT = `
import json, sys
from huggingface_hub import file_exists, hf_hub_download, list_repo_files, repo_info, snapshot_download
repo_id, repo_type = sys.argv[1], sys.argv[2]
info = repo_info(repo_id, repo_type=repo_type, files_metadata=True)
print(json.dumps({
    "snapshot": snapshot_download(repo_id, repo_type=repo_type),
    "small": hf_hub_download(repo_id, "small.txt", repo_type=repo_type),
    "big": hf_hub_download(repo_id, "big.bin", repo_type=repo_type),
    "nested": hf_hub_download(repo_id, "data/config.json", repo_type=repo_type),
    "files": sorted(list_repo_files(repo_id, repo_type=repo_type)),
    "info": {
        "id": info.id,
        "sha": info.sha,
        "private": info.private,
        "siblings": sorted(
            [{"rfilename": s.rfilename, "size": s.size, "lfsSha256": s.lfs.sha256 if s.lfs else None} for s in info.siblings],
            key=lambda s: s["rfilename"],
        ),
    },
    "exists": file_exists(repo_id, "small.txt", repo_type=repo_type),
    "existsNested": file_exists(repo_id, "data/notes.txt", repo_type=repo_type),
    "missing": file_exists(repo_id, "no-such-file.txt", repo_type=repo_type),
}))
`;

describe("the hf CLI and huggingface_hub 2.0.0 against castor's hub", () => {
  let hub: HubServer;
  let python: string;
  let hf: string;
  let workDir: string;
  /** Commit id of each repository's main once its uploads are done. */
  const heads = new Map<RepoType, string>();

  before(async () => {
    [python, hub, workDir] = await Promise.all([pythonVenv("hub-cli", REQUIREMENTS), startHub(), tempDir("castor-hub-cli-")]);
    hf = venvScript(python, "hf");
    for (const type of REPO_TYPES) {
      const dir = join(workDir, "data", type);
      for (const [path, bytes] of repoContents(type)) {
        const target = path === "small.txt" || path === "big.bin" ? join(dir, path) : join(dir, "folder", path);
        await mkdir(join(target, ".."), { recursive: true });
        await writeFile(target, bytes);
      }
    }
  });

  after(async () => {
    await hub?.stop();
    await removeDir(workDir);
  });

  /** A client machine of its own: fresh HF_HOME and HF_XET_CACHE. */
  let machines = 0;
  const machine = (extra: Record<string, string> = {}) => clientEnv(hub, join(workDir, "machines", String(machines++)), extra);

  const repoId = (type: RepoType) => `${USER}/cli-${type}`;
  const typeArgs = (type: RepoType) => ["--type", type];

  const tree = async (type: RepoType, token: string | null = hub.token): Promise<TreeEntry[]> => {
    const url = `${hub.endpoint}/api/${plural(type)}/${repoId(type)}/tree/main?recursive=true&expand=false`;
    const response = await fetchExpecting(url, { headers: token === null ? {} : { authorization: `Bearer ${token}` } }, 200);
    return (await response.json()) as TreeEntry[];
  };

  it("hf auth whoami prints the token's user", async () => {
    const result = await runOk(hub, "hf auth whoami", hf, ["auth", "whoami"], { env: machine() });
    assert.match(result.stdout, new RegExp(`\\b${USER}\\b`), `hf auth whoami printed:\n${result.stdout}`);
    const json = lastJson<{ user?: string }>(await runOk(hub, "hf auth whoami --format json", hf, ["auth", "whoami", "--format", "json"], { env: machine() }));
    assert.equal(json.user, USER, `hf auth whoami --format json printed ${JSON.stringify(json)}`);
  });

  for (const type of REPO_TYPES) {
    describe(`${type} repository`, () => {
      const dir = () => join(workDir, "data", type);
      const uploader = () => clientEnv(hub, join(workDir, "uploader", type));

      it("hf repos create makes it (and refuses a second create without --exist-ok)", async () => {
        const args = ["repos", "create", repoId(type), ...typeArgs(type), ...(type === "space" ? ["--sdk", "static"] : []), "--format", "json"];
        const created = lastJson<{ repo_id: string; url: string }>(await runOk(hub, "hf repos create", hf, args, { env: uploader() }));
        assert.equal(created.repo_id, repoId(type));
        assert.equal(created.url, `${hub.endpoint}/${urlPrefix(type)}${repoId(type)}`);

        const again = await runChild(hf, args, { env: uploader() });
        assert.notEqual(again.code, 0, "creating an existing repository without --exist-ok fails");
        assert.match(again.stdout + again.stderr, /already exists|409|Conflict/i, `the error says why:\n${again.stderr}`);
        await runOk(hub, "hf repos create --exist-ok", hf, [...args, "--exist-ok"], { env: uploader() });
      });

      it("hf upload: a small text file inline, a 12 MiB file through Xet, a folder with a README.md", async () => {
        const expected = storedContents(type);

        let from = hub.server.logLines().length;
        await runOk(hub, "hf upload small.txt", hf, ["upload", repoId(type), join(dir(), "small.txt"), ...typeArgs(type), "--format", "json"], {
          env: uploader(),
        });
        let requests = await hub.server.waitForRequests(from, (lines) => lines.some((line) => line.path.includes("/commit/")));
        assert.ok(
          !requests.some((line) => line.path.startsWith("/v1/xorbs/")),
          `a small text file travels inline, not through Xet:\n${describeRequests(requests)}`,
        );

        from = hub.server.logLines().length;
        const xorbsBefore = await hub.countStoredXorbs();
        const uploaded = lastJson<{ url: string }>(
          await runOk(hub, "hf upload big.bin", hf, ["upload", repoId(type), join(dir(), "big.bin"), "big.bin", ...typeArgs(type), "--format", "json"], {
            env: uploader(),
          }),
        );
        assert.match(
          uploaded.url,
          new RegExp(`^${hub.endpoint}/${urlPrefix(type)}${repoId(type)}/commit/[0-9a-f]{40}$`),
          "the upload answers castor's commit URL",
        );
        requests = await hub.server.waitForRequests(from, (lines) => lines.some((line) => line.path.includes("/commit/")));
        const sawXorb = requests.some((line) => line.method === "POST" && line.path.startsWith("/v1/xorbs/") && line.statusCode === 200);
        const sawShard = requests.some((line) => line.method === "POST" && /^\/v[12]\/shards$/.test(line.path) && line.statusCode === 200);
        assert.ok(sawXorb && sawShard, `the 12 MiB file travels through Xet (xorbs, then a shard); castor saw:\n${describeRequests(requests)}`);
        assert.ok((await hub.countStoredXorbs()) > xorbsBefore, "castor stored the file's xorbs");

        from = hub.server.logLines().length;
        await runOk(hub, "hf upload folder", hf, ["upload", repoId(type), join(dir(), "folder"), ".", ...typeArgs(type), "--format", "json"], {
          env: uploader(),
        });
        requests = hub.server.requestLog(from);
        assert.ok(
          requests.some((line) => line.method === "POST" && line.path === "/api/validate-yaml" && line.statusCode === 200),
          `a commit adding README.md has its card validated:\n${describeRequests(requests)}`,
        );

        const entries = await tree(type);
        const files = entries.filter((entry) => entry.type === "file");
        assert.deepEqual(files.map((entry) => entry.path).sort(), [...expected.keys()].sort(), "the tree lists every uploaded file");
        assert.ok(
          entries.some((entry) => entry.type === "directory" && entry.path === "data"),
          "the tree lists the data folder",
        );
        for (const entry of files) assert.equal(entry.size, expected.get(entry.path)!.length, `${entry.path}: size in the tree`);
        const big = files.find((entry) => entry.path === "big.bin")!;
        const bigBytes = expected.get("big.bin")!;
        assert.equal(big.xetHash, expectedFileHash(bigBytes), "big.bin is stored as the Xet file of its bytes");
        assert.deepEqual(big.lfs && { oid: big.lfs.oid, size: big.lfs.size }, { oid: sha256Hex(bigBytes), size: BIG_SIZE }, "big.bin's lfs entry");
        const small = files.find((entry) => entry.path === "small.txt")!;
        assert.equal(small.xetHash, undefined, "small.txt is stored inline");

        const info = await fetchExpecting(`${hub.endpoint}/api/${plural(type)}/${repoId(type)}`, { headers: { authorization: `Bearer ${hub.token}` } }, 200);
        heads.set(type, ((await info.json()) as { sha: string }).sha);
      });

      it("hf download: one file, one file into --local-dir, the whole repository, byte-exact", async () => {
        const expected = storedContents(type);
        const env = machine();

        const one = lastJson<{ path: string }>(
          await runOk(hub, "hf download small.txt", hf, ["download", repoId(type), "small.txt", ...typeArgs(type), "--format", "json"], { env }),
        );
        assert.match(one.path, new RegExp(`snapshots/${heads.get(type)}/small\\.txt$`), "the file lands in the cache's snapshot of the head commit");
        assertSameBytes(await readBytes(one.path), expected.get("small.txt")!, "hf download small.txt");

        const localDir = join(workDir, "local", type);
        const big = lastJson<{ path: string }>(
          await runOk(
            hub,
            "hf download big.bin --local-dir",
            hf,
            ["download", repoId(type), "big.bin", ...typeArgs(type), "--local-dir", localDir, "--format", "json"],
            { env },
          ),
        );
        assert.equal(big.path, join(localDir, "big.bin"));
        assertSameBytes(await readBytes(big.path), expected.get("big.bin")!, "hf download big.bin --local-dir");

        const from = hub.server.logLines().length;
        // One worker: huggingface_hub 2.0.0 caches "is hf_xet installed" racily (`_get_version`
        // stores "N/A" before it looks the version up), so of several download threads asking
        // first at once, one may read "N/A" and fetch its file with a plain GET of resolve —
        // correct bytes (castor serves both ways), but not the Xet path this test checks.
        const whole = lastJson<{ path: string }>(
          await runOk(hub, "hf download (whole repository)", hf, ["download", repoId(type), ...typeArgs(type), "--max-workers", "1", "--format", "json"], {
            env: machine(),
          }),
        );
        assertSameFiles(await filesBelow(whole.path), expected, "hf download of the whole repository");
        const requests = hub.server.requestLog(from);
        assert.ok(
          requests.some((line) => line.method === "GET" && /^\/v[12]\/reconstructions\//.test(line.path)),
          `the whole-repository download fetched big.bin through Xet:\n${describeRequests(requests)}`,
        );
      });

      it("huggingface_hub: snapshot_download, hf_hub_download, list_repo_files, repo_info, file_exists", async () => {
        const expected = storedContents(type);
        const result = lastJson<{
          snapshot: string;
          small: string;
          big: string;
          nested: string;
          files: string[];
          info: { id: string; sha: string; private: boolean; siblings: { rfilename: string; size: number | null; lfsSha256: string | null }[] };
          exists: boolean;
          existsNested: boolean;
          missing: boolean;
        }>(await runOk(hub, "huggingface_hub functions", python, ["-c", PYTHON_API_SCRIPT, repoId(type), type], { env: machine() }));

        assertSameFiles(await filesBelow(result.snapshot), expected, "snapshot_download");
        assertSameBytes(await readBytes(result.small), expected.get("small.txt")!, "hf_hub_download small.txt");
        assertSameBytes(await readBytes(result.big), expected.get("big.bin")!, "hf_hub_download big.bin");
        assertSameBytes(await readBytes(result.nested), expected.get("data/config.json")!, "hf_hub_download data/config.json");
        assert.deepEqual(result.files, [...expected.keys()].sort(), "list_repo_files");
        assert.equal(result.info.id, repoId(type));
        assert.equal(result.info.sha, heads.get(type));
        assert.equal(result.info.private, true, "repositories are private unless asked otherwise");
        assert.deepEqual(
          result.info.siblings,
          [...expected.entries()]
            .sort(([a], [b]) => (a < b ? -1 : 1))
            .map(([path, bytes]) => ({ rfilename: path, size: bytes.length, lfsSha256: path === "big.bin" ? sha256Hex(bytes) : null })),
          "repo_info(files_metadata=True) siblings",
        );
        assert.equal(result.exists, true, "file_exists of an existing file");
        assert.equal(result.existsNested, true, "file_exists of an existing file in a folder");
        assert.equal(result.missing, false, "file_exists of a missing file");
      });
    });
  }

  it("uploading the 12 MiB file again from another machine stores no new xorb", async () => {
    const type: RepoType = "model";
    const bytes = repoContents(type).get("big.bin")!;
    const xorbsBefore = await hub.countStoredXorbs();
    const from = hub.server.logLines().length;
    await runOk(
      hub,
      "hf upload big.bin as big-copy.bin",
      hf,
      ["upload", repoId(type), join(workDir, "data", type, "big.bin"), "big-copy.bin", "--format", "json"],
      { env: machine() },
    );
    const requests = await hub.server.waitForRequests(from, (lines) => lines.some((line) => line.path.includes("/commit/")));
    assert.equal(await hub.countStoredXorbs(), xorbsBefore, `a re-upload stores no new xorb; castor saw:\n${describeRequests(requests)}`);
    assert.ok(!requests.some((line) => line.method === "POST" && line.path.startsWith("/v1/xorbs/")), `no xorb was sent:\n${describeRequests(requests)}`);
    assert.ok(
      requests.some((line) => line.method === "POST" && /^\/v[12]\/shards$/.test(line.path) && line.statusCode === 200),
      "the client registered the file with a shard",
    );
    const entries = await tree(type);
    const copy = entries.find((entry) => entry.path === "big-copy.bin");
    assert.equal(copy?.xetHash, expectedFileHash(bytes), "the copy is the same Xet file");
  });

  describe("plain HTTP: resolve without a Hugging Face client", () => {
    const ranges = (size: number): [string, number, number][] => [
      ["bytes=0-0", 0, 1],
      ["bytes=1000-2000999", 1000, 2_001_000],
      [`bytes=${size - 65536}-${size - 1}`, size - 65536, size],
      ["bytes=-4096", size - 4096, size],
      [`bytes=${5 * MIB + 3}-`, 5 * MIB + 3, size],
    ];

    const readResolve = async (url: string, headers: Record<string, string>, expected: Uint8Array, what: string) => {
      const whole = await fetchExpecting(url, { headers }, 200);
      assert.equal(whole.headers.get("content-length"), String(expected.length), `${what}: Content-Length`);
      assert.equal(whole.headers.get("content-encoding"), null, `${what}: never compressed`);
      assertSameBytes(new Uint8Array(await whole.arrayBuffer()), expected, `${what}: whole`);
      for (const [range, start, end] of ranges(expected.length).filter(([, , end]) => end <= expected.length)) {
        const part = await fetchExpecting(url, { headers: { ...headers, range } }, 206);
        assert.equal(part.headers.get("content-range"), `bytes ${start}-${end - 1}/${expected.length}`, `${what}: Content-Range of ${range}`);
        assertSameBytes(new Uint8Array(await part.arrayBuffer()), expected.subarray(start, end), `${what}: ${range}`);
      }
    };

    it("with the token from a private repository: the inline file and the Xet-stored one (reconstructed by castor)", async () => {
      for (const type of REPO_TYPES) {
        const contents = repoContents(type);
        const base = `${hub.endpoint}/${urlPrefix(type)}${repoId(type)}/resolve`;
        const headers = { authorization: `Bearer ${hub.token}` };
        const small = contents.get("small.txt")!;
        const whole = await fetchExpecting(`${base}/${heads.get(type)}/small.txt`, { headers }, 200);
        assertSameBytes(new Uint8Array(await whole.arrayBuffer()), small, `${type} small.txt at the commit id`);
        const part = await fetchExpecting(`${base}/main/small.txt`, { headers: { ...headers, range: "bytes=2-9" } }, 206);
        assertSameBytes(new Uint8Array(await part.arrayBuffer()), small.subarray(2, 10), `${type} small.txt bytes=2-9`);
        const empty = await fetchExpecting(`${base}/main/data/empty.txt`, { headers }, 200);
        assert.equal((await empty.arrayBuffer()).byteLength, 0, `${type} data/empty.txt`);
        // Without the token the private repository does not exist.
        const anonymous = await fetch(`${base}/main/small.txt`);
        assert.ok(anonymous.status === 401 || anonymous.status === 404, `an anonymous read of a private repository is refused (got ${anonymous.status})`);
        assert.equal(anonymous.headers.get("x-error-code"), "RepoNotFound");
      }
      for (const type of REPO_TYPES) {
        const base = `${hub.endpoint}/${urlPrefix(type)}${repoId(type)}/resolve`;
        await readResolve(`${base}/main/big.bin`, { authorization: `Bearer ${hub.token}` }, repoContents(type).get("big.bin")!, `${type} big.bin`);
      }
    });

    it("without any token from a public repository", async () => {
      const publicId = `${USER}/cli-public`;
      const bytes = repoContents("model").get("big.bin")!;
      const env = machine();
      await runOk(hub, "hf repos create --public", hf, ["repos", "create", publicId, "--public", "--format", "json"], { env });
      await runOk(
        hub,
        "hf upload big.bin (public)",
        hf,
        ["upload", publicId, join(workDir, "data", "model", "big.bin"), "weights/big.bin", "--format", "json"],
        { env },
      );
      const head = await fetchExpecting(`${hub.endpoint}/${publicId}/resolve/main/weights/big.bin`, { method: "HEAD" }, 200);
      assert.equal(head.headers.get("x-xet-hash"), expectedFileHash(bytes), "the HEAD names the Xet hash");
      const missing = await fetch(`${hub.endpoint}/${publicId}/resolve/main/weights/nothing.bin`, { method: "HEAD" });
      assert.equal(missing.status, 404);
      assert.equal(missing.headers.get("x-error-code"), "EntryNotFound");
      const listing = await fetchExpecting(`${hub.endpoint}/api/models/${publicId}/tree/main/weights`, {}, 200);
      assert.deepEqual(
        ((await listing.json()) as TreeEntry[]).map((entry) => entry.path),
        ["weights/big.bin"],
        "an anonymous tree listing of a public repository",
      );
      await readResolve(`${hub.endpoint}/${publicId}/resolve/main/weights/big.bin`, {}, bytes, "public big.bin");
    });
  });

  it("HF_HUB_DISABLE_XET=1 hf download reads the Xet-stored file with a plain GET of resolve", async () => {
    const type: RepoType = "dataset";
    const bytes = repoContents(type).get("big.bin")!;
    const localDir = join(workDir, "no-xet");
    const from = hub.server.logLines().length;
    const downloaded = lastJson<{ path: string }>(
      await runOk(
        hub,
        "HF_HUB_DISABLE_XET=1 hf download big.bin",
        hf,
        ["download", repoId(type), "big.bin", ...typeArgs(type), "--local-dir", localDir, "--format", "json"],
        {
          env: machine({ HF_HUB_DISABLE_XET: "1" }),
        },
      ),
    );
    assertSameBytes(await readBytes(downloaded.path), bytes, "HF_HUB_DISABLE_XET=1 hf download big.bin");
    const requests = await hub.server.waitForRequests(from, (lines) =>
      lines.some((line) => line.method === "GET" && line.path.endsWith("/resolve/main/big.bin")),
    );
    assert.ok(
      requests.some((line) => line.method === "GET" && line.path === `/datasets/${repoId(type)}/resolve/main/big.bin` && line.statusCode === 200),
      `the file came from a plain GET of resolve:\n${describeRequests(requests)}`,
    );
    assert.ok(!requests.some((line) => /reconstructions|xet-read-token/.test(line.path)), `no Xet request was made:\n${describeRequests(requests)}`);
  });

  /**
   * castor serves 127.0.0.1 and names itself so (CASTOR_PUBLIC_URL unset); a user sets
   * HF_ENDPOINT=http://localhost:PORT. huggingface_hub refuses URLs on a host other than
   * HF_ENDPOINT's, so castor answers that client with the localhost origin it used.
   */
  it("HF_ENDPOINT=http://localhost:PORT: hf repos create, hf upload (inline and through Xet), hf download", async () => {
    const endpoint = hub.endpoint.replace("//127.0.0.1:", "//localhost:");
    assert.notEqual(endpoint, hub.endpoint);
    const env = machine({ HF_ENDPOINT: endpoint });
    const id = `${USER}/through-localhost`;
    const dir = join(workDir, "data", "localhost");
    const expected = new Map<string, Uint8Array>([
      ["small.txt", Buffer.from("uploaded through http://localhost\n")],
      ["big.bin", pseudoRandomBytes("hub-cli: 12 MiB through localhost", BIG_SIZE)],
    ]);
    await mkdir(dir, { recursive: true });
    for (const [path, bytes] of expected) await writeFile(join(dir, path), bytes);
    const from = hub.server.logLines().length;
    const created = lastJson<{ url: string }>(await runOk(hub, "hf repos create (localhost)", hf, ["repos", "create", id, "--format", "json"], { env }));
    assert.equal(created.url, `${endpoint}/${id}`);
    for (const path of expected.keys()) {
      const uploaded = lastJson<{ url: string }>(
        await runOk(hub, `hf upload ${path} (localhost)`, hf, ["upload", id, join(dir, path), path, "--format", "json"], { env }),
      );
      assert.match(uploaded.url, new RegExp(`^${endpoint}/${id}/commit/[0-9a-f]{40}$`), "the commit URL is on the host the client used");
    }
    const downloaded = lastJson<{ path: string }>(
      await runOk(
        hub,
        "hf download (localhost)",
        hf,
        ["download", id, "--max-workers", "1", "--local-dir", join(workDir, "through-localhost"), "--format", "json"],
        {
          env: machine({ HF_ENDPOINT: endpoint }),
        },
      ),
    );
    // With the .gitattributes line castor wrote for big.bin, the one file stored through Xet.
    const stored = new Map([...expected, [".gitattributes", Buffer.from("big.bin filter=lfs diff=lfs merge=lfs -text\n")]]);
    assertSameFiles(await filesBelow(downloaded.path), stored, "hf download through localhost");
    const requests = hub.server.requestLog(from);
    assert.ok(
      requests.some((line) => line.method === "POST" && line.path.startsWith("/v1/xorbs/") && line.statusCode === 200) &&
        requests.some((line) => /^\/v[12]\/reconstructions\//.test(line.path) && line.statusCode === 200),
      `big.bin went both ways through Xet:\n${describeRequests(requests)}`,
    );
    const warnings = hub.server
      .logLines()
      .slice(from)
      .filter((line) => line.requestOrigin !== undefined);
    assert.deepEqual(warnings, [], "localhost is no mismatch to warn of");
  });
});
