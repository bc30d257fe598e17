"""The handler contract and the runner's settings: the event a handler gets, the outcomes it
can ask for (return, ``Retry``, ``Fatal``, ``QuarantineError``), how an event ended, what the runner reports as it
goes, and ``AgentConfig``. Kept apart from the runner so the pieces of it share one vocabulary
without importing each other."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
import threading
import time
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Union

from ._limits import REASON_BYTES_MAX
from ._models import EventEnvelope, PublishRequest, QuarantineClass, ResyncResponse
from ._schedule import OUTAGE_BACKOFF, Backoff, PollSchedule
from ._transport import TransportConfig


class Retry(Exception):
    """Raised by a handler: try this event again later. It is released, claimable again
    after ``after`` seconds."""

    def __init__(self, after: float = 0.0, reason: str = "retry") -> None:
        super().__init__(f"retry after {after} s: {reason}")
        self.after = after
        self.reason = reason


class Fatal(Exception):
    """Raised by a handler: this event is never going to work. It is acknowledged as
    ``failed`` with ``reason`` (control characters become spaces, cut to 200 bytes), which
    the service keeps with the dead letter for an operator."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: Why an event was set aside: the label operators see (seed 001's anomalies).
QUARANTINE_CLASSES: tuple[QuarantineClass, ...] = typing.get_args(QuarantineClass)
#: The service keeps at most this many bytes of a reason (a quarantine's, a dead letter's).
QUARANTINE_REASON_BYTES_MAX = REASON_BYTES_MAX
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


class QuarantineError(Exception):
    """Raised by a handler: set this event aside for a person — never retried, never a dead
    letter. For example a payload an LLM agent suspects of a prompt injection. It is
    acknowledged as ``quarantined`` with ``reason`` (control characters become spaces, cut to
    200 bytes) and ``quarantine_class``, one of ``QUARANTINE_CLASSES`` (default ``other``)."""

    def __init__(self, reason: str, quarantine_class: str = "other") -> None:
        self.reason = quarantine_reason(reason)
        self.quarantine_class: QuarantineClass = known_quarantine_class(quarantine_class)
        super().__init__(self.reason)


def known_quarantine_class(name: str) -> QuarantineClass:
    """``name`` when it is one of ``QUARANTINE_CLASSES``, else ``other``."""
    for known in QUARANTINE_CLASSES:
        if name == known:
            return known
    return "other"


def quarantine_reason(reason: str) -> str:
    """A reason the service accepts: no control characters, 1 to 200 bytes of UTF-8, cut at a
    character."""
    return fit_reason(reason) or "the handler quarantined the event"


def fit_reason(reason: str) -> str:
    """A handler's reason as the service keeps it: control characters (Unicode Cc) as spaces,
    trimmed of white space, at most 200 bytes of UTF-8 cut at a character; empty when nothing is
    left (the shared vectors' ``reason.fit``)."""
    text = _CONTROL.sub(" ", str(reason)).strip()
    return text.encode()[:QUARANTINE_REASON_BYTES_MAX].decode(errors="ignore").rstrip()


@dataclass
class Event:
    """One claimed event, as the handler gets it."""

    envelope: EventEnvelope
    #: When the lease ends unless heartbeats extend it (the runner does that).
    lease_until_utc: str

    @property
    def event_id(self) -> str:
        return self.envelope.event_id

    @property
    def event_type(self) -> str:
        return self.envelope.event_type

    @property
    def inbox_seq(self) -> int:
        return self.envelope.inbox_seq

    @property
    def payload(self) -> Any:
        return self.envelope.payload


@dataclass
class Outcome:
    """How an event ended for this agent: ``acked``, ``failed`` (dead-lettered),
    ``quarantined`` (set aside for a person; ``reason`` and ``quarantine_class`` say why),
    ``released``, ``deduplicated`` (processed before, acknowledged without running) or
    ``unconfirmed`` (its acknowledgement or release did not go through)."""

    kind: str
    reason: str = ""
    after: float = 0.0
    quarantine_class: str = ""


@dataclass
class Progress:
    """What the runner reports as it goes: ``subscribed``, ``transport``, ``disconnected``,
    ``scanned``, ``started``, ``finished``, ``lease_lost``, ``resynced``, ``clock_jumped``."""

    kind: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    acked: int = 0
    failed: int = 0
    quarantined: int = 0
    released: int = 0
    deduplicated: int = 0
    unconfirmed: int = 0
    resyncs: int = 0


@dataclass
class AgentConfig:
    """Defaults follow the design: SSE, then long poll, then polling from 1 s growing to
    5 min; one event at a time; the service's default lease."""

    device_id: str | None = None
    #: Handlers running at once. An event whose outcome is recorded frees its slot while its
    #: acknowledgement is on the way, so the next claim overlaps it.
    concurrency: int = 1
    #: Lease asked for per claim; ``None`` is the service's default.
    lease_seconds: int | None = None
    transport: TransportConfig = field(default_factory=TransportConfig)
    #: Polling while nothing is connected.
    poll: PollSchedule = field(default_factory=PollSchedule)
    #: Probing while the service cannot be reached (refused or broken connections, timeouts,
    #: 5xx): ``OUTAGE_BACKOFF``, 0.5 s doubling to 2 s, so a returning service is found within
    #: about 2 s; a ``Retry-After`` from the service is obeyed. Reset by the first request that
    #: works.
    outage: Backoff = OUTAGE_BACKOFF
    ack_retry: Backoff = field(default_factory=lambda: Backoff(base=0.2, max=30.0))
    ack_attempts_max: int = 30
    page_size: int = 100
    scan_pages_max: int = 10
    clock_check: float = 1.0
    clock_tolerance: float = 5.0
    #: On shutdown, how long running handlers get to finish before their events are released.
    shutdown_grace: float = 30.0
    #: Retry delay for a handler exception that is neither ``Retry`` nor ``Fatal``.
    unexpected_error_retry_seconds: float = 30.0
    observer: Callable[[Progress], None] | None = None


@dataclass
class HandOff:
    """What a handler returns to hand its work on: the follow-up publishes are committed with
    the event's acknowledgement, in one transaction and only while the lease holds, so the next
    agent of a chain gets each exactly once (a retry finds the first publishes)."""

    follow_ups: list[PublishRequest]


Handler = Callable[[Event], Union[Awaitable[Union[HandOff, None]], HandOff, None]]
ResyncCallback = Callable[[ResyncResponse], Union[Awaitable[None], None]]


def _is_async(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)
    )


async def _invoke(function: Callable[[Any], Any], is_async: bool, argument: Any) -> Any:
    """Awaits an async callback; runs a plain one in a worker thread. Answers what it returned."""
    if is_async:
        return await function(argument)
    result = await _in_daemon_thread(function, argument)
    if inspect.isawaitable(result):
        return await result
    return result


async def _in_daemon_thread(function: Callable[[Any], Any], argument: Any) -> Any:
    """``asyncio.to_thread`` in a daemon thread of its own: a handler still running when the
    shutdown grace ends (its event released) is abandoned, and does not hold the process's
    exit as a worker of the default executor would."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

    def work() -> None:
        try:
            result, error = context.run(function, argument), None
        except BaseException as err:  # noqa: BLE001 - handed to the awaiting task
            result, error = None, err
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop is gone: the agent stopped without waiting for this handler

    threading.Thread(target=work, name="agent-inbox-handler", daemon=True).start()
    return await done


def _now_ms() -> int:
    return int(time.time() * 1000)
