/** Parsing of token expiry given on the command line: a duration from now or a date. */
import { durationMs } from "../duration.js";
import { HubError } from "./errors.js";
import { quote } from "./names.js";

/** Far enough for any real use, near enough that the Date stays valid and the number exact. */
export const MAX_TOKEN_LIFETIME_MS = 100 * 365 * 86_400_000;
const ISO_DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
const ISO_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})?$/i;

const FORMS = `a duration (30d, 12h, 45m, 3600s) or an ISO date (2030-01-31, or 2030-01-31T12:00:00Z with a zone)`;

/**
 * `"30d"`, `"12h"`, `"45m"`, `"3600s"` (from `now`), `"2030-01-31"` (midnight UTC) or an ISO
 * date-time with `Z` or an offset. The result must lie after `now` and within 100 years;
 * HubError 400 otherwise.
 */
export function parseExpires(text: string, now: Date): Date {
  const value = text.trim();
  let at: Date;
  const duration = durationMs(value);
  if (duration !== null) {
    if (duration === 0) throw new HubError(400, `expiry ${quote(text)} must be longer than zero`);
    if (duration > MAX_TOKEN_LIFETIME_MS) throw tooFar(text);
    at = new Date(now.getTime() + duration);
  } else {
    at = parseIsoDate(value, text);
  }
  if (at.getTime() <= now.getTime()) {
    throw new HubError(400, `expiry ${quote(text)} is not in the future (it is ${at.toISOString()})`);
  }
  if (at.getTime() - now.getTime() > MAX_TOKEN_LIFETIME_MS) throw tooFar(text);
  return at;
}

function parseIsoDate(value: string, text: string): Date {
  const date = ISO_DATE.exec(value);
  const dateTime = date ? null : ISO_DATE_TIME.exec(value);
  const m = date ?? dateTime;
  if (!m) throw new HubError(400, `expiry must be ${FORMS}; got ${quote(text)}`);
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  // Date.parse rolls 2030-02-30 over to March 2nd instead of refusing it, so check the calendar here.
  const daysInMonth = month >= 1 && month <= 12 ? new Date(Date.UTC(year, month, 0)).getUTCDate() : 0;
  if (day < 1 || day > daysInMonth) throw new HubError(400, `expiry ${quote(text)} is not a calendar date`);
  if (dateTime) {
    const [hour, minute, second] = [Number(dateTime[4]), Number(dateTime[5]), Number(dateTime[6] ?? 0)];
    if (hour > 23 || minute > 59 || second > 59) throw new HubError(400, `expiry ${quote(text)} is not a valid time of day`);
    // Without a zone the instant would depend on the machine's local time zone.
    if (dateTime[7] === undefined) {
      throw new HubError(400, `expiry ${quote(text)} needs a time zone: end it with Z (UTC) or an offset such as +02:00`);
    }
    const zone = dateTime[7];
    if (zone.length === 6 && (Number(zone.slice(1, 3)) > 23 || Number(zone.slice(4, 6)) > 59)) {
      throw new HubError(400, `expiry ${quote(text)} has an invalid time zone offset`);
    }
  }
  const at = new Date(date ? `${value}T00:00:00Z` : value.toUpperCase());
  if (Number.isNaN(at.getTime())) throw new HubError(400, `expiry must be ${FORMS}; got ${quote(text)}`);
  return at;
}

function tooFar(text: string): HubError {
  return new HubError(400, `expiry ${quote(text)} is more than 100 years away: omit --expires for a token that never expires`);
}
