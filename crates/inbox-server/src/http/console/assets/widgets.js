// Pieces every view uses: the page heading, state badges, links to an agent's inbox and to an
// event, a row of filter buttons, and a refusal shown as the server worded it.

import { el } from "./dom.js";
import { STATE_LABELS, shortId } from "./format.js";

/** The view's heading: a title, an optional line under it, and actions on the right. */
export function pageHeader(title, { subtitle, actions = [] } = {}) {
  return el("div", { class: "page-header" },
    el("div", {}, el("h1", {}, title), subtitle ? el("p", { class: "subtitle" }, subtitle) : null),
    el("div", { class: "actions" }, actions));
}

export function stateBadge(state) {
  return el("span", { class: `badge state-${state}` }, STATE_LABELS[state] ?? state ?? "—");
}

export function agentHref(agent) {
  return `#/inbox/${encodeURIComponent(agent)}`;
}

export function eventHref(agent, eventId) {
  return `#/event/${encodeURIComponent(agent)}/${encodeURIComponent(eventId)}`;
}

export function agentLink(agent) {
  return el("a", { href: agentHref(agent), class: "agent" }, agent);
}

export function eventLink(agent, eventId) {
  return el("a", { href: eventHref(agent, eventId), class: "mono", title: eventId }, shortId(eventId));
}

/** Segmented buttons; `onPick(value)` when one is pressed. */
export function filterBar(label, options, current, onPick) {
  return el("div", { class: "filters", role: "group", "aria-label": label },
    options.map(([value, text]) => el("button", {
      type: "button",
      class: value === current ? "filter active" : "filter",
      "aria-pressed": value === current ? "true" : "false",
      "data-filter": value,
      on: { click: () => onPick(value) },
    }, text)));
}

/** A refusal or failure, in the server's words with its code. */
export function errorBox(error) {
  const code = error?.code ? el("code", {}, error.code) : null;
  return el("div", { class: "problem", role: "alert" }, code, " ", error?.message ?? String(error));
}

/** Key/value rows. `rows`: [[label, value-node-or-text], ...]. */
export function details(rows) {
  return el("dl", { class: "details" }, rows.flatMap(([label, value]) => [el("dt", {}, label), el("dd", {}, value ?? "—")]));
}

export function button(text, onClick, { kind = "", disabled = false, action } = {}) {
  return el("button", { type: "button", class: `button ${kind}`.trim(), disabled, "data-action": action, on: { click: onClick } }, text);
}
