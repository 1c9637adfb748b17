/**
 * The real clients against a real `castor serve`, byte-exact: every uploader × every file shape
 * × every downloader. Uploaders: hf_xet 1.6.0 (Python, `upload_files`), @huggingface/hub
 * (`commit`, Xet path) and castor's own client (`upload`). Downloaders: hf_xet
 * (`download_files`), hf.js `XetBlob` with parallel downloads and serially, hf.js
 * `XetBlob.slice()` at odd offsets, and castor's client (`download`, whole and byte ranges).
 * One server for the file, cells run one after another.
 *
 * A failing hf_xet run reports its stderr, the tail of its own log and castor's last requests;
 * RUST_LOG=debug makes hf_xet's log more detailed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import {
  assertSameBytes,
  castorClientDownload,
  castorClientUpload,
  concatBytes,
  expectedFileHash,
  interopSuite,
  hfJsDownload,
  hfJsUpload,
  MIB,
  pseudoRandomBytes,
  readBytes,
  repeated,
  sha256Hex,
  writeTemp,
  type RecordedRequest,
} from "./harness.js";
import type { LoggedRequest } from "../helpers/server.js";

const ZERO_HASH_HEX = "0".repeat(64);

interface FileShape {
  name: string;
  size: number;
  /** The bytes, unrelated for different labels so no upload dedups against another by accident. */
  make(label: string): Uint8Array;
}

const SHAPES: FileShape[] = [
  { name: "an empty file", size: 0, make: () => new Uint8Array(0) },
  { name: "1 byte", size: 1, make: (label) => pseudoRandomBytes(label, 1) },
  { name: "8,191 bytes (one below the minimum chunk)", size: 8191, make: (label) => pseudoRandomBytes(label, 8191) },
  { name: "8,192 bytes (the minimum chunk)", size: 8192, make: (label) => pseudoRandomBytes(label, 8192) },
  { name: "1 MiB random", size: MIB, make: (label) => pseudoRandomBytes(label, MIB) },
  { name: "10 MiB random", size: 10 * MIB, make: (label) => pseudoRandomBytes(label, 10 * MIB) },
  { name: "12 MiB of one repeated 1 MiB block", size: 12 * MIB, make: (label) => repeated(pseudoRandomBytes(label, MIB), 12) },
];

/** `[start, end)` slices at odd offsets: inside the first chunk, across chunks and blocks, the tail. */
function slicesOf(size: number): [number, number][] {
  if (size < 2) return [];
  const slices: [number, number][] = [[1, size - 1]];
  if (size > 16) slices.push([Math.floor(size / 3) | 1, (Math.floor((2 * size) / 3) | 1) + 2], [size - 7, size]);
  if (size > 6 * MIB) slices.push([5 * MIB - 12_345, 7 * MIB + 777]);
  return slices;
}

interface Uploaded {
  /** The file hash the client reports. */
  hash: string;
  /** The SHA-256 the client wrote into the shard's metadata extension (hex). */
  sha256: string;
}

interface Uploader {
  name: string;
  /** Uploads `bytes` as a file named `name`. */
  upload(name: string, bytes: Uint8Array): Promise<Uploaded>;
}

interface Downloader {
  name: string;
  download(file: { hash: string; size: number }): Promise<Uint8Array>;
}

/** What every hf.js download must show: multi-range requests answered with multipart/byteranges. */
function checkHfJsTransfers(requests: RecordedRequest[], what: string): void {
  for (const request of requests) {
    assert.ok(request.status >= 200 && request.status < 300, `${what}: ${request.method} ${new URL(request.url).pathname} answered ${request.status}`);
    if (request.range?.includes(",")) {
      assert.equal(request.status, 206, `${what}: a multi-range transfer is answered 206`);
      assert.match(request.contentType ?? "", /^multipart\/byteranges; boundary=/, `${what}: a multi-range transfer is answered multipart/byteranges`);
    }
  }
}

describe("real clients × castor serve: upload, download, byte-exact", () => {
  const suite = interopSuite("castor-interop-files-");

  const hfXetUploader: Uploader = {
    name: "hf_xet",
    async upload(name, bytes) {
      const { files } = await suite.hfxet.upload([await writeTemp(suite.workDir, name, bytes)]);
      assert.equal(files.length, 1);
      assert.equal(files[0].size, bytes.length, "hf_xet reports the file size");
      // castor chunks and hashes like xet-core: both must name the same file.
      assert.equal(files[0].hash, expectedFileHash(bytes), "hf_xet's file hash is the one castor's format code computes");
      // hf_xet short-circuits empty files: it declares an all-zero SHA-256 for them instead of
      // the digest of no bytes. Any other file carries its real SHA-256.
      assert.equal(files[0].sha256, bytes.length === 0 ? ZERO_HASH_HEX : sha256Hex(bytes), "the SHA-256 hf_xet declares");
      return { hash: files[0].hash, sha256: files[0].sha256 };
    },
  };

  const hfJsUploader: Uploader = {
    name: "@huggingface/hub",
    async upload(name, bytes) {
      const result = await hfJsUpload(suite.castor, [{ path: name, bytes }]);
      assert.deepEqual(result.committed, [{ path: name, oid: sha256Hex(bytes), size: bytes.length }], "hf.js commits an LFS pointer to the file");
      for (const request of result.castorRequests) {
        assert.ok(
          request.status === 200 || (request.status === 404 && request.url.includes("/v1/chunks/")),
          `hf.js ${request.method} ${request.url} answered ${request.status}`,
        );
      }
      return { hash: result.files[0].hash, sha256: result.files[0].sha256 };
    },
  };

  const hfXetDownloader: Downloader = {
    name: "hf_xet",
    async download(file) {
      const path = join(suite.workDir, `download-${file.hash}-${Date.now()}`);
      const logFrom = suite.castor.server.logLines().length;
      const { files } = await suite.hfxet.download([{ ...file, path }]);
      assert.deepEqual(files, [path]);
      if (file.size > 0) {
        // The bytes came from suite.castor, not from some local cache of the client.
        const askedV2 = (line: LoggedRequest) => line.path === `/v2/reconstructions/${file.hash}` && line.statusCode === 200;
        const fetchedRange = (line: LoggedRequest) => line.method === "GET" && line.statusCode === 206;
        const requests = await suite.castor.server.waitForRequests(logFrom, (logged) => logged.some(askedV2) && logged.some(fetchedRange));
        assert.ok(requests.some(askedV2), "hf_xet asked castor's V2 reconstruction");
        assert.ok(requests.some(fetchedRange), "hf_xet fetched xorb bytes from castor's transfer URLs");
      }
      return readBytes(path);
    },
  };

  const hfJsDownloader = (parallelDownloads: boolean): Downloader => ({
    name: parallelDownloads ? "@huggingface/hub XetBlob (parallel)" : "@huggingface/hub XetBlob (parallelDownloads: false)",
    async download(file) {
      const { bytes, requests } = await hfJsDownload(suite.castor, file, { parallelDownloads });
      if (file.size === 0) {
        // By design XetBlob never asks the server for an empty file.
        assert.deepEqual(requests, [], "hf.js reads an empty file without any request");
      } else {
        assert.ok(
          requests.some((request) => request.url.includes(`/v2/reconstructions/${file.hash}`) && request.status === 200),
          "hf.js asked castor's V2 reconstruction",
        );
      }
      checkHfJsTransfers(requests, this.name);
      return bytes;
    },
  });

  const castorUploader: Uploader = {
    name: "castor's client",
    async upload(name, bytes) {
      const file = await castorClientUpload(suite.castor, await writeTemp(suite.workDir, name, bytes));
      assert.equal(file.size, bytes.length, "castor's client reports the file size");
      assert.equal(file.fileHash, expectedFileHash(bytes));
      assert.equal(file.sha256, sha256Hex(bytes));
      return { hash: file.fileHash, sha256: file.sha256 };
    },
  };

  const castorDownloader: Downloader = {
    name: "castor's client",
    async download(file) {
      const path = join(suite.workDir, `castor-download-${file.hash}-${Date.now()}`);
      const result = await castorClientDownload(suite.castor, file.hash, path);
      assert.equal(result.bytesWritten, file.size);
      assert.equal(result.verified, "file-hash", "a whole-file download is checked against the file hash");
      assert.equal(result.reconstructionVersion, 2);
      return readBytes(path);
    },
  };

  const uploaders = [hfXetUploader, hfJsUploader, castorUploader];
  const downloaders = [hfXetDownloader, hfJsDownloader(true), hfJsDownloader(false), castorDownloader];

  for (const uploader of uploaders) {
    describe(`uploaded with ${uploader.name}`, () => {
      for (const shape of SHAPES) {
        describe(shape.name, () => {
          const label = `${uploader.name} ${shape.name}`;
          let bytes: Uint8Array;
          let hash: string;
          let declaredSha256: string;

          before(async () => {
            bytes = shape.make(label);
            assert.equal(bytes.length, shape.size);
            ({ hash, sha256: declaredSha256 } = await uploader.upload(`${label.replace(/[^A-Za-z0-9]+/g, "-")}.bin`, bytes));
          });

          it("registers the file under its hash and its SHA-256", async () => {
            assert.match(hash, /^[0-9a-f]{64}$/);
            if (shape.size === 0) assert.equal(hash, ZERO_HASH_HEX, "an empty file's hash is 32 zero bytes");
            // A Hub maps a commit's LFS pointer (SHA-256) to the Xet file through castor's index.
            assert.deepEqual(await suite.castor.lookupBySha256(declaredSha256), { hash, size: shape.size });
          });

          for (const downloader of downloaders) {
            it(`${downloader.name} downloads it byte-exact`, async () => {
              assertSameBytes(await downloader.download({ hash, size: shape.size }), bytes, `${downloader.name} download`);
            });
          }

          const slices = slicesOf(shape.size);
          if (slices.length > 0) {
            it(`@huggingface/hub XetBlob.slice() reads ${slices.map(([s, e]) => `[${s}, ${e})`).join(", ")} byte-exact`, async () => {
              for (const [start, end] of slices) {
                for (const parallelDownloads of [true, false]) {
                  const { bytes: got, requests } = await hfJsDownload(suite.castor, { hash, size: shape.size }, { slice: [start, end], parallelDownloads });
                  checkHfJsTransfers(requests, `slice [${start}, ${end})`);
                  const reconstruction = requests.find((request) => request.url.includes("/v2/reconstructions/"));
                  assert.equal(reconstruction?.range, `bytes=${start}-${end - 1}`, "hf.js asks for exactly the slice");
                  assertSameBytes(got, bytes.subarray(start, end), `slice [${start}, ${end}) (parallel ${parallelDownloads})`);
                }
              }
            });

            it(`castor's client reads the same byte ranges byte-exact`, async () => {
              for (const [start, end] of slices) {
                const path = join(suite.workDir, `castor-range-${hash}-${start}-${end}`);
                const result = await castorClientDownload(suite.castor, hash, path, { start, end: end - 1 });
                assert.equal(result.bytesWritten, end - start);
                assertSameBytes(await readBytes(path), bytes.subarray(start, end), `castor's client range [${start}, ${end})`);
              }
            });
          }
        });
      }
    });
  }

  describe("hf.js multi-range transfers", () => {
    // X Y Z X: the second X dedups against the first, so a slice from Z to the end needs two
    // separate chunk ranges of the one xorb — one signed URL with two ranges, which hf.js fetches
    // in ONE request with a multi-range header and decodes as multipart/byteranges.
    const blocks = ["X", "Y", "Z"].map((name) => pseudoRandomBytes(`multi-range ${name}`, MIB));
    const bytes = concatBytes(blocks[0], blocks[1], blocks[2], blocks[0]);
    let hash: string;

    before(async () => {
      ({ hash } = await hfXetUploader.upload("x-y-z-x.bin", bytes));
    });

    for (const parallelDownloads of [true, false]) {
      it(`a slice across non-adjacent chunk ranges is one multipart/byteranges request (parallel ${parallelDownloads})`, async () => {
        const start = 2 * MIB + 12_345;
        const end = bytes.length - 3;
        const { bytes: got, requests } = await hfJsDownload(suite.castor, { hash, size: bytes.length }, { slice: [start, end], parallelDownloads });
        assertSameBytes(got, bytes.subarray(start, end), "multi-range slice");
        const multiRange = requests.filter((request) => request.range?.includes(","));
        assert.ok(
          multiRange.length > 0,
          `hf.js sent a multi-range request; it sent: ${requests.map((r) => `${r.method} ${new URL(r.url).pathname} ${r.range}`).join("; ")}`,
        );
        checkHfJsTransfers(requests, "multi-range slice");
      });
    }
  });
});
