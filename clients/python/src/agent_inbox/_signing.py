"""RFC 9421 HTTP Message Signatures for the agent's critical calls (claim, acknowledge,
release, heartbeat), under exactly the service's policy: components ``@method``, ``@path``,
``@authority`` and ``content-digest`` (RFC 9530, sha-256); parameters ``created``,
``expires`` (120 s later), ``keyid``, ``nonce`` (16 random bytes, base64url) and ``alg``;
label ``sig1``. The generic ``signature_base`` also reproduces RFC 9421 Appendix B.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ._errors import ConfigError

#: The label of the one signature an agent puts on a request.
REQUEST_SIGNATURE_LABEL = "sig1"
#: ``expires - created`` of a request signature (the service accepts at most 300).
REQUEST_SIGNATURE_WINDOW_SECONDS = 120
#: The components every inbox signature covers, in this order.
INBOX_COMPONENTS = ("@method", "@path", "@authority", "content-digest")
HMAC_SECRET_BYTES_MIN = 32
_KEY_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def content_digest(body: bytes) -> str:
    """RFC 9530 ``Content-Digest`` of the exact body bytes: ``sha-256=:<base64>:``."""
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"


@dataclass(frozen=True)
class SignatureParams:
    """The covered components and parameters, serialized in RFC 9421 order of this tuple:
    created, expires, keyid, nonce, alg, tag."""

    components: tuple[str, ...]
    created: int | None = None
    expires: int | None = None
    keyid: str | None = None
    nonce: str | None = None
    alg: str | None = None
    tag: str | None = None

    def serialize(self) -> str:
        inner = "(" + " ".join(_sf_string(c) for c in self.components) + ")"
        for name in ("created", "expires", "keyid", "nonce", "alg", "tag"):
            value = getattr(self, name)
            if value is None:
                continue
            inner += f";{name}=" + (str(value) if isinstance(value, int) else _sf_string(value))
        return inner


def _sf_string(text: str) -> str:
    if any(not 0x20 <= ord(ch) <= 0x7E for ch in text):
        raise ConfigError(f"{text!r} is not printable ASCII and cannot be signed")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def normalized_authority(authority: str, scheme: str = "https") -> str:
    """``@authority``: lower-cased, the scheme's default port removed."""
    authority = authority.lower()
    default = {"https": ":443", "http": ":80"}.get(scheme.lower())
    if default and authority.endswith(default):
        return authority[: -len(default)]
    return authority


def signature_base(
    method: str,
    authority: str,
    path: str,
    headers: dict[str, str],
    params: SignatureParams,
    scheme: str = "https",
) -> str:
    """The RFC 9421 §2.5 signature base. ``path`` has no query; ``headers`` are matched by
    lower-case name. Supports the derived components this service uses (``@method``,
    ``@path``, ``@authority``) and header fields."""
    lower = {k.lower(): v.strip(" \t") for k, v in headers.items()}
    lines = []
    for component in params.components:
        if component == "@method":
            value = method
        elif component == "@path":
            value = path or "/"
        elif component == "@authority":
            value = normalized_authority(authority, scheme)
        elif component.startswith("@"):
            raise ConfigError(f"component {component} is not supported")
        elif component in lower:
            value = lower[component]
        else:
            raise ConfigError(f"the request has no {component}, which the signature covers")
        lines.append(f"{_sf_string(component)}: {value}")
    lines.append('"@signature-params": ' + params.serialize())
    return "\n".join(lines)


class SigningKey:
    """An agent's request-signing key: ed25519 (registered by its public key) or hmac-sha256
    (a secret the service issued). Its ``repr`` never shows key material."""

    def __init__(self, key_id: str, algorithm: str, material: bytes) -> None:
        if not _KEY_ID.match(key_id):
            raise ConfigError(
                f"signing key id {key_id!r} must be 1 to 128 letters, digits, '_', '-', '.' or ':'"
            )
        if algorithm == "ed25519":
            if len(material) != 32:
                raise ConfigError("an ed25519 seed is 32 bytes")
            self._ed25519: Ed25519PrivateKey | None = Ed25519PrivateKey.from_private_bytes(material)
        elif algorithm == "hmac-sha256":
            if len(material) < HMAC_SECRET_BYTES_MIN:
                raise ConfigError(
                    f"an hmac-sha256 secret needs at least {HMAC_SECRET_BYTES_MIN} bytes"
                )
            self._ed25519 = None
        else:
            raise ConfigError(f"algorithm {algorithm!r} is not ed25519 or hmac-sha256")
        self.key_id = key_id
        self.algorithm = algorithm
        self._material = material

    @classmethod
    def ed25519(cls, key_id: str, seed: bytes) -> SigningKey:
        return cls(key_id, "ed25519", seed)

    @classmethod
    def hmac_sha256(cls, key_id: str, secret: bytes) -> SigningKey:
        return cls(key_id, "hmac-sha256", secret)

    @classmethod
    def generate_ed25519(cls, key_id: str | None = None) -> SigningKey:
        """A new random key; the id defaults to ``ak_`` and 16 random hex digits."""
        return cls.ed25519(key_id or "ak_" + os.urandom(8).hex(), os.urandom(32))

    @property
    def public_key(self) -> str | None:
        """ed25519: the 32-byte public key, base64url, as ``POST /v1/agent-keys`` takes it."""
        if self._ed25519 is None:
            return None
        raw = self._ed25519.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return b64url(raw)

    def sign_bytes(self, data: bytes) -> bytes:
        if self._ed25519 is not None:
            return self._ed25519.sign(data)
        mac = crypto_hmac.HMAC(self._material, hashes.SHA256())
        mac.update(data)
        return mac.finalize()

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r}, algorithm={self.algorithm!r})"


def sign(
    method: str,
    authority: str,
    path: str,
    headers: dict[str, str],
    params: SignatureParams,
    key: SigningKey,
    label: str,
) -> tuple[str, str]:
    """``(Signature-Input, Signature)`` values for one signature labelled ``label``."""
    base = signature_base(method, authority, path, headers, params)
    signature = key.sign_bytes(base.encode())
    return (
        f"{label}={params.serialize()}",
        f"{label}=:{base64.b64encode(signature).decode()}:",
    )


def sign_inbox_request(
    key: SigningKey,
    method: str,
    authority: str,
    path: str,
    body: bytes,
    now: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The three headers (``content-digest``, ``signature-input``, ``signature``) that sign
    one request as the service verifies it. A fresh nonce and ``created`` per call, so a retry
    is never a replay. ``path`` is without its query; ``body`` the exact bytes sent."""
    created = int(time.time()) if now is None else now
    digest = content_digest(body)
    params = SignatureParams(
        components=INBOX_COMPONENTS,
        created=created,
        expires=created + REQUEST_SIGNATURE_WINDOW_SECONDS,
        keyid=key.key_id,
        nonce=nonce or b64url(os.urandom(16)),
        alg=key.algorithm,
    )
    signature_input, signature = sign(
        method, authority, path, {"content-digest": digest}, params, key, REQUEST_SIGNATURE_LABEL
    )
    return {"content-digest": digest, "signature-input": signature_input, "signature": signature}


def authority_of(base_url: str) -> str:
    """What the HTTP client sends as ``Host`` for ``base_url``: host, and the port unless it
    is the scheme's default."""
    parts = urlsplit(base_url)
    if not parts.hostname:
        raise ConfigError(f"{base_url!r} names no host")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    default = 443 if parts.scheme == "https" else 80
    return host if port is None or port == default else f"{host}:{port}"
