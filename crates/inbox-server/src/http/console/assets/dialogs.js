// Modal questions before an action: a confirmation (purge cannot be undone), and the reason
// and class of a quarantine. Built on <dialog>, so focus and Escape behave as the browser's.

import { el } from "./dom.js";

/** Asks to confirm; resolves true only when the operator presses the confirming button. */
export function confirmAction({ title, message, confirm, danger = false }) {
  return new Promise((resolve) => {
    const dialog = el("dialog", { class: "dialog", "aria-labelledby": "dialog-title" });
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      el("h2", { id: "dialog-title" }, title),
      el("p", {}, message),
      el("div", { class: "dialog-actions" },
        el("button", { type: "button", class: "button", "data-action": "cancel", on: { click: () => done(false) } }, "Cancel"),
        el("button", {
          type: "button",
          class: danger ? "button danger" : "button primary",
          "data-action": "confirm",
          on: { click: () => done(true) },
        }, confirm)),
    );
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      done(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector("[data-action=cancel]").focus();
  });
}

export const QUARANTINE_CLASSES = ["prompt_injection", "malformed_payload", "bad_signature", "policy", "other"];

/** Asks why events are quarantined; resolves { reason, class } or null when cancelled. */
export function askQuarantine(count) {
  return new Promise((resolve) => {
    const reason = el("input", { id: "quarantine-reason", name: "reason", required: true, maxlength: 200, autocomplete: "off" });
    const kind = el("select", { id: "quarantine-class", name: "class" },
      QUARANTINE_CLASSES.map((c) => el("option", { value: c, selected: c === "other" }, c.replace("_", " "))));
    const error = el("p", { class: "error", hidden: true });
    const form = el("form", { method: "dialog" },
      el("h2", { id: "dialog-title" }, `Quarantine ${count === 1 ? "this event" : `${count} events`}`),
      el("p", {}, "Quarantined events are never delivered or retried until an operator releases them."),
      el("label", { for: "quarantine-reason" }, "Reason (kept in the event's history)"),
      reason,
      el("label", { for: "quarantine-class" }, "Class"),
      kind,
      error,
      el("div", { class: "dialog-actions" },
        el("button", { type: "button", class: "button", "data-action": "cancel", on: { click: () => done(null) } }, "Cancel"),
        el("button", { type: "submit", class: "button danger", "data-action": "confirm" }, "Quarantine")));
    const dialog = el("dialog", { class: "dialog", "aria-labelledby": "dialog-title" }, form);
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = reason.value.trim();
      if (!text) {
        error.textContent = "Give a reason a colleague will understand.";
        error.hidden = false;
        return;
      }
      done({ reason: text, class: kind.value });
    });
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      done(null);
    });
    document.body.append(dialog);
    dialog.showModal();
    reason.focus();
  });
}
