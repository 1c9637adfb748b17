/** Durations as people write them on command lines and in settings: `30d`, `12h`, `45m`, `90s`, `0`. */

const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** At most 12 digits, so the product stays an exact integer. */
const DURATION = /^(\d{1,12})([smhd])$/i;

/** Milliseconds of `text` (a bare `0` allowed); null for any other text. */
export function durationMs(text: string): number | null {
  const value = text.trim();
  if (value === "0") return 0;
  const duration = DURATION.exec(value);
  return duration === null ? null : Number(duration[1]) * UNIT_MS[duration[2].toLowerCase() as keyof typeof UNIT_MS];
}
