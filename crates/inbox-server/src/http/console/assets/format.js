// How numbers, times and ids are shown: compact, and the exact value in a tooltip.

const numberFormat = new Intl.NumberFormat("en-US");

export function count(value) {
  return value === undefined || value === null ? "—" : numberFormat.format(value);
}

/** "1 event", "3 events": `n` counted, with the word that fits. */
export function plural(n, one, many = `${one}s`) {
  return `${count(n)} ${n === 1 ? one : many}`;
}

/** 42 s, 3 m 5 s, 2 h 10 m, 4 d 3 h. */
export function duration(seconds) {
  if (seconds === undefined || seconds === null) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** Seconds since an RFC 3339 time (null when absent or unreadable). */
export function secondsSince(utc) {
  if (!utc) return null;
  const at = Date.parse(utc);
  return Number.isNaN(at) ? null : Math.max(0, (Date.now() - at) / 1000);
}

/** "3 m 5 s ago" for an RFC 3339 time. */
export function ago(utc) {
  const seconds = secondsSince(utc);
  return seconds === null ? "—" : `${duration(seconds)} ago`;
}

/** 2025-01-31 14:05:09 in the browser's time zone. */
export function time(utc) {
  if (!utc) return "—";
  const at = new Date(utc);
  if (Number.isNaN(at.getTime())) return utc;
  const pad = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
}

/** 14:05 for chart axes. */
export function clock(utc) {
  const at = new Date(utc);
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

/** The first and last characters of a long id (UUIDv7s share their leading time bits). */
export function shortId(id) {
  if (!id || id.length <= 14) return id ?? "—";
  return `${id.slice(0, 8)}…${id.slice(-4)}`;
}

export const STATE_LABELS = {
  available: "available",
  retry_scheduled: "retry scheduled",
  claimed: "claimed",
  acked: "acked",
  dead_letter: "dead letter",
  quarantined: "quarantined",
  expired: "expired",
};
