/**
 * RFC 9421 HTTP Message Signatures for an agent's critical calls (claim, acknowledge, release,
 * heartbeat), with exactly the service's policy: components `@method`, `@path`, `@authority`
 * and `content-digest` (RFC 9530, sha-256 of the exact body bytes); parameters `created`,
 * `expires` (120 s later), `keyid`, `nonce` (16 random bytes, base64url) and `alg`; label
 * `sig1`. WebCrypto does the cryptography (Ed25519, HMAC-SHA-256), in browsers and in Node.
 *
 * Every request is signed afresh, so a retry after a lost answer carries a new nonce and is
 * never refused as a replay.
 */

import { ConfigError } from "./errors.js";
import { buffer, fromBase64, randomBytes, toBase64, toBase64Url, utf8 } from "./encoding.js";

export type SigningAlgorithm = "ed25519" | "hmac-sha256";

/** How long a signed request stays acceptable, as the service's signer uses. */
export const REQUEST_SIGNATURE_WINDOW_SECONDS = 120;
export const REQUEST_SIGNATURE_LABEL = "sig1";
const NONCE_BYTES = 16;
const KEY_ID_BYTES_MAX = 64;
/** RFC 8410's PKCS #8 prefix for an Ed25519 private key; the 32-byte seed follows. */
const ED25519_PKCS8_PREFIX = Uint8Array.from([
  0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
]);

/** A covered component: a derived one (`@method`, ...) or a header field name (lower case). */
export type Component = "@method" | "@path" | "@authority" | "@query" | "@target-uri" | "@scheme" | (string & {});

/** Signature parameters, serialized in the order given. */
export type SignatureParameter =
  | ["created", number]
  | ["expires", number]
  | ["keyid", string]
  | ["nonce", string]
  | ["alg", string]
  | ["tag", string];

export interface SignatureParams {
  components: Component[];
  parameters: SignatureParameter[];
}

/** The parts of a request a signature can cover. */
export interface SignedMessage {
  method: string;
  /** Host and port as the `Host` header carries them. */
  authority: string;
  /** The path, with the query when there is one (`@path` drops it, `@query` keeps it). */
  target: string;
  scheme?: string;
  /** Header fields; names in any case. */
  headers: Record<string, string>;
}

/** The headers a signed request adds, by their lower-case names. */
export interface SignedRequestHeaders {
  "content-digest": string;
  "signature-input": string;
  signature: string;
}

/** The private half of a request-signing key, and its key id at the service. */
export class SigningKey {
  readonly keyId: string;
  readonly algorithm: SigningAlgorithm;
  readonly #key: CryptoKey;
  readonly #publicKey: Uint8Array | null;

  private constructor(keyId: string, algorithm: SigningAlgorithm, key: CryptoKey, publicKey: Uint8Array | null) {
    checkKeyId(keyId);
    this.keyId = keyId;
    this.algorithm = algorithm;
    this.#key = key;
    this.#publicKey = publicKey;
  }

  /**
   * A new Ed25519 key pair under a fresh key id (`ak_` and 16 hex digits). The private key is
   * not extractable: in a browser it can be kept in IndexedDB as a CryptoKey.
   */
  static async generateEd25519(keyId?: string): Promise<SigningKey> {
    const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"])) as CryptoKeyPair;
    const raw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
    const id = keyId ?? `ak_${[...randomBytes(8)].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
    return new SigningKey(id, "ed25519", pair.privateKey, raw);
  }

  /** An Ed25519 key from its 32-byte seed (the RFC 8032 private key). */
  static async ed25519FromSeed(keyId: string, seed: Uint8Array): Promise<SigningKey> {
    if (seed.length !== 32) throw new ConfigError(`an ed25519 seed is 32 bytes, not ${seed.length}`);
    const pkcs8 = new Uint8Array(ED25519_PKCS8_PREFIX.length + 32);
    pkcs8.set(ED25519_PKCS8_PREFIX);
    pkcs8.set(seed, ED25519_PKCS8_PREFIX.length);
    return SigningKey.ed25519FromPkcs8(keyId, pkcs8);
  }

  /** An Ed25519 key from PKCS #8 DER (a PEM body, base64-decoded). */
  static async ed25519FromPkcs8(keyId: string, der: Uint8Array): Promise<SigningKey> {
    const extractable = await crypto.subtle.importKey("pkcs8", buffer(der), { name: "Ed25519" }, true, ["sign"]);
    const jwk = await crypto.subtle.exportKey("jwk", extractable);
    if (typeof jwk.x !== "string") throw new ConfigError("the ed25519 key has no public half");
    const key = await crypto.subtle.importKey("pkcs8", buffer(der), { name: "Ed25519" }, false, ["sign"]);
    return new SigningKey(keyId, "ed25519", key, fromBase64(jwk.x));
  }

  /** An hmac-sha256 key: the secret `POST /v1/agent-keys` returned once (base64url). */
  static async hmacSha256(keyId: string, secret: Uint8Array | string): Promise<SigningKey> {
    const bytes = typeof secret === "string" ? fromBase64(secret) : secret;
    if (bytes.length < 32) throw new ConfigError("an hmac-sha256 secret must be at least 32 bytes");
    const key = await crypto.subtle.importKey("raw", buffer(bytes), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return new SigningKey(keyId, "hmac-sha256", key, null);
  }

  /** The Ed25519 public key, base64url, as `POST /v1/agent-keys` takes it; null for hmac. */
  get publicKey(): string | null {
    return this.#publicKey === null ? null : toBase64Url(this.#publicKey);
  }

  /** Signs `data`: 64 bytes for Ed25519, 32 for HMAC-SHA-256. */
  async sign(data: Uint8Array): Promise<Uint8Array> {
    const algorithm = this.algorithm === "ed25519" ? { name: "Ed25519" } : { name: "HMAC" };
    return new Uint8Array(await crypto.subtle.sign(algorithm, this.#key, buffer(data)));
  }
}

/** `Content-Digest` for `body`: `sha-256=:<base64>:`. */
export async function contentDigest(body: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer(body)));
  return `sha-256=:${toBase64(digest)}:`;
}

/**
 * Signs one request to the service as `inbox_trust::sign_inbox_request` does. `authority` is
 * what the service sees in `Host`; `path` has no query; `body` is the exact bytes sent.
 */
export async function signInboxRequest(
  key: SigningKey,
  request: { method: string; authority: string; path: string; body: Uint8Array },
  nowSeconds: number = Math.floor(Date.now() / 1000),
  nonce: string = toBase64Url(randomBytes(NONCE_BYTES)),
): Promise<SignedRequestHeaders> {
  const digest = await contentDigest(request.body);
  const message: SignedMessage = {
    method: request.method,
    authority: request.authority,
    target: request.path,
    headers: { "content-digest": digest },
  };
  const params: SignatureParams = {
    components: ["@method", "@path", "@authority", "content-digest"],
    parameters: [
      ["created", nowSeconds],
      ["expires", nowSeconds + REQUEST_SIGNATURE_WINDOW_SECONDS],
      ["keyid", key.keyId],
      ["nonce", nonce],
      ["alg", key.algorithm],
    ],
  };
  const signed = await signMessage(message, REQUEST_SIGNATURE_LABEL, params, key);
  return { "content-digest": digest, ...signed };
}

/** Signs any message under `label` (RFC 9421 §3.1). */
export async function signMessage(
  message: SignedMessage,
  label: string,
  params: SignatureParams,
  key: SigningKey,
): Promise<{ "signature-input": string; signature: string }> {
  const base = signatureBase(message, params);
  const signature = await key.sign(utf8(base));
  return {
    "signature-input": `${label}=${serializeParams(params)}`,
    signature: `${label}=:${toBase64(signature)}:`,
  };
}

/** The `@signature-params` value: an inner list of components with its parameters. */
export function serializeParams(params: SignatureParams): string {
  const list = `(${params.components.map((c) => serializeString(c)).join(" ")})`;
  const parameters = params.parameters
    .map(([name, value]) => `;${name}=${typeof value === "number" ? serializeInteger(value) : serializeString(value)}`)
    .join("");
  return list + parameters;
}

/** The signature base (RFC 9421 §2.5): one line per component, then `@signature-params`. */
export function signatureBase(message: SignedMessage, params: SignatureParams): string {
  const lines: string[] = [];
  const seen = new Set<string>();
  for (const component of params.components) {
    if (seen.has(component)) throw new ConfigError(`component ${component} is covered twice`);
    seen.add(component);
    lines.push(`${serializeString(component)}: ${componentValue(message, component)}`);
  }
  lines.push(`"@signature-params": ${serializeParams(params)}`);
  return lines.join("\n");
}

function componentValue(message: SignedMessage, component: Component): string {
  const queryAt = message.target.indexOf("?");
  const path = queryAt < 0 ? message.target : message.target.slice(0, queryAt);
  switch (component) {
    case "@method":
      return message.method.toUpperCase();
    case "@path":
      return path === "" ? "/" : path;
    case "@query":
      return queryAt < 0 ? "?" : message.target.slice(queryAt);
    case "@authority":
      return normalizeAuthority(message.authority, message.scheme ?? "https");
    case "@scheme":
      return (message.scheme ?? "https").toLowerCase();
    case "@target-uri":
      return `${(message.scheme ?? "https").toLowerCase()}://${normalizeAuthority(message.authority, message.scheme ?? "https")}${message.target}`;
    default: {
      if (component.startsWith("@")) throw new ConfigError(`derived component ${component} is not supported`);
      const values = Object.entries(message.headers)
        .filter(([name]) => name.toLowerCase() === component)
        .map(([, value]) => value.trim().replace(/\s*\r?\n\s*/g, " "));
      if (values.length === 0) throw new ConfigError(`the message has no ${component} header to sign`);
      return values.join(", ");
    }
  }
}

/** Lower case, without the scheme's default port, as the service compares it. */
export function normalizeAuthority(authority: string, scheme: string): string {
  const lower = authority.toLowerCase();
  const defaultPort = scheme.toLowerCase() === "http" ? ":80" : ":443";
  return lower.endsWith(defaultPort) ? lower.slice(0, -defaultPort.length) : lower;
}

/** The `@authority` of requests to `baseUrl`: host, and the port unless it is the default. */
export function authorityOf(baseUrl: string): string {
  return new URL(baseUrl).host;
}

function serializeString(text: string): string {
  if (!/^[\x20-\x7e]*$/.test(text)) throw new ConfigError(`${JSON.stringify(text)} is not printable ASCII`);
  return `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

function serializeInteger(value: number): string {
  if (!Number.isSafeInteger(value) || Math.abs(value) > 999_999_999_999_999) {
    throw new ConfigError(`${value} is not a structured-field integer`);
  }
  return String(value);
}

function checkKeyId(keyId: string): void {
  if (keyId.length === 0 || keyId.length > KEY_ID_BYTES_MAX || !/^[A-Za-z0-9_.:-]+$/.test(keyId)) {
    throw new ConfigError(`signing key id ${JSON.stringify(keyId)} must be 1 to ${KEY_ID_BYTES_MAX} letters, digits, '_', '-', '.' or ':'`);
  }
}
