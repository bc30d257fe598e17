"""The asyncio client: the same calls as ``Client`` (built by the same ``_core``), awaited,
over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
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


class AsyncClient:
    def __init__(
        self,
        base_url: str,
        credentials: Credentials | str,
        *,
        signing_key: SigningKey | None = None,
        signature_authority: str | None = None,
        retry: core.RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
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
        self._http = httpx.AsyncClient(
            timeout=timeout,
            headers=headers,
            transport=transport,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        # Long polls and streams each get a connection of their own.
        self._own = httpx.AsyncClient(
            timeout=timeout,
            headers=headers,
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._own.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # The API.

    async def subscribe(self, request: m.SubscribeRequest | None = None) -> m.SubscribeResponse:
        return await self._send(core.subscribe(request or m.SubscribeRequest()))

    async def session_heartbeat(
        self, session_id: str, request: m.SessionHeartbeatRequest | None = None
    ) -> m.SessionHeartbeatResponse:
        return await self._send(
            core.session_heartbeat(session_id, request or m.SessionHeartbeatRequest())
        )

    async def poll(self, request: m.PollRequest) -> m.PollResponse:
        """Poll after cursor; a long poll when ``wait_seconds`` is set."""
        return await self._send(core.poll(request))

    async def head(self) -> m.HeadResponse:
        answer = await self._send(core.head())
        assert answer is not None
        return answer

    async def head_if_changed(self, etag: str) -> m.HeadResponse | None:
        """``None`` while the head still matches ``etag`` (the service answers 304)."""
        return await self._send(core.head(etag))

    async def claim(self, request: m.ClaimRequest) -> m.ClaimResponse:
        return await self._send(core.claim(request))

    async def acknowledge(self, request: m.AcknowledgeRequest) -> m.AcknowledgeResponse:
        return await self._send(core.acknowledge(request))

    async def release(self, request: m.ReleaseRequest) -> m.ReleaseResponse:
        return await self._send(core.release(request))

    async def heartbeat(self, request: m.HeartbeatRequest) -> m.HeartbeatResponse:
        return await self._send(core.heartbeat(request))

    async def resync_page(self, after_seq: int = 0, limit: int | None = None) -> m.ResyncResponse:
        return await self._send(core.resync_page(after_seq, limit))

    async def stream_ticket(
        self, request: m.StreamTicketRequest | None = None
    ) -> m.StreamTicketResponse:
        return await self._send(core.stream_ticket(request or m.StreamTicketRequest()))

    async def refresh(self, refresh_token: str) -> m.TokenResponse:
        return await self._send(core.refresh(refresh_token))

    async def publish(self, request: m.PublishRequest) -> m.PublishResponse:
        return await self._send(core.publish(request))

    async def signing_keys(self) -> m.AgentKeysResponse:
        return await self._send(core.signing_keys())

    async def register_signing_key(self, request: m.AgentKeyRequest) -> m.AgentKeyResponse:
        return await self._send(core.register_signing_key(request))

    async def retire_signing_key(self, key_id: str, after_seconds: int = 0) -> None:
        await self._send(core.retire_signing_key(key_id, after_seconds))

    async def tenant_policy(self) -> m.TenantPolicyResponse:
        return await self._send(core.tenant_policy())

    async def set_tenant_policy(self, request: m.TenantPolicyRequest) -> m.TenantPolicyResponse:
        return await self._send(core.set_tenant_policy(request))

    async def sse(
        self,
        path: str = "/v1/streams/sse",
        last_event_id: int | None = None,
        idle_timeout: float | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[SseEvent]:
        """Server-Sent Events until the stream ends; a stream silent for ``idle_timeout``
        seconds is taken as dead (``Unreachable``). ``on_open`` is called once it is open."""
        for attempt in range(2):
            token = await self._bearer()
            headers = core.sse_headers(token, last_event_id)
            timeout = httpx.Timeout(core.REQUEST_TIMEOUT, connect=core.CONNECT_TIMEOUT, read=idle_timeout)
            try:
                async with self._own.stream(
                    "GET", self.base_url + path, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code == 401 and attempt == 0 and self.credentials.invalidate(token):
                        continue
                    if not response.is_success:
                        await response.aread()
                        raise core.problem(response)
                    if on_open is not None:
                        on_open()
                    parser = SseParser()
                    async for chunk in response.aiter_raw():
                        for event in parser.feed(chunk):
                            yield event
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

    async def _bearer(self) -> str:
        token = self.credentials.cached()
        if token is not None:
            return token
        while not self.credentials.try_lock():
            await asyncio.sleep(0.025)
        try:
            token = self.credentials.cached()
            if token is not None:
                return token
            obtained = time.monotonic()
            tokens = await self._send(core.refresh(self.credentials.refresh_token()))
            return self.credentials.accept(tokens, obtained)
        finally:
            self.credentials.unlock()

    async def _send(self, call: core.Call[T]) -> T:
        attempt = 0
        refreshed = False
        while True:
            attempt += 1
            token = await self._bearer() if call.authenticated else None
            headers = core.attempt_headers(call, token, self.signing_key, self.authority)
            http = self._own if call.own_connection else self._http
            try:
                response = await http.request(
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
                await asyncio.sleep(delay)
