"""How the agent hears that work may exist: a Server-Sent Events stream, falling back to long
polls when streams fail or are cut short (by a proxy, a load balancer), falling back to the
runner's adaptive polling when long polls fail too, and trying the better transport again
later. A hint carries no data: it only wakes the runner, which polls after its cursor. Every
(re)connection wakes the runner as well, since hints may have been missed meanwhile."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ._async_client import AsyncClient
from ._errors import InboxError, ProblemError, ProtocolError, Unreachable
from ._models import PollRequest
from ._schedule import Backoff, LongPollWait, TransportPolicy, jitter

log = logging.getLogger("agent_inbox")

TransportKind = Literal["sse", "long-poll", "poll"]


@dataclass
class TransportConfig:
    """Transports to use, best first (``poll`` needs no connection: always the last resort)."""

    allowed: tuple[TransportKind, ...] = ("sse", "long-poll", "poll")
    policy: TransportPolicy = field(default_factory=TransportPolicy)
    reconnect: Backoff = field(default_factory=Backoff)
    #: Longest long-poll wait asked for (the service caps it; 25 s suits most proxies).
    long_poll_wait_seconds: int = 25
    #: A stream silent this long is presumed dead; ``None``: three service heartbeats + 5 s.
    stream_idle_timeout: float | None = None


@dataclass
class TransportStatus:
    kind: TransportKind
    #: Hints are arriving. When false the runner polls on its adaptive schedule.
    connected: bool


class Signals:
    """Between the transport task and the runner (one event loop, so plain attributes)."""

    def __init__(
        self,
        head: int,
        on_hint: Callable[[], None],
        on_status: Callable[[TransportStatus], None],
        on_superseded: Callable[[], None],
    ) -> None:
        self.known_head = head
        self.hint = on_hint
        self.status = on_status
        self.superseded = on_superseded
        #: Asks the transport to drop its connection and reconnect now (after a clock jump).
        self.reconnect = asyncio.Event()
        #: Set by the runner while the service does not answer at all: the transport then
        #: waits for ``reachable`` instead of probing on its own schedule.
        self.service_down = False
        self.reachable = asyncio.Event()


async def _until(event: asyncio.Event, timeout: float | None) -> bool:
    """Waits for ``event`` (clearing it) up to ``timeout``; whether it fired."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    event.clear()
    return True


class Transport:
    def __init__(
        self,
        client: AsyncClient,
        config: TransportConfig,
        sse_path: str | None,
        heartbeat_interval: float,
        signals: Signals,
    ) -> None:
        self.client = client
        self.config = config
        self.sse_path = sse_path
        self.heartbeat_interval = heartbeat_interval
        self.signals = signals
        self._status: TransportStatus | None = None

    def _set_status(self, kind: TransportKind, connected: bool) -> None:
        status = TransportStatus(kind, connected)
        if status != self._status:
            self._status = status
            self.signals.status(status)

    def _ladder(self) -> list[TransportKind]:
        ladder: list[TransportKind] = []
        for kind in self.config.allowed:
            if kind == "sse" and self.sse_path is None:
                continue
            if kind not in ladder:
                ladder.append(kind)
        return ladder or ["poll"]

    async def _pause(self, delay: float) -> None:
        await _until(self.signals.reconnect, delay)

    async def run(self) -> None:
        ladder = self._ladder()
        rung = 0
        failures = 0
        fallback_since: float | None = None
        long_poll = LongPollWait.new(self.config.long_poll_wait_seconds)
        policy = self.config.policy
        while True:
            if (
                rung > 0
                and fallback_since is not None
                and policy.should_upgrade(time.monotonic() - fallback_since)
            ):
                log.debug("trying %s again", ladder[0])
                rung, failures, fallback_since = 0, 0, None
            kind = ladder[rung]
            failed: InboxError | None = None
            if kind == "sse":
                end, lived, error = await self._stream()
                if end == "reconnect":
                    failures = 0
                    continue
                if end == "superseded":
                    self._set_status(kind, False)
                    self.signals.superseded()
                    return
                self._set_status(kind, False)
                if error is not None:
                    failed = error
                elif policy.stream_failed(lived):
                    failed = Unreachable(f"the event stream was cut after {lived * 1000:.0f} ms")
            elif kind == "long-poll":
                upgrade_at = (
                    fallback_since + policy.upgrade_after
                    if rung > 0 and fallback_since is not None
                    else None
                )
                failed = await self._long_poll(long_poll, upgrade_at)
            else:
                self._set_status(kind, False)
                since = fallback_since if fallback_since is not None else time.monotonic()
                await self._pause(max(since + policy.upgrade_after - time.monotonic(), 0.0))
                continue
            if failed is None:
                failures = 0
                if kind == "sse":
                    # Reopened after a short random pause, so a fleet spreads out.
                    await self._pause(0.25 * jitter())
            elif self.signals.service_down:
                # The service itself is down, not this transport: stand by for the runner.
                log.debug("%s: the service is unreachable; waiting", kind)
                failures = 0
                reachable = asyncio.ensure_future(self.signals.reachable.wait())
                reconnect = asyncio.ensure_future(self.signals.reconnect.wait())
                await asyncio.wait({reachable, reconnect}, return_when=asyncio.FIRST_COMPLETED)
                for waiter in (reachable, reconnect):
                    waiter.cancel()
                self.signals.reachable.clear()
                self.signals.reconnect.clear()
            else:
                failures += 1
                self.signals.hint()
                if policy.should_fall_back(failures) and rung + 1 < len(ladder):
                    log.info("falling back from %s to %s: %s", kind, ladder[rung + 1], failed)
                    rung += 1
                    failures = 0
                    fallback_since = time.monotonic()
                    self._set_status(ladder[rung], False)
                else:
                    await self._pause(self.config.reconnect.delay(failures, jitter()))

    async def _stream(self) -> tuple[str, float, InboxError | None]:
        """One SSE stream from opening to its end: ``(end, lived seconds, error)``."""
        path = self.sse_path or "/v1/streams/sse"
        idle = self.config.stream_idle_timeout or self.heartbeat_interval * 3 + 5
        opened: list[float] = []

        def on_open() -> None:
            opened.append(time.monotonic())
            self._set_status("sse", True)
            # Hints sent while no stream was open are lost: catch up now.
            self.signals.hint()

        async def consume() -> str:
            async for event in self.client.sse(path, self.signals.known_head, idle, on_open):
                if event.event == "session.superseded":
                    log.info("the service says a newer session of this agent took over")
                    return "superseded"
                if event.event == "inbox.updated":
                    try:
                        head = int(json.loads(event.data)["head_seq"])
                        self.signals.known_head = max(self.signals.known_head, head)
                    except (ValueError, KeyError, TypeError):
                        pass
                    self.signals.hint()
            return "closed"

        stream = asyncio.ensure_future(consume())
        reconnect = asyncio.ensure_future(self.signals.reconnect.wait())
        try:
            await asyncio.wait({stream, reconnect}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not stream.done():
                stream.cancel()
            reconnect.cancel()
        lived = time.monotonic() - opened[0] if opened else 0.0
        if not stream.done() or stream.cancelled():
            self.signals.reconnect.clear()
            return "reconnect", lived, None
        error = stream.exception()
        if error is None:
            return stream.result(), lived, None
        if isinstance(error, ProblemError) and error.code == "session_superseded":
            return "superseded", lived, None
        if isinstance(error, ProblemError) and error.code == "session_not_found":
            # The session was swept; a stream without one works the same.
            self.sse_path = "/v1/streams/sse"
        if opened and isinstance(error, Unreachable):
            return "closed", lived, None
        if isinstance(error, InboxError):
            return "closed", lived, error
        # Not an operating error (a bug, or something this client does not expect): keep the
        # transport alive, counting it as a failed stream, rather than go silently deaf.
        log.error("the event stream failed unexpectedly: %r", error)
        return "closed", lived, ProtocolError(repr(error))

    async def _long_poll(self, wait: LongPollWait, upgrade_at: float | None) -> InboxError | None:
        """One long poll after the known head. Until a poll has answered the first does not
        wait, so the runner learns quickly that hints flow again."""
        connected = self._status == TransportStatus("long-poll", True)
        request = PollRequest(
            after_seq=self.signals.known_head,
            limit=1,
            wait_seconds=wait.wait_seconds if connected else None,
        )
        started = time.monotonic()
        answer = asyncio.ensure_future(self.client.poll(request))
        reconnect = asyncio.ensure_future(self.signals.reconnect.wait())
        timeout = None if upgrade_at is None else max(upgrade_at - started, 0.0)
        try:
            await asyncio.wait({answer, reconnect}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reconnect.cancel()
            if not answer.done():
                answer.cancel()
        if not answer.done() or answer.cancelled():
            self.signals.reconnect.clear()
            return None
        error = answer.exception()
        if error is None:
            page = answer.result()
            if connected:
                wait.on_answer()
            self._set_status("long-poll", True)
            previous = self.signals.known_head
            self.signals.known_head = max(previous, page.head_seq)
            if page.head_seq > previous or page.events or page.nudged:
                self.signals.hint()
            return None
        if isinstance(error, ProblemError) and error.code == "cursor_reset_required":
            # The runner resyncs; pause so this loop does not spin meanwhile.
            self.signals.hint()
            await self._pause(1.0)
            return None
        if isinstance(error, ProblemError) and error.code == "invalid_field":
            wait.on_refused()
            return error
        self._set_status("long-poll", False)
        if not isinstance(error, InboxError):
            log.error("a long poll failed unexpectedly: %r", error)
            return ProtocolError(repr(error))
        elapsed = time.monotonic() - started
        if isinstance(error, Unreachable) and 0.5 <= elapsed < wait.wait_seconds:
            wait.on_cut(elapsed)
        return error
