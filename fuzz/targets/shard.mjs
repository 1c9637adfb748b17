// The shard parsers (src/format/shard.ts): the upload form (stepped, as /v1/shards and
// /v2/shards run it) and the full form with footer. Expected: FormatError only.
import { FormatError, parseFullShard, parseUploadShard, parseUploadShardInSteps } from "../../dist/format/index.js";
import { expected } from "./expect.mjs";

export function fuzz(data) {
  let stepped;
  try {
    const steps = parseUploadShardInSteps(data);
    let next = steps.next();
    while (!next.done) next = steps.next();
    stepped = next.value;
  } catch (error) {
    expected(error, [FormatError]);
  }
  let whole;
  try {
    whole = parseUploadShard(data);
  } catch (error) {
    expected(error, [FormatError]);
  }
  if ((stepped === undefined) !== (whole === undefined)) throw new Error("stepped and one-shot shard parsing disagree");
  try {
    parseFullShard(data);
  } catch (error) {
    expected(error, [FormatError]);
  }
}
