// Small SVG charts drawn by the page from `/v1/admin/activity` minutes: grouped bars (events
// published and acknowledged per minute) and an area (depth over the hour). Colours come from
// the stylesheet by class; every bar and point has a native tooltip. Drawn at the pixel width
// the page measured, so labels keep their size.

import { el, svg } from "./dom.js";
import { clock, count } from "./format.js";

const HEIGHT = 180;
const MARGIN = { top: 10, right: 12, bottom: 22, left: 44 };
const TICKS = 4;

/** A whole 1/2/5 x 10^n step so that TICKS steps reach `value`; the axis ends at TICKS steps. */
function niceMax(value) {
  const raw = Math.max(value, 1) / TICKS;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw && Number.isInteger(s)) ?? Math.ceil(raw);
  return step * TICKS;
}

/** Axes for `labels` (minute starts) in a chart `width` pixels wide (drawn 1:1, so text keeps
 * its size whatever the screen). */
function frame(title, maximum, labels, width) {
  const root = svg("svg", { viewBox: `0 0 ${width} ${HEIGHT}`, width, height: HEIGHT, class: "chart", role: "img", "aria-label": title });
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const y = (value) => MARGIN.top + plotHeight - (value / maximum) * plotHeight;
  for (let i = 0; i <= TICKS; i++) {
    const value = (maximum / TICKS) * i;
    root.append(
      svg("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: y(value), y2: y(value), class: i === 0 ? "axis" : "grid" }),
      svg("text", { x: MARGIN.left - 6, y: y(value) + 3.5, class: "tick", "text-anchor": "end" }, count(value)),
    );
  }
  const plotWidth = width - MARGIN.left - MARGIN.right;
  const band = plotWidth / Math.max(labels.length, 1);
  // Every ten minutes, and the current minute unless a ten-minute label is too close to it.
  const marked = labels.map((label, i) => (new Date(label).getMinutes() % 10 === 0 ? i : -1)).filter((i) => i >= 0);
  const last = labels.length - 1;
  if (last >= 0 && !marked.some((i) => (last - i) * band < 44)) marked.push(last);
  for (const i of marked) {
    root.append(svg("text", { x: MARGIN.left + band * (i + 0.5), y: HEIGHT - 6, class: "tick", "text-anchor": "middle" }, clock(labels[i])));
  }
  return { root, y, band };
}

/** Grouped bars, one group per minute: `series` = [{ name, className, values }]. */
export function barChart({ title, labels, series, width }) {
  const maximum = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const { root, y, band } = frame(title, maximum, labels, width);
  const barWidth = Math.max(1, (band * 0.8) / series.length);
  series.forEach((s, k) => {
    s.values.forEach((value, i) => {
      if (value <= 0) return;
      const x = MARGIN.left + band * i + band * 0.1 + barWidth * k;
      root.append(svg("rect", { x, y: y(value), width: barWidth, height: y(0) - y(value), class: `bar ${s.className}` },
        svg("title", {}, `${clock(labels[i])} · ${s.name}: ${count(value)}`)));
    });
  });
  return figure(title, root, series);
}

/** One series as a line over a shaded area. */
export function areaChart({ title, labels, series, width }) {
  const maximum = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const { root, y, band } = frame(title, maximum, labels, width);
  for (const s of series) {
    const points = s.values.map((value, i) => [MARGIN.left + band * (i + 0.5), y(value)]);
    if (points.length === 0) continue;
    const line = points.map(([px, py], i) => `${i === 0 ? "M" : "L"}${px.toFixed(1)},${py.toFixed(1)}`).join(" ");
    const area = `${line} L${points.at(-1)[0].toFixed(1)},${y(0)} L${points[0][0].toFixed(1)},${y(0)} Z`;
    root.append(svg("path", { d: area, class: `area ${s.className}` }), svg("path", { d: line, class: `line ${s.className}` }));
    points.forEach(([px, py], i) => {
      // Shown on hover only: a dot per minute would crowd the line.
      root.append(svg("circle", { cx: px, cy: py, r: 3.5, class: `point ${s.className}` },
        svg("title", {}, `${clock(labels[i])} · ${s.name}: ${count(s.values[i])}`)));
    });
  }
  return figure(title, root, series);
}

function figure(title, chart, series) {
  return el("figure", { class: "chart-box" },
    el("figcaption", {}, el("span", { class: "chart-title" }, title),
      el("span", { class: "legend" }, series.map((s) => el("span", { class: `key ${s.className}` }, s.name)))),
    chart);
}
