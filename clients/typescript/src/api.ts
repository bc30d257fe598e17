/**
 * The service's HTTP API as typed calls: one method per endpoint an agent uses, bearer
 * authentication from an app-supplied callback (called again with `refresh: true` after a
 * 401), RFC 9421 signatures on claim, acknowledge, release and heartbeat when a signing key
 * is set, RFC 9457 problems decoded into {@link ProblemError}, and 429/503 answers retried
 * after their `Retry-After`. Nothing here decides what to do next; the runner does.
 */

import { ConfigError, NetworkError, ProblemError, ProtocolError, isTokenRefusal, parseRetryAfter } from "./errors.js";
import type { ProblemDocument } from "./errors.js";
import { authorityOf, signInboxRequest } from "./signing.js";
import type { SigningKey } from "./signing.js";
import { DEFAULT_BACKOFF, jitter, retryDelay } from "./schedule.js";
import type { Backoff } from "./schedule.js";
import type {
  AcknowledgeRequest,
  AcknowledgeResponse,
  AgentKeyResponse,
  AgentKeysResponse,
  ClaimRequest,
  ClaimResponse,
  HeadResponse,
  HeartbeatRequest,
  HeartbeatResponse,
  PollRequest,
  PollResponse,
  PublishRequest,
  PublishResponse,
  ReleaseRequest,
  ReleaseResponse,
  ResyncResponse,
  SessionHeartbeatRequest,
  SessionHeartbeatResponse,
  StreamCookieResponse,
  StreamTicketRequest,
  StreamTicketResponse,
  SubscribeRequest,
  SubscribeResponse,
} from "./wire.js";

/**
 * Supplies the access token. Called once at first use, and again with `refresh: true` when
 * the service refused the token (401): return a new one then (from your login, a refresh
 * token exchange, a parent window...). A bearer token is only ever sent in a header.
 */
export type AccessTokenProvider = (request: { refresh: boolean }) => Promise<string> | string;

export interface InboxApiOptions {
  /** The service, like `https://inbox.example` or `http://127.0.0.1:8080`. */
  baseUrl: string;
  accessToken: AccessTokenProvider;
  /** Signs claim, acknowledge, release and heartbeat (RFC 9421) when set. */
  signingKey?: SigningKey;
  /** The `@authority` signatures cover, when a proxy rewrites `Host`; default: the URL's host. */
  signatureAuthority?: string;
  /** How long an ordinary request may take; default 20 s. */
  requestTimeoutMs?: number;
  /** Attempts for a request refused with 429 or 503 (it did nothing); default 3. */
  overloadAttempts?: number;
  overloadBackoff?: Backoff;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
  /**
   * Send with `fetch`'s `keepalive`, so the request outlives the page (a release or an
   * acknowledgement sent on `pagehide`). Unsigned requests go out before the page is gone; a
   * signed one waits for WebCrypto first, which an unloading page may not live to see.
   */
  keepalive?: boolean;
}

/** The answer of `GET /v1/inbox/head` with `If-None-Match`. */
export type HeadResult =
  | { modified: true; head: HeadResponse; etag: string | null }
  | { modified: false; etag: string };

const REQUEST_TIMEOUT_MS = 20_000;
/** Extra time a long poll gets beyond the wait it asked for. */
const LONG_POLL_GRACE_MS = 10_000;
const PROBLEM_CHARS_MAX = 16 * 1024;
/** A `Retry-After` longer than this is handed to the caller instead of waited out here. */
const RETRY_AFTER_WAIT_MAX_SECONDS = 30;

interface Request {
  method: "GET" | "POST" | "DELETE";
  path: string;
  body?: unknown;
  sign?: boolean;
  timeoutMs?: number;
  signal?: AbortSignal | undefined;
  headers?: Record<string, string>;
  credentials?: RequestCredentials;
  keepalive?: boolean;
  /** Statuses other than 2xx that are answers, not errors (304). */
  accept?: number[];
}

/** A connection to one agent-inbox service as one identity. */
export class InboxApi {
  readonly baseUrl: string;
  readonly #options: InboxApiOptions;
  readonly #authority: string;
  readonly #fetch: typeof fetch;
  /** The token in use; shared by concurrent calls so a refresh happens once. */
  #token: Promise<string> | null = null;

  constructor(options: InboxApiOptions) {
    this.baseUrl = checkBaseUrl(options.baseUrl);
    this.#options = options;
    this.#authority = options.signatureAuthority ?? authorityOf(this.baseUrl);
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The same connection, signing critical calls with `key`. */
  withSigningKey(key: SigningKey): InboxApi {
    return new InboxApi({ ...this.#options, signingKey: key });
  }

  get signingKeyId(): string | null {
    return this.#options.signingKey?.keyId ?? null;
  }

  /** An absolute URL for a path of this service. */
  url(path: string): string {
    return new URL(path, `${this.baseUrl}/`).toString();
  }

  subscribe(request: SubscribeRequest, options: CallOptions = {}): Promise<SubscribeResponse> {
    return this.#json({ method: "POST", path: "/v1/agent-sessions/subscribe", body: request, signal: options.signal });
  }

  /** Poll after cursor; a long poll when `wait_seconds` is set. */
  poll(request: PollRequest, options: CallOptions = {}): Promise<PollResponse> {
    const waitMs = (request.wait_seconds ?? 0) * 1000;
    return this.#json({
      method: "POST",
      path: "/v1/inbox/poll-after-cursor",
      body: request,
      signal: options.signal,
      timeoutMs: this.#timeoutMs() + waitMs + (waitMs > 0 ? LONG_POLL_GRACE_MS : 0),
    });
  }

  /** The head; with `etag` from an earlier answer, `{ modified: false }` while it has not moved. */
  async head(options: CallOptions & { etag?: string | null } = {}): Promise<HeadResult> {
    const headers: Record<string, string> = options.etag ? { "if-none-match": options.etag } : {};
    const response = await this.#send({ method: "GET", path: "/v1/inbox/head", headers, signal: options.signal, accept: [304] });
    const etag = response.headers.get("etag");
    if (response.status === 304) return { modified: false, etag: etag ?? options.etag ?? "" };
    return { modified: true, head: await decode<HeadResponse>(response), etag };
  }

  claim(request: ClaimRequest, options: CallOptions = {}): Promise<ClaimResponse> {
    return this.#json({ method: "POST", path: "/v1/inbox/claim", body: request, sign: true, signal: options.signal });
  }

  acknowledge(request: AcknowledgeRequest, options: CallOptions = {}): Promise<AcknowledgeResponse> {
    return this.#json({ method: "POST", path: "/v1/inbox/acknowledge", body: request, sign: true, signal: options.signal, keepalive: options.keepalive });
  }

  release(request: ReleaseRequest, options: CallOptions = {}): Promise<ReleaseResponse> {
    return this.#json({ method: "POST", path: "/v1/inbox/release", body: request, sign: true, signal: options.signal, keepalive: options.keepalive });
  }

  heartbeat(request: HeartbeatRequest, options: CallOptions = {}): Promise<HeartbeatResponse> {
    return this.#json({ method: "POST", path: "/v1/inbox/heartbeat", body: request, sign: true, signal: options.signal });
  }

  /** The first page of the resync snapshot (after `cursor_reset_required`). */
  resync(options: CallOptions = {}): Promise<ResyncResponse> {
    return this.#json({ method: "GET", path: "/v1/inbox/resync", signal: options.signal });
  }

  /** One page of the resync snapshot: open events after `afterSeq`, at most `limit`. */
  resyncPage(afterSeq: number, limit: number, options: CallOptions = {}): Promise<ResyncResponse> {
    return this.#json({ method: "GET", path: `/v1/inbox/resync?after_seq=${afterSeq}&limit=${limit}`, signal: options.signal });
  }

  /** A single-use stream ticket for `?ticket=` (valid for at most 60 s, on any node). */
  streamTicket(request: StreamTicketRequest = {}, options: CallOptions = {}): Promise<StreamTicketResponse> {
    return this.#json({ method: "POST", path: "/v1/streams/tickets", body: request, signal: options.signal });
  }

  /**
   * Sets the HttpOnly stream cookie in this browser (the request carries credentials), so an
   * `EventSource` with `withCredentials` authenticates and may reconnect on its own.
   */
  streamCookie(request: StreamTicketRequest = {}, options: CallOptions = {}): Promise<StreamCookieResponse> {
    return this.#json({ method: "POST", path: "/v1/streams/cookie", body: request, signal: options.signal, credentials: "include" });
  }

  sessionHeartbeat(sessionId: string, request: SessionHeartbeatRequest = {}, options: CallOptions = {}): Promise<SessionHeartbeatResponse> {
    return this.#json({
      method: "POST",
      path: `/v1/agent-sessions/${encodeURIComponent(sessionId)}/heartbeat`,
      body: request,
      signal: options.signal,
    });
  }

  /** Publishes an event (needs a publisher token): for tools and tests. */
  publish(request: PublishRequest, options: CallOptions = {}): Promise<PublishResponse> {
    return this.#json({ method: "POST", path: "/v1/events", body: request, signal: options.signal });
  }

  /** The agent's live signing keys, and whether its tenant requires signed calls. */
  signingKeys(options: CallOptions = {}): Promise<AgentKeysResponse> {
    return this.#json({ method: "GET", path: "/v1/agent-keys", signal: options.signal });
  }

  /**
   * Registers `key`'s public half (ed25519). A first key needs only the access token; a
   * further one must be signed by a current key (use {@link withSigningKey} first).
   */
  registerSigningKey(key: SigningKey, options: CallOptions = {}): Promise<AgentKeyResponse> {
    const publicKey = key.publicKey;
    if (publicKey === null) {
      throw new ConfigError("only ed25519 keys are registered by their public key; ask for an hmac-sha256 secret instead");
    }
    return this.#json({
      method: "POST",
      path: "/v1/agent-keys",
      body: { algorithm: key.algorithm, public_key: publicKey, key_id: key.keyId },
      sign: true,
      signal: options.signal,
    });
  }

  /**
   * The `Authorization` header value, for stream clients that can send headers (Node). Pass the
   * value back to {@link tokenRejected} when the service answers 401.
   */
  async authorization(): Promise<string> {
    return `Bearer ${await this.#bearer()}`;
  }

  /** Drops `authorization` after a 401, so the next call asks the provider for a new token. */
  tokenRejected(authorization: string): void {
    void this.#invalidate(authorization.replace(/^Bearer /, ""));
  }

  async #json<T>(request: Request): Promise<T> {
    return decode<T>(await this.#send(request));
  }

  /** Sends with authentication, one refresh after a refused token, and overload retries. */
  async #send(request: Request): Promise<Response> {
    // Serialized once: the signature's Content-Digest covers these exact bytes.
    const body = request.body === undefined ? undefined : new TextEncoder().encode(JSON.stringify(request.body));
    const attempts = Math.max(1, this.#options.overloadAttempts ?? 3);
    let refreshed = false;
    for (let attempt = 1; ; attempt++) {
      const token = await this.#bearer();
      const response = await this.#fetchOnce(request, body, token);
      if (response.ok || request.accept?.includes(response.status)) return response;
      const error = await problem(response);
      if (response.status === 401 && !refreshed && isTokenRefusal(error)) {
        refreshed = true;
        await this.#invalidate(token);
        attempt -= 1;
        continue;
      }
      const overloaded = response.status === 429 || response.status === 503;
      const waitSeconds = error.retryAfter;
      if (overloaded && attempt < attempts && (waitSeconds === undefined || waitSeconds <= RETRY_AFTER_WAIT_MAX_SECONDS)) {
        const backoff = this.#options.overloadBackoff ?? { ...DEFAULT_BACKOFF, baseMs: 500 };
        await sleep(retryDelay(backoff, attempt, jitter(), waitSeconds), request.signal);
        continue;
      }
      throw error;
    }
  }

  async #fetchOnce(request: Request, body: Uint8Array | undefined, token: string): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json", authorization: `Bearer ${token}`, ...request.headers };
    if (body !== undefined) headers["content-type"] = "application/json";
    const key = this.#options.signingKey;
    if (request.sign && key !== undefined) {
      // Signed per attempt: a retry carries a fresh nonce. `@path` is the path without its query.
      const signed = await signInboxRequest(key, {
        method: request.method,
        authority: this.#authority,
        path: request.path.split("?")[0] ?? request.path,
        body: body ?? new Uint8Array(),
      });
      Object.assign(headers, signed);
    }
    const timeout = AbortSignal.timeout(request.timeoutMs ?? this.#timeoutMs());
    const signal = request.signal ? AbortSignal.any([request.signal, timeout]) : timeout;
    try {
      return await this.#fetch(this.url(request.path), {
        method: request.method,
        headers,
        body: body as BodyInit | undefined,
        signal,
        credentials: request.credentials ?? "omit",
        cache: "no-store",
        keepalive: request.keepalive === true,
      });
    } catch (error) {
      if (request.signal?.aborted) throw request.signal.reason;
      const what = timeout.aborted ? "timed out" : "request failed";
      throw new NetworkError(`${what}: ${request.method} ${request.path.split("?")[0]}`, { cause: error });
    }
  }

  #timeoutMs(): number {
    return this.#options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  }

  #bearer(): Promise<string> {
    if (this.#token === null) {
      const pending = this.#provide(false);
      this.#token = pending;
      pending.catch(() => {
        if (this.#token === pending) this.#token = null;
      });
    }
    return this.#token;
  }

  /** Asks for a new token unless another call already did since `rejected` was handed out. */
  async #invalidate(rejected: string): Promise<void> {
    const current = this.#token === null ? null : await this.#token.catch(() => null);
    if (current !== rejected && current !== null) return;
    const pending = this.#provide(true);
    this.#token = pending;
    pending.catch(() => {
      if (this.#token === pending) this.#token = null;
    });
    await pending.catch(() => undefined);
  }

  async #provide(refresh: boolean): Promise<string> {
    const token = await this.#options.accessToken({ refresh });
    if (typeof token !== "string" || token.length === 0 || /[\s]/.test(token)) {
      throw new ConfigError("the access token callback returned no usable token");
    }
    return token;
  }
}

/** Normalizes a server URL (no trailing slash) and refuses what cannot be reached. */
export function checkBaseUrl(baseUrl: string): string {
  let url: URL;
  try {
    url = new URL(baseUrl.trim());
  } catch {
    throw new ConfigError(`${JSON.stringify(baseUrl)} is not a server URL such as https://inbox.example or http://127.0.0.1:8080`);
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || url.host === "") {
    throw new ConfigError(`${JSON.stringify(baseUrl)} is not a server URL such as https://inbox.example or http://127.0.0.1:8080`);
  }
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}

async function decode<T>(response: Response): Promise<T> {
  let text: string;
  try {
    text = await response.text();
  } catch (error) {
    throw new NetworkError("the connection broke during the answer", { cause: error });
  }
  if (text === "") return null as T;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ProtocolError(`${response.status} answer is not JSON`);
  }
}

/** The problem document of an error answer, or one made up from the status. */
async function problem(response: Response): Promise<ProblemError> {
  const retryAfter = parseRetryAfter(response.headers.get("retry-after"), Date.now());
  let text = "";
  try {
    text = (await response.text()).slice(0, PROBLEM_CHARS_MAX);
  } catch {
    // The body broke off: the status still says enough.
  }
  let document: ProblemDocument | null = null;
  try {
    const parsed: unknown = JSON.parse(text);
    if (isProblem(parsed)) document = parsed;
  } catch {
    // Not a problem document (a proxy's HTML page, an empty body).
  }
  document ??= {
    type: "about:blank",
    title: response.statusText || "error",
    status: response.status,
    code: `http_${response.status}`,
    detail: `the service (or a proxy in front of it) answered ${response.status} without a problem document`,
  };
  const fromBody = typeof document.retry_after === "number" ? document.retry_after : undefined;
  return new ProblemError(document, retryAfter ?? fromBody);
}

function isProblem(value: unknown): value is ProblemDocument {
  if (typeof value !== "object" || value === null) return false;
  const record = value as Record<string, unknown>;
  return typeof record.code === "string" && typeof record.status === "number" && typeof record.detail === "string";
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
