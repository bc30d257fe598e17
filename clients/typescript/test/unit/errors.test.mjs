// Problems become typed errors carrying the code (which statuses are transient, and Retry-After,
// are the shared vectors').
import assert from "node:assert/strict";
import { test } from "node:test";

import { InboxError, NetworkError, ProblemError, RetryLater, checkBaseUrl } from "../../dist/node.js";
import { isTokenRefusal } from "../../dist/errors.js";

test("problems carry code, status, detail and retryAfter", () => {
  const problem = (status, code) => ({ type: `urn:agent-inbox:problem:${code}`, title: "t", status, code, detail: "what to do next" });
  const busy = new ProblemError(problem(503, "unavailable"), 7);
  assert.ok(busy instanceof InboxError);
  assert.deepEqual([busy.code, busy.status, busy.detail, busy.retryAfter, busy.retryable], ["unavailable", 503, "what to do next", 7, true]);
  assert.equal(new NetworkError("connection failed").code, "unreachable");
  assert.ok(isTokenRefusal(new ProblemError(problem(401, "token_expired"))));
  assert.ok(!isTokenRefusal(new ProblemError(problem(401, "signature_invalid"))), "a new token does not fix a signature");
});

test("handler errors and server URLs are checked", () => {
  // The rounding itself is the shared vectors' release.retry_after_seconds.
  assert.equal(new RetryLater("busy", 1.6).retryAfterSeconds, 2, "a fraction rounded up: never sooner than asked");
  assert.equal(new RetryLater("busy", Number.NaN).retryAfterSeconds, 0);
  assert.equal(checkBaseUrl("http://127.0.0.1:8080/"), "http://127.0.0.1:8080");
  assert.throws(() => checkBaseUrl("inbox.example"), (error) => error.code === "config" && /not a server URL/.test(error.message));
  assert.throws(() => checkBaseUrl("ftp://inbox.example"), /not a server URL/);
});
