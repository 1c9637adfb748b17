/**
 * Child process of test/hub/stats.test.ts: starts the storage-statistics sampler on the
 * embedded store in the folder argv[2] and never stops it. The process must still exit once
 * the first sample is taken — the sampler's timer keeps nothing alive.
 */
import { StorageStatsService } from "../../src/hub/stats.js";
import { StatsSampler } from "../../src/hub/stats-sampler.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";

const store = await SqliteMetadataStore.open(process.argv[2]);
new StatsSampler(new StorageStatsService(store), {
  onSample: (sample) => process.stdout.write(`sampled ${sample.day}\n`),
  onError: (error) => {
    process.stderr.write(`${String(error)}\n`);
    process.exitCode = 1;
  },
}).start();
