import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { ShardAdmission, ShardAdmissionError, type Release } from "../../src/cas/shard-admission.js";

const LONG = 60_000;

function admission(memoryBytes: number, chunkReferences = 1_000_000, maxWaitMs = LONG): ShardAdmission {
  return new ShardAdmission({ budget: { memoryBytes, chunkReferences }, maxWaitMs });
}

/** Whether `promise` has settled after the event loop ran once more. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  await sleep(1);
  return done;
}

describe("ShardAdmission", () => {
  it("admits charges while they fit, and makes the next one wait until enough is given back", async () => {
    const gate = admission(100);
    const first = await gate.admitMemory(60, gate.deadline());
    const second = await gate.admitMemory(40, gate.deadline());
    assert.equal(gate.usage.memoryBytes, 100);
    const third = gate.admitMemory(30, gate.deadline());
    assert.equal(await settled(third), false, "over budget: it waits");
    assert.equal(gate.usage.waiting, 1);
    first();
    first(); // giving back twice changes nothing
    const release = await third;
    assert.deepEqual(gate.usage, { memoryBytes: 70, chunkReferences: 0, waiting: 0 });
    second();
    release();
    assert.equal(gate.usage.memoryBytes, 0);
  });

  it("serves waiters in order: a small charge does not overtake a large one waiting", async () => {
    const gate = admission(100);
    const held = await gate.admitMemory(80, gate.deadline());
    const order: string[] = [];
    const inOrder = (name: string) => (release: Release) => {
      order.push(name);
      return release;
    };
    const large = gate.admitMemory(90, gate.deadline()).then(inOrder("large"));
    const small = gate.admitMemory(10, gate.deadline()).then(inOrder("small"));
    assert.equal(await settled(small), false, "the small one would fit, but the large one is first in line");
    held();
    const releaseLarge = await large;
    assert.equal(await settled(small), true, "the small one fits beside it");
    releaseLarge();
    (await small)();
    assert.deepEqual(order, ["large", "small"]);
  });

  it("runs a charge larger than the whole budget alone, once nothing else is held", async () => {
    const gate = admission(100);
    const held = await gate.admitMemory(1, gate.deadline());
    const huge = gate.admitMemory(500, gate.deadline());
    assert.equal(await settled(huge), false);
    held();
    const release = await huge;
    assert.equal(gate.usage.memoryBytes, 500);
    const next = gate.admitMemory(1, gate.deadline());
    assert.equal(await settled(next), false, "nothing runs beside it");
    release();
    (await next)();
  });

  it("refuses a charge that did not get its turn by its deadline, and serves those behind it", async () => {
    const gate = admission(100, 1_000_000, 50);
    const held = await gate.admitMemory(90, gate.deadline());
    const refused = gate.admitMemory(50, gate.deadline());
    const behind = gate.admitMemory(10, performance.now() + LONG);
    await assert.rejects(refused, (error: unknown) => {
      assert.ok(error instanceof ShardAdmissionError);
      assert.equal(error.retryAfterSeconds, 10);
      assert.match(error.message, /memory: 90 of 100 in use.*did not get its turn in time: upload it again in 10 s/);
      return true;
    });
    // The refused one was first in line; the one behind it fits and runs at once.
    (await behind)();
    held();
    assert.deepEqual(gate.usage, { memoryBytes: 0, chunkReferences: 0, waiting: 0 });
  });

  it("lets a waiter leave when its signal aborts (the client went away)", async () => {
    const gate = admission(100);
    const held = await gate.admitMemory(100, gate.deadline());
    const controller = new AbortController();
    const waiting = gate.admitMemory(10, gate.deadline(), controller.signal);
    controller.abort(new Error("client gone"));
    await assert.rejects(waiting, /client gone/);
    assert.equal(gate.usage.waiting, 0);
    held();
    await assert.rejects(gate.admitMemory(1, gate.deadline(), controller.signal), /client gone/, "an aborted signal is not admitted");
    assert.equal(gate.usage.memoryBytes, 0);
  });

  it("keeps chunk references apart from memory: each part has its own room and queue", async () => {
    const gate = admission(100, 1000);
    const releases: Release[] = [await gate.admitMemory(100, gate.deadline()), await gate.admitWork(600, gate.deadline())];
    const work = gate.admitWork(500, gate.deadline());
    assert.equal(await settled(work), false, "600 + 500 references do not fit in 1,000");
    releases[0]();
    assert.equal(await settled(work), false, "memory given back makes no room for references");
    releases[1]();
    (await work)();
    assert.deepEqual(gate.usage, { memoryBytes: 0, chunkReferences: 0, waiting: 0 });
  });
});
