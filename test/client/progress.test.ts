import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Limiter, TaskPool } from "../../src/concurrency.js";
import { ProgressRenderer, formatBytes, type ProgressEvent } from "../../src/client/progress.js";

function event(bytesDone: number, bytesTotal: number | null, phase: ProgressEvent["phase"] = "reading"): ProgressEvent {
  return { operation: "upload", phase, bytesDone, bytesTotal, transferredBytes: 0, file: "a.bin" };
}

function recorder(isTTY: boolean) {
  const writes: string[] = [];
  return { writes, output: { isTTY, columns: 100, write: (text: string) => writes.push(text) } };
}

describe("formatBytes", () => {
  it("prints exact bytes below 1 KiB and one decimal above", () => {
    assert.deepEqual([0, 1, 1023, 1024, 1536, 10 * 1024 * 1024, 3 * 1024 ** 3].map(formatBytes), [
      "0 B",
      "1 B",
      "1023 B",
      "1.0 KiB",
      "1.5 KiB",
      "10.0 MiB",
      "3.0 GiB",
    ]);
  });

  it("rounds fractional counts (rates) to whole bytes below 1 KiB", () => {
    assert.equal(formatBytes(238.8059701492537), "239 B");
    assert.equal(formatBytes(0.4), "0 B");
  });
});

describe("ProgressRenderer", () => {
  it("redraws one bar in place on a TTY, at most every interval, and ends its line on finish", () => {
    const clock = { now: 0 };
    const { writes, output } = recorder(true);
    const progress = new ProgressRenderer(output, { now: () => clock.now, ttyIntervalMs: 100 });
    progress.update(event(0, 1000));
    clock.now = 50;
    progress.update(event(500, 1000)); // too soon: skipped
    clock.now = 1000;
    progress.update(event(500, 1000));
    progress.finish();
    assert.equal(writes.length, 4);
    assert.ok(writes.slice(0, 3).every((w) => w.startsWith("\r\x1b[2K")));
    assert.match(writes[1], /^\r\x1b\[2Kreading \[#{12}-{12}\] {2}50% {2}500 B \/ 1000 B {2}500 B\/s$/);
    assert.equal(writes[3], "\n");
  });

  it("prints plain lines when not on a TTY: on each phase change and every few seconds", () => {
    const clock = { now: 0 };
    const { writes, output } = recorder(false);
    const progress = new ProgressRenderer(output, { now: () => clock.now, lineIntervalMs: 2000 });
    progress.update(event(0, 4096));
    clock.now = 1000;
    progress.update(event(1024, 4096)); // skipped
    progress.update(event(1024, 4096, "uploading")); // new phase: printed
    clock.now = 3500;
    progress.update(event(4096, 4096, "uploading"));
    progress.finish();
    assert.deepEqual(writes, [
      "upload reading: a.bin: 0 B / 4.0 KiB (0%), 0 B/s\n",
      "upload uploading: a.bin: 1.0 KiB / 4.0 KiB (25%), 1.0 KiB/s\n",
      "upload uploading: a.bin: 4.0 KiB / 4.0 KiB (100%), 1.1 KiB/s\n",
    ]);
  });

  it("shows amounts without a bar when the total is unknown, and clears the bar before an error", () => {
    const { writes, output } = recorder(true);
    const progress = new ProgressRenderer(output, { now: () => 1000 });
    progress.update({ operation: "download", phase: "downloading", bytesDone: 2048, bytesTotal: null, transferredBytes: 0 });
    assert.doesNotMatch(writes[0], /\[#|%/);
    assert.match(writes[0], /downloading 2\.0 KiB/);
    progress.clear();
    assert.equal(writes.at(-1), "\r\x1b[2K");
  });
});

describe("Limiter and TaskPool", () => {
  it("never runs more than the limit at once", async () => {
    const limiter = new Limiter(2);
    let running = 0;
    let peak = 0;
    await Promise.all(
      Array.from({ length: 6 }, () =>
        limiter.run(async () => {
          running++;
          peak = Math.max(peak, running);
          // Yield, so the other tasks the limiter lets in start while this one runs.
          await new Promise(setImmediate);
          running--;
        }),
      ),
    );
    assert.equal(peak, 2);
  });

  it("holds the producer back while the pool is full and rethrows the first failure", async () => {
    const pool = new TaskPool(2);
    const release: (() => void)[] = [];
    const task = () => new Promise<void>((resolve) => release.push(resolve));
    await pool.submit(task);
    await pool.submit(task);
    let thirdAccepted = false;
    const third = pool.submit(task).then(() => {
      thirdAccepted = true;
    });
    // Only promises are involved: one turn of the event loop settles everything already settleable.
    await new Promise(setImmediate);
    assert.equal(thirdAccepted, false, "a full pool makes submit wait");
    release.shift()!();
    await third;
    assert.equal(thirdAccepted, true);
    release.forEach((r) => {
      r();
    });
    await pool.drain();

    const failing = new TaskPool(1);
    await failing.submit(async () => {
      throw new Error("boom");
    });
    await assert.rejects(
      failing.submit(async () => undefined),
      /boom/,
    );
    await assert.rejects(failing.drain(), /boom/);
  });
});
