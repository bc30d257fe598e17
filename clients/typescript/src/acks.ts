/**
 * Acknowledgements on their way to the service: one request at a time, and those that come
 * meanwhile go out together in the next (up to 100), each request repeated on transient failure
 * with backoff (the same lease token twice is success). Also the repeat-with-backoff the runner
 * uses for releases.
 */

import type { InboxApi } from "./api.js";
import { sleep } from "./api.js";
import { InboxError, ProblemError, ProtocolError } from "./errors.js";
import { backoffDelay, jitter } from "./schedule.js";
import type { Backoff } from "./schedule.js";
import type { AckEntry } from "./wire.js";

/** Most acknowledgements sent in one request. */
const ACK_BATCH_MAX = 100;

export interface RetryPolicy {
  attemptsMax: number;
  backoff: Backoff;
}

/** Repeats a request while it fails transiently, with backoff, up to the attempt limit. */
export async function retrying<T>(policy: RetryPolicy, request: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await request();
    } catch (error) {
      if (!(error instanceof InboxError) || !error.retryable || attempt >= policy.attemptsMax) throw error;
      await sleep(backoffDelay(policy.backoff, attempt, jitter()));
    }
  }
}

export class AckBatcher {
  readonly #api: InboxApi;
  readonly #sessionId: () => string | null;
  readonly #policy: RetryPolicy;
  readonly #queue: { entry: AckEntry; resolve: () => void; reject: (error: unknown) => void }[] = [];
  #sending = false;

  constructor(api: InboxApi, sessionId: () => string | null, policy: RetryPolicy) {
    this.#api = api;
    this.#sessionId = sessionId;
    this.#policy = policy;
  }

  /** Resolves once the service accepted the acknowledgement; rejects with its refusal or the last failure. */
  acknowledge(entry: AckEntry): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ entry, resolve, reject });
      this.#flush();
    });
  }

  #flush(): void {
    if (this.#sending || this.#queue.length === 0) return;
    const batch = this.#queue.splice(0, ACK_BATCH_MAX);
    this.#sending = true;
    retrying(this.#policy, () => this.#api.acknowledge({ session_id: this.#sessionId(), acks: batch.map((b) => b.entry) }))
      .then(
        (answer) => {
          for (const pending of batch) {
            const outcome = answer.results.find((r) => r.event_id === pending.entry.event_id);
            if (outcome === undefined) pending.reject(new ProtocolError("the acknowledgement answer left an event out"));
            else if (outcome.error) {
              const { code, detail } = outcome.error;
              pending.reject(new ProblemError({ type: `urn:agent-inbox:problem:${code}`, title: "acknowledge refused", status: 409, code, detail }));
            } else pending.resolve();
          }
        },
        (error: unknown) => {
          for (const pending of batch) pending.reject(error);
        },
      )
      .finally(() => {
        this.#sending = false;
        this.#flush();
      });
  }
}
