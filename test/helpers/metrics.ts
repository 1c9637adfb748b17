/** Reading a castor's `GET /metrics` in tests: its metric families, a counter's value, the refusal counts. */
import assert from "node:assert/strict";
import parsePrometheusTextFormat, { type PrometheusFamily } from "parse-prometheus-text-format";
import type { RefusalReason } from "../../src/metrics.js";

/** The metric families `GET {url}/metrics` answers, by name (the scrape must succeed). */
export async function families(url: string, headers: Record<string, string> = {}): Promise<Map<string, PrometheusFamily>> {
  const response = await fetch(`${url}/metrics`, { headers });
  assert.equal(response.status, 200);
  return new Map(parsePrometheusTextFormat(await response.text()).map((family) => [family.name, family]));
}

/** A counter's value for `labels` (0 when that label set has not been counted yet). */
export function counterValue(family: PrometheusFamily | undefined, labels: Record<string, string>): number {
  assert.ok(family, "metric family present");
  const sample = family.metrics.find((m) => Object.entries(labels).every(([key, value]) => m.labels?.[key] === value));
  return Number(sample?.value ?? 0);
}

/** `castor_refusals_total{reason}` of the castor at `url`. */
export async function refusals(url: string, reason: RefusalReason): Promise<number> {
  return counterValue((await families(url)).get("castor_refusals_total"), { reason });
}
