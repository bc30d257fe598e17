"""RFC 9421 Appendix B vectors (B.2.5 hmac-sha256, B.2.6 ed25519), byte for byte, and the
inbox policy's header shape. The server-side check of the same code is in test_signing.py."""

from __future__ import annotations

import base64

from agent_inbox import SigningKey
from agent_inbox._signing import SignatureParams, content_digest, sign, sign_inbox_request, signature_base

# RFC 9421 §B.2 test-request.
HEADERS = {
    "Host": "example.com",
    "Date": "Tue, 20 Apr 2021 02:07:55 GMT",
    "Content-Type": "application/json",
    "Content-Digest": "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
    "Content-Length": "18",
}
CREATED = 1618884473
SHARED_SECRET = base64.b64decode(
    "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ=="
)
ED25519_PKCS8 = base64.b64decode("MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF")


def test_b_2_5_hmac_sha256() -> None:
    params = SignatureParams(("date", "@authority", "content-type"), created=CREATED, keyid="test-shared-secret")
    base = signature_base("POST", "example.com", "/foo", HEADERS, params)
    assert base == "\n".join(
        [
            '"date": Tue, 20 Apr 2021 02:07:55 GMT',
            '"@authority": example.com',
            '"content-type": application/json',
            '"@signature-params": ("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"',
        ]
    )
    key = SigningKey.hmac_sha256("test-shared-secret", SHARED_SECRET)
    signature_input, signature = sign("POST", "example.com", "/foo", HEADERS, params, key, "sig-b25")
    assert signature_input == 'sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"'
    assert signature == "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:"


def test_b_2_6_ed25519() -> None:
    params = SignatureParams(
        ("date", "@method", "@path", "@authority", "content-type", "content-length"),
        created=CREATED,
        keyid="test-key-ed25519",
    )
    key = SigningKey.ed25519("test-key-ed25519", ED25519_PKCS8[-32:])
    assert key.public_key == "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"
    signature_input, signature = sign("POST", "example.com", "/foo", HEADERS, params, key, "sig-b26")
    assert signature_input == (
        'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");'
        'created=1618884473;keyid="test-key-ed25519"'
    )
    assert signature == (
        "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:"
    )


def test_inbox_signatures_cover_the_policy_with_a_fresh_nonce() -> None:
    key = SigningKey.ed25519("ak_1", bytes([5]) * 32)
    body = b'{"limit":10}'
    first = sign_inbox_request(key, "POST", "127.0.0.1:8080", "/v1/inbox/claim", body, now=1_750_000_000)
    second = sign_inbox_request(key, "POST", "127.0.0.1:8080", "/v1/inbox/claim", body, now=1_750_000_000)
    assert first["content-digest"] == content_digest(body)
    assert first["content-digest"].startswith("sha-256=:")
    assert first["signature-input"].startswith(
        'sig1=("@method" "@path" "@authority" "content-digest");created=1750000000;expires=1750000120;keyid="ak_1";nonce="'
    )
    assert first["signature-input"].endswith(';alg="ed25519"')
    assert first["signature-input"] != second["signature-input"], "a new nonce every time"
    assert "seed" not in repr(key) and "ak_1" in repr(key)


def test_authority_drops_only_the_default_port() -> None:
    from agent_inbox._signing import authority_of

    assert authority_of("http://127.0.0.1:8080") == "127.0.0.1:8080"
    assert authority_of("https://inbox.example:443") == "inbox.example"
    assert authority_of("http://inbox.example") == "inbox.example"
    assert authority_of("https://inbox.example:8443") == "inbox.example:8443"
    assert authority_of("http://[::1]:8080") == "[::1]:8080"
