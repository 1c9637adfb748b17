/** How numbers and dates read on the pages. */

const UNITS = ["B", "KB", "MB", "GB", "TB", "PB"];

/** Decimal units, as disks and the Hugging Face Hub count them: 1.5 MB is 1,500,000 bytes. */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < UNITS.length - 1) {
    value /= 1000;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 2 : value < 100 ? 1 : 0)} ${UNITS[unit]}`;
}

export function formatRatio(ratio: number | null): string {
  return ratio === null ? "–" : `${ratio.toFixed(2)}×`;
}

export function formatDate(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : `${date.toISOString().replace("T", " ").slice(0, 16)} UTC`;
}

export function shortId(oid: string): string {
  return oid.slice(0, 8);
}

export function percent(part: number, whole: number): string {
  return whole === 0 ? "0%" : `${Math.round((100 * part) / whole)}%`;
}
