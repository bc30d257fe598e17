"""The blocking client: every agent-facing endpoint as a typed method over ``httpx.Client``.
Bearer authentication with one retry after a refresh on 401, RFC 9421 signatures on claim,
acknowledge, release and heartbeat when a signing key is set, problems raised as
``ProblemError``, 429/503 repeated after ``Retry-After``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import TracebackType
from typing import TypeVar

import httpx

from . import _core as core
from . import _models as m
from ._credentials import Credentials
from ._errors import ProblemError, Unreachable
from ._signing import SigningKey, authority_of
from ._sse import SseEvent, SseParser

T = TypeVar("T")


class Client:
    def __init__(
        self,
        base_url: str,
        credentials: Credentials | str,
        *,
        signing_key: SigningKey | None = None,
        signature_authority: str | None = None,
        retry: core.RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = core.check_base_url(base_url)
        self.credentials = (
            Credentials.access_token(credentials) if isinstance(credentials, str) else credentials
        )
        self.signing_key = signing_key
        self.authority = signature_authority or authority_of(self.base_url)
        self.retry = retry or core.RetryPolicy()
        self._urls: dict[str, httpx.URL] = {}
        timeout = httpx.Timeout(core.REQUEST_TIMEOUT, connect=core.CONNECT_TIMEOUT)
        headers = {"user-agent": core.USER_AGENT}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        # Long polls and streams each get a connection of their own.
        self._own = httpx.Client(
            timeout=timeout,
            headers=headers,
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def close(self) -> None:
        self._http.close()
        self._own.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # The API.

    def subscribe(self, request: m.SubscribeRequest | None = None) -> m.SubscribeResponse:
        return self._send(core.subscribe(request or m.SubscribeRequest()))

    def session_heartbeat(
        self, session_id: str, request: m.SessionHeartbeatRequest | None = None
    ) -> m.SessionHeartbeatResponse:
        return self._send(core.session_heartbeat(session_id, request or m.SessionHeartbeatRequest()))

    def poll(self, request: m.PollRequest) -> m.PollResponse:
        """Poll after cursor; a long poll when ``wait_seconds`` is set."""
        return self._send(core.poll(request))

    def head(self) -> m.HeadResponse:
        answer = self._send(core.head())
        assert answer is not None
        return answer

    def head_if_changed(self, etag: str) -> m.HeadResponse | None:
        """``None`` while the head still matches ``etag`` (the service answers 304)."""
        return self._send(core.head(etag))

    def claim(self, request: m.ClaimRequest) -> m.ClaimResponse:
        return self._send(core.claim(request))

    def acknowledge(self, request: m.AcknowledgeRequest) -> m.AcknowledgeResponse:
        return self._send(core.acknowledge(request))

    def release(self, request: m.ReleaseRequest) -> m.ReleaseResponse:
        return self._send(core.release(request))

    def heartbeat(self, request: m.HeartbeatRequest) -> m.HeartbeatResponse:
        return self._send(core.heartbeat(request))

    def resync_page(self, after_seq: int = 0, limit: int | None = None) -> m.ResyncResponse:
        return self._send(core.resync_page(after_seq, limit))

    def stream_ticket(self, request: m.StreamTicketRequest | None = None) -> m.StreamTicketResponse:
        return self._send(core.stream_ticket(request or m.StreamTicketRequest()))

    def refresh(self, refresh_token: str) -> m.TokenResponse:
        """Trades a refresh token for new tokens (the answer carries the next refresh token)."""
        return self._send(core.refresh(refresh_token))

    def publish(self, request: m.PublishRequest) -> m.PublishResponse:
        """Needs a publisher token."""
        return self._send(core.publish(request))

    def signing_keys(self) -> m.AgentKeysResponse:
        return self._send(core.signing_keys())

    def register_signing_key(self, request: m.AgentKeyRequest) -> m.AgentKeyResponse:
        return self._send(core.register_signing_key(request))

    def retire_signing_key(self, key_id: str, after_seconds: int = 0) -> None:
        self._send(core.retire_signing_key(key_id, after_seconds))

    def tenant_policy(self) -> m.TenantPolicyResponse:
        """Needs an admin token."""
        return self._send(core.tenant_policy())

    def set_tenant_policy(self, request: m.TenantPolicyRequest) -> m.TenantPolicyResponse:
        """Needs an admin token; settings left ``None`` keep their value."""
        return self._send(core.set_tenant_policy(request))

    def sse(self, path: str = "/v1/streams/sse", last_event_id: int | None = None) -> Iterator[SseEvent]:
        """Server-Sent Events of the caller's inbox (data-less hints), until the stream ends."""
        for attempt in range(2):
            token = self._bearer()
            headers = core.sse_headers(token, last_event_id)
            try:
                with self._own.stream(
                    "GET", self.base_url + path, headers=headers, timeout=httpx.Timeout(None, connect=10.0)
                ) as response:
                    if response.status_code == 401 and attempt == 0 and self.credentials.invalidate(token):
                        continue
                    if not response.is_success:
                        response.read()
                        raise core.problem(response)
                    parser = SseParser()
                    for chunk in response.iter_raw():
                        yield from parser.feed(chunk)
                    return
            except httpx.TransportError as err:
                raise Unreachable(f"{type(err).__name__}: {path}") from err

    # Sending.

    def _url(self, path: str) -> httpx.URL:
        """Parsed once per path: parsing a URL costs more than the rest of a request's set-up."""
        url = self._urls.get(path)
        if url is None:
            if len(self._urls) > 256:
                self._urls.clear()
            url = self._urls[path] = httpx.URL(self.base_url + path)
        return url

    def _bearer(self) -> str:
        token = self.credentials.cached()
        if token is not None:
            return token
        while not self.credentials.try_lock():
            time.sleep(0.025)
        try:
            token = self.credentials.cached()
            if token is not None:
                return token
            obtained = time.monotonic()
            tokens = self._send(core.refresh(self.credentials.refresh_token()))
            return self.credentials.accept(tokens, obtained)
        finally:
            self.credentials.unlock()

    def _send(self, call: core.Call[T]) -> T:
        attempt = 0
        refreshed = False
        while True:
            attempt += 1
            token = self._bearer() if call.authenticated else None
            headers = core.attempt_headers(call, token, self.signing_key, self.authority)
            http = self._own if call.own_connection else self._http
            try:
                response = http.request(
                    call.method, self._url(call.path), content=call.body, headers=headers,
                    timeout=call.timeout,
                )
            except httpx.TransportError as err:
                raise Unreachable(f"{type(err).__name__}: {call.path.split('?')[0]}") from err
            try:
                return call.parse(response)
            except ProblemError as err:
                if (
                    token is not None
                    and not refreshed
                    and core.is_token_refusal(err)
                    and self.credentials.invalidate(token)
                ):
                    refreshed = True
                    continue
                delay = self.retry.delay(err, attempt)
                if delay is None:
                    raise
                time.sleep(delay)
