/**
 * Scheduled garbage collection (CASTOR_GC_INTERVAL): runs one interval after start and again
 * after each run, reports what it removed, and a stop during a run aborts it between batches
 * and waits for it, leaving work the next run finishes.
 */
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { loadConfig } from "../../src/config.js";
import type { GcReport } from "../../src/ops/gc.js";
import { GcSchedule } from "../../src/ops/gc-schedule.js";
import { countBlobs, storeGarbageXorbs, useFreshCasServices } from "../helpers/stores.js";

describe("GcSchedule", () => {
  const cas = useFreshCasServices("gc-schedule");

  const garbage = (count: number) => storeGarbageXorbs(cas().metadata, cas().blobs, count, "garbage");
  const xorbBlobs = () => countBlobs(cas().blobs, "xorbs/");

  it("collects one interval after start, then again after each run", async () => {
    await garbage(3);
    const reports: GcReport[] = [];
    const schedule = new GcSchedule(cas().metadata, cas().blobs, {
      intervalMs: 50,
      graceMs: 0,
      onReport: (report) => reports.push(report),
      onError: (error) => assert.fail(String(error)),
    });
    schedule.start();
    assert.equal(reports.length, 0, "nothing runs at start-up");
    for (let waited = 0; reports.length < 2 && waited < 5000; waited += 20) await sleep(20);
    await schedule.stop();
    assert.ok(reports.length >= 2, `${reports.length} runs`);
    assert.equal(reports[0].removed.xorbs.objects, 3);
    assert.equal(reports[1].removed.xorbs.objects, 0);
    assert.equal(await xorbBlobs(), 0);
    assert.equal((await cas().metadata.lastMaintenanceRuns())[0].totals.xorbs, 0, "each run is recorded");
  });

  it("stops a run in progress between batches, and the next run finishes its work", async () => {
    // Three batches of the default 500: the stop lands while the first is deleting.
    await garbage(1500);
    const errors: unknown[] = [];
    const schedule = new GcSchedule(cas().metadata, cas().blobs, { intervalMs: 1, graceMs: 0, onReport: () => undefined, onError: (e) => errors.push(e) });
    schedule.start();
    while ((await xorbBlobs()) === 1500) await sleep(1);
    await schedule.stop();
    assert.equal(errors.length, 0, `an aborted run is not an error: ${String(errors[0])}`);
    const left = await xorbBlobs();
    assert.ok(left > 0, "stopped before the end");
    const next = new GcSchedule(cas().metadata, cas().blobs, { intervalMs: 1, graceMs: 0, onReport: () => undefined, onError: (e) => errors.push(e) });
    next.start();
    while ((await xorbBlobs()) > 0) await sleep(5);
    await next.stop();
    assert.deepEqual(await cas().metadata.condemned(10), []);
  });

  it("is off unless CASTOR_GC_INTERVAL is set, and reads durations", () => {
    assert.deepEqual(loadConfig({}).gc, { intervalMs: null, graceMs: 24 * 3_600_000 });
    assert.deepEqual(loadConfig({ CASTOR_GC_INTERVAL: "6h", CASTOR_GC_GRACE: "0" }).gc, { intervalMs: 6 * 3_600_000, graceMs: 0 });
    assert.throws(() => loadConfig({ CASTOR_GC_INTERVAL: "10s" }), /CASTOR_GC_INTERVAL must be a duration .*at least 60 s/);
    assert.throws(() => loadConfig({ CASTOR_GC_GRACE: "soon" }), /CASTOR_GC_GRACE must be a duration/);
  });
});
