import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { perWorkerConfig, workerShares } from "../../src/cluster/limits.js";
import { loadConfig } from "../../src/config.js";

describe("perWorkerConfig", () => {
  it("splits the node-wide limits evenly over the workers, rounding up, and keeps the rest", () => {
    const config = loadConfig({
      CASTOR_WORKERS: "3",
      CASTOR_MAX_CONNECTIONS: "1000",
      CASTOR_MAX_CONCURRENT_UPLOADS: "64",
      CASTOR_HUB_RATE_LIMIT: "6000",
      CASTOR_AUTH_FAILURE_LIMIT: "10",
      CASTOR_BODY_TIMEOUT: "7",
    });
    const each = perWorkerConfig(config);
    assert.equal(each.limits.maxConnections, 334);
    assert.equal(each.maxConcurrentUploads, 22);
    assert.deepEqual(each.hubLimits, { requestsPerMinute: 2000, authFailuresPerMinute: 4 });
    assert.equal(each.limits.bodyTimeoutMs, 7000, "timeouts are per request: unchanged");
    assert.equal(each.workers, 3);
    assert.deepEqual(workerShares(config), { maxConnections: 334, maxConcurrentUploads: 22, hubRateLimit: 2000, authFailureLimit: 4 });
  });

  it("leaves a limit that is off off, gives every worker at least 1, and changes nothing for one worker", () => {
    const off = perWorkerConfig(loadConfig({ CASTOR_WORKERS: "4", CASTOR_HUB_RATE_LIMIT: "off", CASTOR_MAX_CONCURRENT_UPLOADS: "1" }));
    assert.equal(off.hubLimits.requestsPerMinute, null);
    assert.equal(off.maxConcurrentUploads, 1);
    const single = loadConfig({ CASTOR_WORKERS: "1" });
    assert.deepEqual(perWorkerConfig(single), single);
  });
});
