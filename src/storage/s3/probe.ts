/**
 * What the S3 store checks before it serves: that the bucket answers, and what the store behind
 * it can do. Put-if-absent needs `If-None-Match: *` honoured on `PutObject` (a store that ignores
 * it is refused). Large bodies go up in parts only where it is also honoured on
 * `CompleteMultipartUpload`: AWS S3 does; Ceph RGW (checked on 16.2) ignores it there and on
 * `CopyObject`, silently replacing an existing object, so against it every body goes up as one
 * conditional `PutObject`, which S3 allows up to 5 GiB (castor's objects are ≤ ~65 MiB).
 * The probe writes a few short-lived objects under `<prefix>castor-probe/` and removes them
 * again; `sweepProbeObjects` clears any a crash left behind.
 */
import { randomUUID } from "node:crypto";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  HeadBucketCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { describeS3Error, describeTarget, httpStatusOf, isPreconditionFailed, type S3Target } from "./client.js";

/** Folder under the prefix holding the probe's objects; never a blob key. */
export const PROBE_FOLDER = "castor-probe/";

/** Fails with a message naming the setting to fix when the bucket is missing or access is denied. */
export async function checkBucket(target: S3Target): Promise<void> {
  try {
    await target.client.send(new HeadBucketCommand({ Bucket: target.bucket }));
  } catch (err) {
    const status = httpStatusOf(err);
    if (status === 404) {
      throw new Error(`S3 ${describeTarget(target)} does not exist: create it, or set CASTOR_S3_BUCKET to an existing bucket`, { cause: err });
    }
    if (status === 403 || status === 401) {
      throw new Error(`S3 ${describeTarget(target)} refused access: check CASTOR_S3_ACCESS_KEY_ID / CASTOR_S3_SECRET_ACCESS_KEY and the bucket policy`, {
        cause: err,
      });
    }
    throw describeS3Error("HeadBucket", target.bucket, err);
  }
}

const probeCache = new Map<string, Promise<boolean>>();

/**
 * Whether the store honours `If-None-Match: *` on multipart completion, after making sure it
 * does on `PutObject`. Found once per process for each store endpoint and bucket: it is a
 * property of the store, not of a prefix, and several stores on one bucket (tests open one per
 * case) need not repeat its requests. A failed probe is not remembered.
 */
export function probeConditionalMultipart(target: S3Target, region: string): Promise<boolean> {
  const cacheKey = `${target.endpoint ?? `aws:${region}`}|${target.bucket}`;
  let answer = probeCache.get(cacheKey);
  if (answer === undefined) {
    answer = probeConditionalWrites(target);
    probeCache.set(cacheKey, answer);
    answer.catch(() => probeCache.delete(cacheKey));
  }
  return answer;
}

async function probeConditionalWrites(target: S3Target): Promise<boolean> {
  const { client, bucket } = target;
  const probeKey = `${target.prefix}${PROBE_FOLDER}${randomUUID()}`;
  const put = () => client.send(new PutObjectCommand({ Bucket: bucket, Key: probeKey, Body: Buffer.from("probe"), IfNoneMatch: "*" }));
  try {
    await put();
    try {
      await put();
    } catch (err) {
      if (!isPreconditionFailed(err)) throw describeS3Error("PutObject (probe)", probeKey, err);
      return await probeMultipartCompletion(target, probeKey);
    }
    throw new Error(
      `S3 ${describeTarget(target)} ignores "If-None-Match: *" on PutObject, so castor cannot store each object once (put-if-absent): use a store with conditional writes (AWS S3, Ceph RGW, MinIO)`,
    );
  } finally {
    await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: probeKey })).catch(() => undefined);
  }
}

/** Completes a multipart upload over the existing `probeKey`: refused (412) means the condition is honoured. */
async function probeMultipartCompletion(target: S3Target, probeKey: string): Promise<boolean> {
  const { client, bucket } = target;
  const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: probeKey }));
  try {
    const { ETag } = await client.send(new UploadPartCommand({ Bucket: bucket, Key: probeKey, UploadId, PartNumber: 1, Body: Buffer.from("multipart probe") }));
    await client.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: probeKey,
        UploadId,
        IfNoneMatch: "*",
        MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
      }),
    );
    return false; // completed over an existing object: the condition was ignored
  } catch (err) {
    if (isPreconditionFailed(err)) return true;
    if (httpStatusOf(err) === 501 || httpStatusOf(err) === 400) return false;
    throw describeS3Error("CompleteMultipartUpload (probe)", probeKey, err);
  } finally {
    await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: probeKey, UploadId })).catch(() => undefined);
  }
}

/** Deletes probe objects last modified before `cutoff` (ms since the epoch); returns how many. */
export async function sweepProbeObjects(target: S3Target, cutoff: number): Promise<number> {
  const { client, bucket } = target;
  const probePrefix = target.prefix + PROBE_FOLDER;
  let removed = 0;
  let continuationToken: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: probePrefix, ContinuationToken: continuationToken }));
    for (const entry of page.Contents ?? []) {
      if (!entry.Key || (entry.LastModified !== undefined && entry.LastModified.getTime() > cutoff)) continue;
      await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: entry.Key }));
      removed++;
    }
    continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (continuationToken !== undefined);
  return removed;
}
