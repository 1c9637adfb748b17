/**
 * A line chart of logical and stored bytes over the daily samples, drawn as SVG by hand: two
 * lines and their axes need no chart library. Screen readers get its summary as the image's
 * label; the numbers themselves are in the table next to it.
 */
import { formatBytes } from "./format.js";

export interface Point {
  day: string;
  logicalBytes: number;
  storedBytes: number;
}

const WIDTH = 720;
const HEIGHT = 240;
const PAD = { left: 72, right: 16, top: 12, bottom: 36 };

export function BytesChart({ points }: { points: Point[] }) {
  if (points.length === 0) return <p class="muted">No daily samples yet: castor serve takes one each day.</p>;
  const top = Math.max(1, ...points.map((point) => Math.max(point.logicalBytes, point.storedBytes)));
  const innerW = WIDTH - PAD.left - PAD.right;
  const innerH = HEIGHT - PAD.top - PAD.bottom;
  const x = (index: number) => PAD.left + (points.length === 1 ? innerW / 2 : (index * innerW) / (points.length - 1));
  const y = (bytes: number) => PAD.top + innerH - (bytes / top) * innerH;
  const line = (field: "logicalBytes" | "storedBytes") => points.map((point, index) => `${index === 0 ? "M" : "L"}${x(index)},${y(point[field])}`).join(" ");
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((share) => share * top);
  // At most ~8 day labels, evenly spread.
  const every = Math.max(1, Math.ceil(points.length / 8));
  const last = points[points.length - 1];
  const label = `Logical and stored bytes over time (${points.length} daily sample${points.length === 1 ? "" : "s"}); on ${last.day}: ${formatBytes(last.logicalBytes)} logical, ${formatBytes(last.storedBytes)} stored.`;
  return (
    <figure class="chart">
      <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={label} data-testid="history-chart">
        {ticks.map((bytes) => (
          <g key={bytes}>
            <line x1={PAD.left} x2={WIDTH - PAD.right} y1={y(bytes)} y2={y(bytes)} class="grid" />
            <text x={PAD.left - 8} y={y(bytes) + 4} text-anchor="end" class="tick">
              {formatBytes(Math.round(bytes))}
            </text>
          </g>
        ))}
        {points.map((point, index) =>
          index % every === 0 || index === points.length - 1 ? (
            <text key={point.day} x={x(index)} y={HEIGHT - 12} text-anchor="middle" class="tick">
              {/^\d{4}-/.test(point.day) ? point.day.slice(5) : point.day}
            </text>
          ) : null,
        )}
        <path d={line("logicalBytes")} class="series logical" />
        <path d={line("storedBytes")} class="series stored" />
        {points.map((point, index) => (
          <g key={`dot-${point.day}`}>
            <circle cx={x(index)} cy={y(point.logicalBytes)} r="3.5" class="dot logical" />
            <circle cx={x(index)} cy={y(point.storedBytes)} r="3.5" class="dot stored" />
          </g>
        ))}
      </svg>
      <figcaption>
        <span class="key logical" aria-hidden="true" /> logical bytes <span class="key stored" aria-hidden="true" /> stored bytes
      </figcaption>
    </figure>
  );
}
