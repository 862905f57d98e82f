// Numbers, times and durations as the console shows them. Times from the server are
// epoch seconds; they are shown in this browser's time zone, with a relative hint.

const number = new Intl.NumberFormat();
const STAMP = {year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
  hour12: false};
const stamps = new Map([[undefined, new Intl.DateTimeFormat(undefined, STAMP)]]);
const clock = new Intl.DateTimeFormat(undefined, {hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false});
const day = new Intl.DateTimeFormat(undefined, {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  hour12: false});
const relative = new Intl.RelativeTimeFormat(undefined, {numeric: "auto", style: "short"});

export function count(value) {
  return number.format(value || 0);
}

// One format for every full time on every page; `zone` (an IANA name) for a schedule's own.
export function local(seconds, zone) {
  if (!seconds) return "—";
  if (!stamps.has(zone)) stamps.set(zone, new Intl.DateTimeFormat(undefined, {...STAMP, timeZone: zone}));
  return stamps.get(zone).format(new Date(seconds * 1000));
}

export function time(seconds) {
  return seconds ? clock.format(new Date(seconds * 1000)) : "—";
}

// "3 min ago", "in 2 h": the coarsest unit that keeps a useful number.
export function ago(seconds, now) {
  if (!seconds) return "";
  const diff = seconds - (now || Date.now() / 1000);
  const size = Math.abs(diff);
  if (size < 1) return "now";
  const units = [["second", 60], ["minute", 3600], ["hour", 86400], ["day", 86400 * 30], ["month", 86400 * 365]];
  let divisor = 1;
  for (const [unit, limit] of units) {
    if (size < limit) return relative.format(Math.round(diff / divisor), unit);
    divisor = limit;
  }
  return relative.format(Math.round(diff / (86400 * 365)), "year");
}

// A local time with its relative hint: "2026-11-23 14:03:21 (3 min ago)".
// Today: the time; another day: the date and the time without seconds.
export function short(seconds) {
  if (!seconds) return "—";
  const date = new Date(seconds * 1000);
  if (date.toDateString() === new Date().toDateString()) return clock.format(date);
  return day.format(date);
}

export function when(seconds) {
  return seconds ? `${local(seconds)} (${ago(seconds)})` : "—";
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.abs(seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 >= 1 ? ` ${Math.round(s % 60)} s` : ""}`;
  if (s < 86400) return `${Math.floor(s / 3600)} h${s % 3600 >= 60 ? ` ${Math.floor((s % 3600) / 60)} min` : ""}`;
  return `${Math.floor(s / 86400)} d${s % 86400 >= 3600 ? ` ${Math.floor((s % 86400) / 3600)} h` : ""}`;
}

// For a card: "1m 44s", "3h 5m", "8.2s".
export function compact(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${Math.round(seconds % 60)}s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86400)}d ${Math.floor((seconds % 86400) / 3600)}h`;
}

export function firstLine(text, max) {
  if (!text) return "";
  const lines = String(text).trim().split("\n");
  // A traceback's last line names the exception: show that one.
  const line = lines[0].startsWith("Traceback") ? lines[lines.length - 1] : lines[0];
  return line.length > (max || 140) ? line.slice(0, (max || 140) - 1) + "…" : line;
}

// The end of an id: ids made in the same millisecond share their start, never their end.
export function shortId(id) {
  return id && id.length > 10 ? `…${id.slice(-8)}` : id;
}

export const STATES = ["blocked", "scheduled", "queued", "active", "succeeded", "dead", "cancelled"];
// The states a list filters by: `retrying` is the scheduled jobs that failed before.
export const FILTER_STATES = ["blocked", "scheduled", "retrying", "queued", "active", "succeeded", "dead", "cancelled"];
// The job list's state filter also has `waiting`: the scheduled jobs in a durable wait
// (job.wait_for). No card counts them: no store keeps that count apart from scheduled.
export const LIST_STATES = ["blocked", "scheduled", "retrying", "waiting", "queued", "active", "succeeded", "dead",
  "cancelled"];
