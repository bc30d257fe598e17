"""What the sync and the async client share: each endpoint as a ``Call`` (method, path, body
bytes, whether it is signed, how to read the answer), the headers of one attempt (bearer,
signature), problem decoding, and the retry policy for 429/503. No I/O here; the two clients
only send what this builds."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlencode

import httpx

from . import _models as m
from ._errors import ConfigError, ProblemError, ProtocolError, parse_retry_after
from ._schedule import Backoff, jitter
from ._signing import SigningKey, sign_inbox_request
from ._wire import decode, to_json_bytes

T = TypeVar("T")

#: How long an ordinary request may take before it counts as lost (seconds).
REQUEST_TIMEOUT = 20.0
#: Extra time a long poll gets beyond the wait it asked for.
LONG_POLL_GRACE = 10.0
CONNECT_TIMEOUT = 10.0
PROBLEM_BYTES_MAX = 16 * 1024
#: The members of openapi.json's ``Problem``; any other member is an extension.
PROBLEM_MEMBERS = frozenset({"type", "title", "status", "code", "detail", "instance"})
USER_AGENT = "agent-inbox-python/0.1.0"


@dataclass
class RetryPolicy:
    """Repeats a call the service refused as overloaded (503) or rate limited (429), after its
    ``Retry-After`` (capped at ``retry_after_max``) or a backoff."""

    attempts_max: int = 4
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, max=10.0))
    retry_after_max: float = 60.0

    def delay(self, err: ProblemError, attempt: int) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or ``None`` to give up."""
        if err.status not in (429, 503) or attempt >= self.attempts_max:
            return None
        if err.retry_after is not None:
            return min(err.retry_after, self.retry_after_max)
        return self.backoff.delay(attempt, jitter())


@dataclass
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: bytes | None = None
    signed: bool = False
    timeout: float = REQUEST_TIMEOUT
    #: A long poll: its own connection, so a proxy's cut is timed from its start.
    own_connection: bool = False
    authenticated: bool = True
    headers: dict[str, str] = field(default_factory=dict)


def check_base_url(base_url: str) -> str:
    base = base_url.strip().rstrip("/")
    for scheme in ("https://", "http://"):
        if base.startswith(scheme) and len(base) > len(scheme):
            return base
    raise ConfigError(
        f"{base_url!r} is not a server URL such as https://inbox.example or http://127.0.0.1:8080"
    )


def attempt_headers(
    call: Call[Any], token: str | None, signing_key: SigningKey | None, authority: str
) -> dict[str, str]:
    """Headers of one attempt; signed per attempt, so a retry carries a fresh nonce."""
    headers = dict(call.headers)
    if token is not None and call.authenticated:
        headers["authorization"] = f"Bearer {token}"
    if call.body is not None:
        headers["content-type"] = "application/json"
    if call.signed and signing_key is not None:
        path = call.path.split("?", 1)[0]
        headers.update(
            sign_inbox_request(signing_key, call.method, authority, path, call.body or b"")
        )
    return headers


def problem(response: httpx.Response) -> ProblemError:
    """The problem document of an error answer, or one made up from the status when the body
    is not one (a proxy's page, an empty body)."""
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    try:
        data = json.loads(response.content[:PROBLEM_BYTES_MAX])
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return ProblemError(
            int(data.get("status") or response.status_code),
            data["code"],
            str(data.get("detail", "")),
            title=str(data.get("title", "")),
            retry_after=retry_after,
            extensions={k: v for k, v in data.items() if k not in PROBLEM_MEMBERS},
        )
    return ProblemError(
        response.status_code,
        f"http_{response.status_code}",
        f"the service (or a proxy in front of it) answered {response.status_code} "
        "without a problem document",
        retry_after=retry_after,
    )


def is_token_refusal(err: ProblemError) -> bool:
    """Whether a 401 is about the access token rather than a signature (which a new token
    would not fix)."""
    return err.status == 401 and (
        err.code in ("unauthorized", "invalid_token", "token_expired") or err.code.startswith("http_")
    )


def json_of(cls: type[T]) -> Callable[[httpx.Response], T]:
    def parse(response: httpx.Response) -> T:
        if not response.is_success:
            raise problem(response)
        try:
            data = response.json()
        except ValueError as err:
            raise ProtocolError(f"the answer is not JSON: {err}") from err
        return decode(cls, data)

    return parse


def _nothing(response: httpx.Response) -> None:
    if not response.is_success:
        raise problem(response)


def _head(response: httpx.Response) -> m.HeadResponse | None:
    if response.status_code == 304:
        return None
    head = json_of(m.HeadResponse)(response)
    head.etag = response.headers.get("etag")
    return head


def _post(path: str, body: Any, cls: type[T], signed: bool = False) -> Call[T]:
    return Call("POST", path, json_of(cls), body=to_json_bytes(body), signed=signed)


# One function per endpoint, named like the client methods.


def subscribe(request: m.SubscribeRequest) -> Call[m.SubscribeResponse]:
    return _post("/v1/agent-sessions/subscribe", request, m.SubscribeResponse)


def session_heartbeat(
    session_id: str, request: m.SessionHeartbeatRequest
) -> Call[m.SessionHeartbeatResponse]:
    path = f"/v1/agent-sessions/{quote(session_id, safe='')}/heartbeat"
    return _post(path, request, m.SessionHeartbeatResponse)


def poll(request: m.PollRequest) -> Call[m.PollResponse]:
    call = _post("/v1/inbox/poll-after-cursor", request, m.PollResponse)
    if request.wait_seconds:
        call.timeout = REQUEST_TIMEOUT + request.wait_seconds + LONG_POLL_GRACE
        call.own_connection = True
    return call


def head(if_none_match: str | None = None) -> Call[m.HeadResponse | None]:
    headers = {"if-none-match": if_none_match} if if_none_match else {}
    return Call("GET", "/v1/inbox/head", _head, headers=headers)


def claim(request: m.ClaimRequest) -> Call[m.ClaimResponse]:
    return _post("/v1/inbox/claim", request, m.ClaimResponse, signed=True)


def acknowledge(request: m.AcknowledgeRequest) -> Call[m.AcknowledgeResponse]:
    return _post("/v1/inbox/acknowledge", request, m.AcknowledgeResponse, signed=True)


def release(request: m.ReleaseRequest) -> Call[m.ReleaseResponse]:
    return _post("/v1/inbox/release", request, m.ReleaseResponse, signed=True)


def heartbeat(request: m.HeartbeatRequest) -> Call[m.HeartbeatResponse]:
    return _post("/v1/inbox/heartbeat", request, m.HeartbeatResponse, signed=True)


def resync_page(after_seq: int = 0, limit: int | None = None) -> Call[m.ResyncResponse]:
    query: dict[str, int] = {"after_seq": after_seq}
    if limit is not None:
        query["limit"] = limit
    return Call("GET", "/v1/inbox/resync?" + urlencode(query), json_of(m.ResyncResponse))


def stream_ticket(request: m.StreamTicketRequest) -> Call[m.StreamTicketResponse]:
    return _post("/v1/streams/tickets", request, m.StreamTicketResponse)


def refresh(refresh_token: str) -> Call[m.TokenResponse]:
    call = _post("/v1/auth/refresh", m.RefreshRequest(refresh_token=refresh_token), m.TokenResponse)
    call.authenticated = False
    return call


def publish(request: m.PublishRequest) -> Call[m.PublishResponse]:
    return _post("/v1/events", request, m.PublishResponse)


def signing_keys() -> Call[m.AgentKeysResponse]:
    return Call("GET", "/v1/agent-keys", json_of(m.AgentKeysResponse))


def register_signing_key(request: m.AgentKeyRequest) -> Call[m.AgentKeyResponse]:
    # Signed when a key is set: an agent's second key must be signed by a current one.
    return _post("/v1/agent-keys", request, m.AgentKeyResponse, signed=True)


def retire_signing_key(key_id: str, after_seconds: int = 0) -> Call[None]:
    path = f"/v1/agent-keys/{quote(key_id, safe='')}"
    if after_seconds:
        path += f"?after_seconds={after_seconds}"
    return Call("DELETE", path, _nothing, signed=True)


def tenant_policy() -> Call[m.TenantPolicyResponse]:
    return Call("GET", "/v1/admin/tenant-policy", json_of(m.TenantPolicyResponse))


def set_tenant_policy(request: m.TenantPolicyRequest) -> Call[m.TenantPolicyResponse]:
    return _post("/v1/admin/tenant-policy", request, m.TenantPolicyResponse)


def sse_headers(token: str | None, last_event_id: int | None) -> dict[str, str]:
    headers = {"accept": "text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    if last_event_id is not None:
        headers["last-event-id"] = str(last_event_id)
    return headers
