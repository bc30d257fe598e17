// RFC 9421 Appendix B vectors (B.2.5 hmac-sha256, B.2.6 ed25519) byte for byte, and the inbox
// policy's headers as crates/inbox-trust builds and verifies them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { webcrypto } from "node:crypto";

import { SigningKey, contentDigest, serializeParams, signInboxRequest, signMessage, signatureBase } from "../../dist/node.js";

const fromB64 = (text) => new Uint8Array(Buffer.from(text, "base64"));

// RFC 9421 §B.1.4 test-key-ed25519 (PKCS #8 and SPKI PEM bodies) and §B.1.5 test-shared-secret.
const ED25519_PRIVATE = "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF";
const ED25519_PUBLIC = "MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=";
const SHARED_SECRET = "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==";
const CREATED = 1618884473;

// RFC 9421 §B.2 test-request.
const testRequest = {
  method: "POST",
  authority: "example.com",
  target: "/foo?param=Value&Pet=dog",
  headers: {
    Host: "example.com",
    Date: "Tue, 20 Apr 2021 02:07:55 GMT",
    "Content-Type": "application/json",
    "Content-Digest": "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
    "Content-Length": "18",
  },
};

test("B.2.5: hmac-sha256 signature base and signature", async () => {
  const params = {
    components: ["date", "@authority", "content-type"],
    parameters: [["created", CREATED], ["keyid", "test-shared-secret"]],
  };
  assert.equal(
    signatureBase(testRequest, params),
    [
      '"date": Tue, 20 Apr 2021 02:07:55 GMT',
      '"@authority": example.com',
      '"content-type": application/json',
      '"@signature-params": ("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"',
    ].join("\n"),
  );
  const key = await SigningKey.hmacSha256("test-shared-secret", fromB64(SHARED_SECRET));
  const signed = await signMessage(testRequest, "sig-b25", params, key);
  assert.equal(signed["signature-input"], 'sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"');
  assert.equal(signed.signature, "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:");
});

test("B.2.6: ed25519 signature base and signature, and the published signature verifies", async () => {
  const params = {
    components: ["date", "@method", "@path", "@authority", "content-type", "content-length"],
    parameters: [["created", CREATED], ["keyid", "test-key-ed25519"]],
  };
  const base = signatureBase(testRequest, params);
  assert.equal(
    base,
    [
      '"date": Tue, 20 Apr 2021 02:07:55 GMT',
      '"@method": POST',
      '"@path": /foo',
      '"@authority": example.com',
      '"content-type": application/json',
      '"content-length": 18',
      '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
    ].join("\n"),
  );
  const key = await SigningKey.ed25519FromPkcs8("test-key-ed25519", fromB64(ED25519_PRIVATE));
  assert.equal(key.publicKey, "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs", "the JWK x of §B.1.4");
  const signed = await signMessage(testRequest, "sig-b26", params, key);
  assert.equal(
    signed["signature-input"],
    'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
  );
  const published = "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==";
  assert.equal(signed.signature, `sig-b26=:${published}:`);

  const publicKey = await webcrypto.subtle.importKey("spki", fromB64(ED25519_PUBLIC), { name: "Ed25519" }, false, ["verify"]);
  const verify = (text) => webcrypto.subtle.verify({ name: "Ed25519" }, publicKey, fromB64(published), new TextEncoder().encode(text));
  assert.equal(await verify(base), true);
  assert.equal(await verify(base.replace("/foo", "/bar")), false, "a moved request does not verify");
});

test("inbox requests carry the service's components and parameters, a fresh nonce each time", async () => {
  const key = await SigningKey.ed25519FromSeed("ak_1", new Uint8Array(32).fill(5));
  const body = new TextEncoder().encode('{"limit":10}');
  const request = { method: "POST", authority: "127.0.0.1:8080", path: "/v1/inbox/claim", body };
  const fixed = await signInboxRequest(key, request, 1_750_000_000, "n1");
  assert.equal(fixed["content-digest"], await contentDigest(body));
  assert.match(fixed["content-digest"], /^sha-256=:[A-Za-z0-9+/]{43}=:$/);
  assert.equal(
    fixed["signature-input"],
    'sig1=("@method" "@path" "@authority" "content-digest");created=1750000000;expires=1750000120;keyid="ak_1";nonce="n1";alg="ed25519"',
  );
  assert.match(fixed.signature, /^sig1=:[A-Za-z0-9+/]{86}==:$/);
  const first = await signInboxRequest(key, request);
  const second = await signInboxRequest(key, request);
  assert.notEqual(first["signature-input"], second["signature-input"], "a new nonce every time");
  assert.match(first["signature-input"], /nonce="[A-Za-z0-9_-]{22}"/, "16 random bytes, base64url");
});

test("the default port is not part of the authority, and bad input is refused clearly", async () => {
  const params = { components: ["@authority"], parameters: [] };
  assert.equal(signatureBase({ method: "GET", authority: "Inbox.Example:443", target: "/", headers: {} }, params).split("\n")[0], '"@authority": inbox.example');
  assert.equal(serializeParams({ components: ["@method"], parameters: [["keyid", 'a"b']] }), '("@method");keyid="a\\"b"');
  await assert.rejects(SigningKey.hmacSha256("k", new Uint8Array(8)), (error) => error.code === "config");
  await assert.rejects(SigningKey.ed25519FromSeed("bad id", new Uint8Array(32)), /signing key id/);
  assert.throws(() => signatureBase({ method: "GET", authority: "a", target: "/", headers: {} }, { components: ["date"], parameters: [] }), /no date header/);
});
