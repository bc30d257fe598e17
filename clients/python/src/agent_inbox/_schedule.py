"""The agent's time-based policies as pure functions, as the Rust SDK has them: the adaptive
poll interval (1 s after work, jittered growth to 5 min), reconnect backoff, when to heartbeat
a lease and refresh an access token, how long a long poll may wait behind a proxy that cuts
requests, and when a transport has failed often enough to fall back. Time and randomness are
arguments (a ``jitter`` is a number in ``[0, 1]``); only the runner reads clocks."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# The longest retry delay the service takes (a week), as its OpenAPI document states it.
from ._limits import RETRY_AFTER_SECONDS_MAX


@dataclass(frozen=True)
class PollSchedule:
    """Seconds. Jitter only ever shortens a wait, so the ceiling is a promise."""

    interval_min: float = 1.0
    interval_max: float = 300.0
    growth: float = 2.0
    jitter_fraction: float = 0.2

    def next_nominal(self, previous: float | None, found_work: bool) -> float:
        low = min(self.interval_min, self.interval_max)
        if previous is not None and not found_work:
            grown = max(previous, low) * max(self.growth, 1.0)
            return max(min(grown, self.interval_max), low)
        return low

    def jittered(self, nominal: float, jitter: float) -> float:
        cut = min(max(self.jitter_fraction, 0.0), 1.0) * min(max(jitter, 0.0), 1.0)
        return nominal * (1.0 - cut)


def next_cycle_after(
    schedule: PollSchedule,
    nominal: float | None,
    claimed: int,
    more: bool,
    until_change: float | None,
    connected: bool,
    slack: float,
    jitter: float,
) -> tuple[float, float | None]:
    """The wait before the next cycle and the new nominal interval. While hints flow the
    timer is a safety net at the ceiling; otherwise the adaptive interval, back at the
    minimum after work. A known change (a retry delay, another's lease) comes sooner."""
    if claimed > 0:
        nominal = None
    if more:
        return 0.0, nominal
    if connected:
        base, nominal = schedule.interval_max, None
    else:
        following = schedule.next_nominal(nominal, claimed > 0)
        base, nominal = schedule.jittered(following, jitter), following
    wait = base if until_change is None else min(until_change + slack, base)
    return max(wait, 0.02), nominal


def retry_after_seconds(after: float) -> int:
    """A retry delay in the whole seconds a release takes: rounded up, so an event never comes
    back sooner than the handler asked."""
    if not after > 0:  # NaN too
        return 0
    return math.ceil(min(after, RETRY_AFTER_SECONDS_MAX))


@dataclass(frozen=True)
class Backoff:
    """Doubling from ``base`` to ``max`` with equal jitter (half fixed, half random)."""

    base: float = 1.0
    max: float = 300.0

    def delay(self, attempt: int, jitter: float) -> float:
        exponent = min(max(attempt - 1, 0), 30)
        full = min(self.base * (1 << exponent), self.max)
        half = full / 2
        return half + (full - half) * min(max(jitter, 0.0), 1.0)


#: While the service does not answer at all, the runner alone probes it (the transports stand
#: by): from 0.5 s doubling to a 2 s cap, each delay between half and all of its nominal value,
#: as the Rust SDK's ``Backoff::OUTAGE``. A service that returns is found within about 2 s of
#: its return, at a cost of one request every 1.5 s on average per agent while it is away; one
#: that answers with ``Retry-After`` is asked again no sooner than it said (``outage_delay``).
OUTAGE_BACKOFF = Backoff(base=0.5, max=2.0)

#: The longest ``Retry-After`` (seconds) the runner honours, as the Rust SDK's
#: ``RETRY_AFTER_HONOURED_MAX``: a wrong header cannot park it for a day.
RETRY_AFTER_HONOURED_MAX_SECONDS = 300.0
#: The longest ``Retry-After`` the runner obeys while the service is away.
OUTAGE_RETRY_AFTER_MAX_SECONDS = RETRY_AFTER_HONOURED_MAX_SECONDS


def honour_retry_after(delay: float, retry_after: float | None) -> float:
    """A retry the service asked to delay (429, 503) waits the longer of the runner's own
    ``delay`` and the service's ``Retry-After`` (seconds), honoured up to
    ``RETRY_AFTER_HONOURED_MAX_SECONDS``."""
    if retry_after is None or not retry_after > 0:
        return delay
    return max(delay, min(retry_after, RETRY_AFTER_HONOURED_MAX_SECONDS))


def outage_delay(backoff: Backoff, attempt: int, jitter: float, retry_after: float | None) -> float:
    """The wait before probing an unreachable service again after failed attempt number
    ``attempt`` (1 for the first): the outage backoff, or the service's ``Retry-After`` when it
    asked for longer (``honour_retry_after``)."""
    return honour_retry_after(backoff.delay(attempt, jitter), retry_after)


class ClaimableAt:
    """The earliest known time (epoch ms) an open event becomes claimable without a hint to say
    so: a retry delay (one this runner released, or one a scan saw), another's lease, a delayed
    delivery. Kept across cycles that skip the scan, and woken for even while a stream is
    connected, as the Rust SDK's ``ClaimableAt``."""

    def __init__(self) -> None:
        self._at_ms: int | None = None

    def note(self, at_ms: int) -> None:
        """Something becomes claimable at ``at_ms``: the earlier time is kept."""
        self._at_ms = at_ms if self._at_ms is None else min(self._at_ms, at_ms)

    def scanned(self, started_ms: int, next_change_ms: int | None) -> None:
        """A scan that began at ``started_ms`` found ``next_change_ms``. A time at or before the
        scan's start is settled by it; a later one is kept (the scan may have read the event
        before its release)."""
        if self._at_ms is not None and self._at_ms <= started_ms:
            self._at_ms = None
        if next_change_ms is not None:
            self.note(next_change_ms)

    def until(self, now_ms: int) -> int | None:
        """Milliseconds from ``now_ms`` until then (0 once passed); ``None`` when nothing is due."""
        return None if self._at_ms is None else max(self._at_ms - now_ms, 0)


def wall_clock_drift(previous: tuple[float, float], now: tuple[float, float], tolerance: float) -> float | None:
    """Whether the wall clock moved apart from the monotonic one by more than ``tolerance``
    between two ``(monotonic, wall)`` samples (seconds): a sleep and resume, or a clock that was
    set. The drift, or ``None``."""
    drift = (now[1] - previous[1]) - (now[0] - previous[0])
    return drift if abs(drift) > tolerance else None


def heartbeat_delay(lease_seconds: float) -> float:
    """At half the lease, so one lost heartbeat still leaves time for a second."""
    return max(lease_seconds / 2, 0.2)


def heartbeat_retry_delay(lease_seconds: float) -> float:
    return max(lease_seconds / 8, 0.1)


def refresh_due(age: float, lifetime: float) -> bool:
    """Refresh when less than a fifth of the token's life (between 5 s and 2 min) remains."""
    margin = min(max(lifetime / 5, 5.0), 120.0)
    return age + margin >= lifetime


@dataclass
class LongPollWait:
    """The long-poll wait in whole seconds, adapted to proxies that cut requests."""

    wait_seconds: int
    max_seconds: int
    ceiling_seconds: int | None = None

    @classmethod
    def new(cls, max_seconds: int) -> LongPollWait:
        max_seconds = max(max_seconds, 1)
        return cls(max_seconds, max_seconds)

    def on_cut(self, elapsed: float) -> None:
        ceiling = max(int(elapsed * 0.75), 1)
        if self.ceiling_seconds is not None:
            ceiling = min(ceiling, self.ceiling_seconds)
        self.ceiling_seconds = ceiling
        self.wait_seconds = min(self.wait_seconds, ceiling)

    def on_answer(self) -> None:
        limit = min(self.ceiling_seconds or self.max_seconds, self.max_seconds)
        self.wait_seconds = min(self.wait_seconds + 1, limit)

    def on_refused(self) -> None:
        self.max_seconds = max(self.wait_seconds // 2, 1)
        self.wait_seconds = self.max_seconds


@dataclass(frozen=True)
class TransportPolicy:
    failures_before_fallback: int = 3
    #: A stream that ends sooner than this (seconds) was cut and counts as a failure.
    stream_life_min: float = 20.0
    #: How long to stay on a fallback before trying the better transport again.
    upgrade_after: float = 300.0

    def stream_failed(self, lived: float) -> bool:
        return lived < self.stream_life_min

    def should_fall_back(self, failures: int) -> bool:
        return failures >= max(self.failures_before_fallback, 1)

    def should_upgrade(self, on_fallback_for: float) -> bool:
        return on_fallback_for >= self.upgrade_after


def jitter() -> float:
    """A number in ``[0, 1)`` for jitter."""
    return random.random()
