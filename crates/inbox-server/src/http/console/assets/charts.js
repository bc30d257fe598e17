// Small SVG charts drawn by the page from `/v1/admin/activity` minutes: grouped bars (events
// published and acknowledged per minute) and an area (depth over the hour). Colours come from
// the stylesheet by class; every bar and point has a native tooltip.

import { el, svg } from "./dom.js";
import { clock, count } from "./format.js";

const WIDTH = 720;
const HEIGHT = 200;
const MARGIN = { top: 10, right: 12, bottom: 24, left: 44 };

/** The smallest 1/2/5 x 10^n at or above `value` (at least 1). */
function niceMax(value) {
  if (value <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function frame(title, maximum, labels) {
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart", role: "img", "aria-label": title });
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const y = (value) => MARGIN.top + plotHeight - (value / maximum) * plotHeight;
  for (let i = 0; i <= 4; i++) {
    const value = (maximum / 4) * i;
    root.append(
      svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(value), y2: y(value), class: i === 0 ? "axis" : "grid" }),
      svg("text", { x: MARGIN.left - 6, y: y(value) + 4, class: "tick", "text-anchor": "end" }, count(Math.round(value))),
    );
  }
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const band = plotWidth / Math.max(labels.length, 1);
  labels.forEach((label, i) => {
    const lastOrTen = i === labels.length - 1 || new Date(label).getMinutes() % 10 === 0;
    if (!lastOrTen) return;
    root.append(svg("text", { x: MARGIN.left + band * (i + 0.5), y: HEIGHT - 6, class: "tick", "text-anchor": "middle" }, clock(label)));
  });
  return { root, y, band };
}

/** Grouped bars, one group per minute: `series` = [{ name, className, values }]. */
export function barChart({ title, labels, series }) {
  const maximum = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const { root, y, band } = frame(title, maximum, labels);
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
export function areaChart({ title, labels, series }) {
  const maximum = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const { root, y, band } = frame(title, maximum, labels);
  for (const s of series) {
    const points = s.values.map((value, i) => [MARGIN.left + band * (i + 0.5), y(value)]);
    if (points.length === 0) continue;
    const line = points.map(([px, py], i) => `${i === 0 ? "M" : "L"}${px.toFixed(1)},${py.toFixed(1)}`).join(" ");
    const area = `${line} L${points.at(-1)[0].toFixed(1)},${y(0)} L${points[0][0].toFixed(1)},${y(0)} Z`;
    root.append(svg("path", { d: area, class: `area ${s.className}` }), svg("path", { d: line, class: `line ${s.className}` }));
    points.forEach(([px, py], i) => {
      root.append(svg("circle", { cx: px, cy: py, r: 2.2, class: `point ${s.className}` },
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
