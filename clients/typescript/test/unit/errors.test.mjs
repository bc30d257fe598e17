// Problems become typed errors carrying the code; Retry-After becomes seconds.
import assert from "node:assert/strict";
import { test } from "node:test";

import { InboxError, NetworkError, ProblemError, RetryLater, checkBaseUrl } from "../../dist/node.js";
import { isTokenRefusal, parseRetryAfter } from "../../dist/errors.js";

test("problems carry code, status, detail and retryAfter; 429 and 5xx are retryable", () => {
  const problem = (status, code) => ({ type: `urn:agent-inbox:problem:${code}`, title: "t", status, code, detail: "what to do next" });
  const busy = new ProblemError(problem(503, "unavailable"), 7);
  assert.ok(busy instanceof InboxError);
  assert.deepEqual([busy.code, busy.status, busy.detail, busy.retryAfter, busy.retryable], ["unavailable", 503, "what to do next", 7, true]);
  assert.equal(new ProblemError(problem(429, "rate_limited")).retryable, true);
  assert.equal(new ProblemError(problem(409, "lease_mismatch")).retryable, false);
  assert.equal(new NetworkError("connection failed").code, "unreachable");
  assert.ok(isTokenRefusal(new ProblemError(problem(401, "token_expired"))));
  assert.ok(!isTokenRefusal(new ProblemError(problem(401, "signature_invalid"))), "a new token does not fix a signature");
});

test("Retry-After in seconds or as an HTTP date", () => {
  const now = Date.parse("2030-01-01T00:00:00Z");
  assert.equal(parseRetryAfter("120", now), 120);
  assert.equal(parseRetryAfter("Tue, 01 Jan 2030 00:00:30 GMT", now), 30);
  assert.equal(parseRetryAfter("Tue, 01 Jan 2029 00:00:30 GMT", now), 0, "a date in the past is now");
  assert.equal(parseRetryAfter("soon", now), undefined);
  assert.equal(parseRetryAfter(null, now), undefined);
});

test("handler errors and server URLs are checked", () => {
  assert.equal(new RetryLater("busy", 1e9).retryAfterSeconds, 604_800, "capped at a week");
  assert.equal(new RetryLater("busy", 1.6).retryAfterSeconds, 2, "a fraction rounded up: never sooner than asked");
  assert.equal(new RetryLater("busy", 3).retryAfterSeconds, 3);
  assert.equal(new RetryLater("busy", -1).retryAfterSeconds, 0);
  assert.equal(new RetryLater("busy", Number.NaN).retryAfterSeconds, 0);
  assert.equal(checkBaseUrl("http://127.0.0.1:8080/"), "http://127.0.0.1:8080");
  assert.throws(() => checkBaseUrl("inbox.example"), (error) => error.code === "config" && /not a server URL/.test(error.message));
  assert.throws(() => checkBaseUrl("ftp://inbox.example"), /not a server URL/);
});
