// The real `agent-inbox serve` for the console tests: the TypeScript client's test server
// (clients/typescript/test/support/server.mjs: a fresh SQLite database, port 0, tokens from
// the binary's `token issue`), ready before it is handed out, with the few API calls the tests
// make as agents and publishers.
import { REPO, startServer as startInboxServer } from "../../clients/typescript/test/support/server.mjs";

export { REPO };

/** Starts a server; resolves once it is ready. `stop()` ends it and removes its directory. */
export async function startServer() {
  const server = await startInboxServer({
    env: {
      AGENT_INBOX_LOG: process.env.AGENT_INBOX_LOG ?? "warn,agent_inbox=info,inbox_server=info",
      // A callback receiver on 127.0.0.1 that keeps failing is disabled within a second.
      AGENT_INBOX_CALLBACKS_ALLOW_HTTP_LOOPBACK: "true",
      AGENT_INBOX_CALLBACKS_POLL_INTERVAL: "50ms",
      AGENT_INBOX_CALLBACKS_RETRY_BASE: "20ms",
      AGENT_INBOX_CALLBACKS_RETRY_MAX: "50ms",
      AGENT_INBOX_CALLBACKS_DISABLE_AFTER_FAILURES: "2",
      AGENT_INBOX_CALLBACKS_DISABLE_AFTER: "0s",
    },
  });
  await waitReady(server.url);
  return Object.assign(server, {
    /** One JSON call as a bearer; resolves { status, body }. */
    async call(method, path, token, body) {
      const response = await fetch(`${server.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    },
  });
}

async function waitReady(url) {
  for (let i = 0; i < 400; i++) {
    const ok = await fetch(`${url}/readyz`).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error("the server did not become ready");
}

/** Publishes one event to `agent`; resolves its event id. */
export async function publish(server, publisher, agent, payload = { task: "summarize the meeting" }) {
  const answer = await server.call("POST", "/v1/events", publisher, { recipients: [agent], event_type: "task.assigned", payload });
  if (answer.status !== 201) throw new Error(`publish answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  return answer.body.deliveries[0].event_id;
}

/** Publishes to `agent`, claims and acknowledges as failed: a dead-lettered event's id. */
export async function deadLetter(server, publisher, agentToken, agent) {
  const eventId = await publish(server, publisher, agent, { task: "parse the invoice", attempt: "doomed" });
  const claimed = await server.call("POST", "/v1/inbox/claim", agentToken, { event_ids: [eventId] });
  const claim = claimed.body.claims?.[0];
  if (!claim) throw new Error(`claim answered ${claimed.status}: ${JSON.stringify(claimed.body)}`);
  const acked = await server.call("POST", "/v1/inbox/acknowledge", agentToken, {
    acks: [{ event_id: eventId, lease_token: claim.lease_token, result: "failed" }],
  });
  if (acked.body.results?.[0]?.ack_state !== "dead_letter") throw new Error(`ack answered ${JSON.stringify(acked.body)}`);
  return eventId;
}
