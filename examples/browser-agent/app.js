// The example agent: the settings come from the form (kept in localStorage, shared by the tabs),
// the access token from an async callback, and each event is "handled" by showing it.
import { Agent, InboxApi, RetryLater } from "/client/index.js";

const form = document.getElementById("settings");
const show = (id, text) => (document.getElementById(id).textContent = text);
const saved = JSON.parse(localStorage.getItem("agent-inbox-example") ?? "{}");
for (const [name, value] of Object.entries(saved)) if (form.elements[name]) form.elements[name].value = value;

/**
 * The app's token source. On a refusal (`refresh: true`) it trades the refresh token, one tab at
 * a time (refresh tokens rotate: each works once), and shares the result with the other tabs.
 */
async function accessToken({ refresh }) {
  const settings = JSON.parse(localStorage.getItem("agent-inbox-example") ?? "{}");
  if (!refresh) return settings.access;
  return navigator.locks.request("agent-inbox-example:refresh", async () => {
    const latest = JSON.parse(localStorage.getItem("agent-inbox-example") ?? "{}");
    if (latest.access !== settings.access) return latest.access; // another tab refreshed already
    if (!latest.refresh) throw new Error("the access token was refused; paste a new one");
    const response = await fetch(`${latest.server}/v1/auth/refresh`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ refresh_token: latest.refresh }),
    });
    if (!response.ok) throw new Error(`the refresh token was refused (${response.status})`);
    const tokens = await response.json();
    const next = { ...latest, access: tokens.access_token, refresh: tokens.refresh_token ?? latest.refresh };
    localStorage.setItem("agent-inbox-example", JSON.stringify(next));
    return next.access;
  });
}

let agent = null;
let handled = 0;

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const settings = Object.fromEntries(new FormData(form));
  localStorage.setItem("agent-inbox-example", JSON.stringify(settings));
  start(settings);
});

function start(settings) {
  agent?.stop();
  agent = new Agent({
    api: new InboxApi({ baseUrl: settings.server, accessToken }),
    concurrency: 2,
    handler: async (event) => {
      if (event.payload?.fail === "retry") throw new RetryLater("the payload asked for a retry", 10);
      handled += 1;
      show("count", String(handled));
      const item = document.createElement("li");
      item.textContent = `#${event.inboxSeq} ${event.eventType} ${JSON.stringify(event.payload)}`;
      document.getElementById("log").prepend(item);
    },
    observer: (progress) => {
      if (progress.type === "subscribed") show("state", `running as ${progress.recipientId}`);
      if (progress.type === "role") {
        const role = document.getElementById("role");
        role.textContent = progress.leader ? "leader: holds the stream" : "follower: hints from the leader";
        role.className = progress.leader ? "leader" : "";
        if (!progress.leader) show("transport", "from the leading tab");
      }
      if (progress.type === "transport") show("transport", `${progress.status.kind}${progress.status.connected ? ", connected" : ", connecting"}`);
      if (progress.type === "disconnected") show("state", `retrying: ${progress.error.code}`);
    },
  });
  show("state", "starting");
  show("role", "follower: hints from the leader");
  show("transport", "from the leading tab");
  agent.run().then(
    () => show("state", "stopped"),
    (error) => show("state", `stopped: ${error.code ?? ""} ${error.message}`),
  );
}

if (saved.server && saved.access) start(saved);
