/**
 * castor's pure protocol layer: no I/O, only codecs and hashes. Exported as `castor/format`.
 */
export * from "./errors.js";
export * from "./hash.js";
export * from "./compression.js";
export * from "./lz4.js";
export * from "./bg4.js";
export * from "./xorb.js";
export * from "./shard.js";
export * from "./shard-writer.js";
export * from "./chunker.js";
export * from "./ranges.js";
export * from "./reconstruction.js";
export * from "./repo.js";
