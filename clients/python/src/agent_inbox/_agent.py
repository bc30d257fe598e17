"""The agent runner, with the Rust SDK's guarantees. This module decides when to scan and
claim; the handler contract and settings are ``_contract.py``'s, finishing one claimed event
``_delivery.py``'s, batching acknowledgements ``_acks.py``'s.

On every hint, timer or reconnection it scans the inbox after its persisted cursor, claims
what it can run, and runs the handler once per event while heartbeating the event's lease.
Then: the handler returned, acknowledge as ``completed``; it raised ``Retry``, release for a
retry after ``after`` seconds; it raised ``Fatal``, acknowledge as ``failed`` (the service
dead-letters it); any other exception is treated as retryable (released after
``AgentConfig.unexpected_error_retry_seconds``, and dead-lettered by the service's attempt
limit). A result is recorded locally *before* it is acknowledged, so an event delivered
again after a crash or a lost acknowledgement is acknowledged from the record instead of
being run twice. Acknowledgements and releases failing on the network are repeated: both are
idempotent for the same lease token.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from . import _resync
from ._acks import AckSender
from ._async_client import AsyncClient
from ._contract import (
    AgentConfig,
    Event,
    Fatal,
    Handler,
    Outcome,
    Progress,
    QuarantineError,
    ResyncCallback,
    Retry,
    RunSummary,
    _invoke,
    _is_async,
    _now_ms,
)
from ._cursor import Scan
from ._delivery import Delivery
from ._errors import InboxError, ProblemError, ResyncFailed, SessionSuperseded
from ._limits import BATCH_EVENTS_MAX
from ._local_state import LocalState
from ._models import (
    Claim,
    ClaimRequest,
    PollRequest,
    ReleaseRequest,
    SubscribeRequest,
    SubscribeResponse,
)
from ._schedule import ClaimableAt, jitter, next_cycle_after, outage_delay, retry_after_seconds, wall_clock_drift
from ._transport import Signals, Transport, TransportStatus

__all__ = [
    "Agent", "AgentConfig", "Event", "Fatal", "Handler", "Outcome", "Progress", "QuarantineError",
    "ResyncCallback", "Retry", "RunSummary",
]

log = logging.getLogger("agent_inbox")

#: In a backlog, how long a freed slot waits for others before claiming.
_REFILL_WAIT_SECONDS = 0.005
#: A scan younger than this is not repeated for a cycle that does not need one.
_SCAN_REUSE_SECONDS = 0.2


class Agent:
    """One identity, one local state file, one handler."""

    def __init__(self, client: AsyncClient, state: LocalState, config: AgentConfig | None = None):
        self.client = client
        self.state = state
        self.config = config or AgentConfig()

    def run_sync(
        self,
        handler: Handler,
        resync: ResyncCallback | None = None,
        stop: threading.Event | None = None,
    ) -> RunSummary:
        """``run`` for programs without an event loop: blocks until ``stop`` is set (from any
        thread) or a fatal error. Plain handlers run in worker threads."""

        async def main() -> RunSummary:
            stopped = asyncio.Event()
            if stop is not None:
                loop = asyncio.get_running_loop()

                def watch() -> None:
                    stop.wait()
                    loop.call_soon_threadsafe(stopped.set)

                threading.Thread(target=watch, daemon=True, name="agent-inbox-stop").start()
            return await self.run(handler, resync, stopped)

        return asyncio.run(main())

    async def run(
        self,
        handler: Handler,
        resync: ResyncCallback | None = None,
        stop: asyncio.Event | None = None,
    ) -> RunSummary:
        """Runs until ``stop`` is set (then lets running handlers finish, up to the grace
        period) or a fatal error: credentials refused, a permanent resync failure, local
        state unusable, or ``SessionSuperseded``. Network trouble is never fatal."""
        runner = _Runner(self, handler, resync, stop or asyncio.Event())
        return await runner.run()


class _Runner:
    def __init__(
        self, agent: Agent, handler: Handler, resync: ResyncCallback | None, stop: asyncio.Event
    ) -> None:
        self.client = agent.client
        self.state = agent.state
        self.config = agent.config
        self.handler = handler
        self.resync_callback = resync
        self.stop = stop
        self.summary = RunSummary()
        self.tasks: set[asyncio.Task[None]] = set()
        #: Events whose handler has not finished: what ``concurrency`` counts. An event whose
        #: outcome is recorded and on its way to the service frees its slot, so the next
        #: claim overlaps the acknowledgement.
        self.running: set[str] = set()
        #: Events being worked on, with their lease tokens (for a release on shutdown).
        self.held: dict[str, str] = {}
        self.inbox = ""
        self.session_id: str | None = None
        self.lease = 120.0
        self.wake = asyncio.Event()
        self.hinted = False
        self.task_done = False
        self.status_changed = False
        self.superseded = False
        self.status = TransportStatus(self.config.transport.allowed[0] if self.config.transport.allowed else "poll", False)
        self.poll_nominal: float | None = None
        #: Requests failed in a row because the service could not be reached; 0 once one works.
        self.outage_attempts = 0
        self.last_scan: float | None = None
        #: After a resync, open events may sit at or below the cursor, where scans do not
        #: look: claim without waiting for a scan to show something, until a claim is short.
        self.claim_backlog = False
        self.signals: Signals | None = None
        self.acks = AckSender(self.client, self.config, lambda: self.session_id)
        self.delivery: Delivery | None = None
        #: When something not claimable yet may become so: from the scans, and from this
        #: agent's own releases for a retry (a scan may have run while they were still held).
        #: Kept across cycles that only claim, which learn nothing that would replace it.
        self.claimable_at = ClaimableAt()
        #: An outcome left an event open without a known time (its acknowledgement or release
        #: did not go through): the next cycle scans, to learn when its lease ends.
        self.scan_needed = False
        #: A cycle claimed without scanning: the next one is due when the last scan is stale.
        self.rescan_due = False
        self.last_claim_full = False

    def observe(self, what: str, **details: Any) -> None:
        if self.config.observer is not None:
            self.config.observer(Progress(what, details))

    def _poke(self) -> None:
        self.wake.set()

    def _on_hint(self) -> None:
        self.hinted = True
        self._poke()

    def _on_status(self, status: TransportStatus) -> None:
        self.status = status
        self.status_changed = True
        self.observe("transport", kind=status.kind, connected=status.connected)
        self._poke()

    def _on_superseded(self) -> None:
        self.superseded = True
        self._poke()

    async def run(self) -> RunSummary:
        subscribed = await self._subscribe()
        if subscribed is None:
            return self.summary
        self.signals = Signals(
            subscribed.current_head_seq, self._on_hint, self._on_status, self._on_superseded
        )
        transport = Transport(
            self.client,
            self.config.transport,
            subscribed.sse_url,
            float(max(subscribed.heartbeat_interval_seconds, 1)),
            self.signals,
        )
        transport_task = asyncio.ensure_future(transport.run())
        stop_waiter = asyncio.ensure_future(self.stop.wait())
        stop_waiter.add_done_callback(lambda _: self._poke())
        try:
            return await self._loop()
        finally:
            stop_waiter.cancel()
            transport_task.cancel()
            try:
                await transport_task
            except (asyncio.CancelledError, Exception):
                pass

    async def _subscribe(self) -> SubscribeResponse | None:
        request = SubscribeRequest(
            device_id=self.config.device_id,
            supported_transports=["sse", "long-poll", "poll"],
            wants_claims=True,
        )
        attempt = 0
        while True:
            if self.stop.is_set():
                return None
            try:
                subscribed = await self.client.subscribe(request)
                break
            except InboxError as err:
                if not err.transient:
                    raise
                attempt += 1
                delay = outage_delay(self.config.outage, attempt, jitter(), _retry_after(err))
                self.observe("disconnected", error=str(err), retry_in=delay)
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
        recipient = subscribed.recipient
        self.inbox = f"{recipient.tenant_id}/{recipient.recipient_id}"
        self.session_id = subscribed.session_id
        self.lease = float(self.config.lease_seconds or max(subscribed.lease_default_seconds, 1))
        self.delivery = Delivery(
            self.client, self.state, self.config, self.handler, self.acks, self.inbox, self.lease,
            lambda: self.session_id, self.observe, self._slot_free,
        )
        self.observe(
            "subscribed",
            session_id=subscribed.session_id,
            recipient_id=recipient.recipient_id,
            cursor=self.state.cursor(self.inbox),
            head_seq=subscribed.current_head_seq,
        )
        return subscribed

    async def _loop(self) -> RunSummary:
        config = self.config
        signals = self.signals
        assert signals is not None
        next_cycle = time.monotonic()
        forced = True
        #: The cycle answers a hint: new events exist, so claim without waiting for the scan.
        eager = False
        last_sample = (time.monotonic(), time.time())
        while True:
            if self.stop.is_set():
                break
            if self.superseded:
                log.warning("a newer session of this agent took over; finishing what runs, then stopping")
                await self._drain()
                raise SessionSuperseded(self.session_id or "")
            free = max(config.concurrency, 1) - len(self.running)
            if free > 0 and time.monotonic() >= next_cycle:
                try:
                    claimed, more = await self._cycle(free, forced, eager)
                    next_cycle = self._after_cycle(claimed, more)
                except InboxError as err:
                    if isinstance(err, ProblemError) and err.code == "session_superseded":
                        self.superseded = True
                        continue
                    if not err.transient:
                        await self._drain()
                        raise
                    # Unreachable: the transports stand by; only this loop knocks, on the
                    # outage backoff (capped at a few seconds, so a returning service is found
                    # soon after it is back; a `Retry-After` from the service is obeyed).
                    signals.service_down = True
                    self.outage_attempts += 1
                    delay = outage_delay(config.outage, self.outage_attempts, jitter(), _retry_after(err))
                    self.observe("disconnected", error=str(err), retry_in=delay)
                    next_cycle = time.monotonic() + delay
                forced = eager = False
                last_sample = (time.monotonic(), time.time())
                continue
            # Wait for a hint, a finished task, a status change, the timer or the clock check.
            if not (self.hinted or self.task_done or self.status_changed or self.superseded or self.stop.is_set()):
                self.wake.clear()
                timeout = config.clock_check
                if free > 0:
                    timeout = min(timeout, max(next_cycle - time.monotonic(), 0.0))
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
            now = time.monotonic()
            if self.hinted or self.status_changed:
                # A claim beside the scan saves a round trip, but not while the service fails:
                # then one request at a time knocks (a failed scan sends no claim).
                eager = (eager or self.hinted) and not signals.service_down
                # While the service fails requests, a stream that lives on still brings hints:
                # they wait for the backoff. A transport (re)connecting is worth a try now.
                if self.status_changed or not signals.service_down:
                    next_cycle = now
                self.hinted = self.status_changed = False
                forced = True
            elif self.task_done:
                self.task_done = False
                # Working through a backlog, handlers finish in bursts: a moment's wait lets
                # a burst free its slots, so one claim refills them all.
                burst = self.last_claim_full and bool(self.running)
                next_cycle = min(next_cycle, now + (_REFILL_WAIT_SECONDS if burst else 0.0))
            elif free > 0 and now >= next_cycle:
                forced = True
            if now - last_sample[0] >= config.clock_check:
                sample = (now, time.time())
                # The wall clock ran while the monotonic one did not (suspend), or was set.
                drift = wall_clock_drift(last_sample, sample, config.clock_tolerance)
                if drift is not None:
                    log.info("the clock jumped (sleep/resume?); reconnecting and rescanning")
                    self.observe("clock_jumped", drift_seconds=drift)
                    signals.reconnect.set()
                    next_cycle = now
                    forced = True
                last_sample = sample
        await self._drain()
        return self.summary

    def _after_cycle(self, claimed: int, more: bool) -> float:
        signals = self.signals
        assert signals is not None
        if signals.service_down:
            signals.service_down = False
            signals.reachable.set()
        self.outage_attempts = 0
        until_ms = self.claimable_at.until(_now_ms())
        until_change = None if until_ms is None else until_ms / 1000
        # An expired lease comes back on the service's next scavenger pass: allow for it.
        wait, self.poll_nominal = next_cycle_after(
            self.config.poll,
            self.poll_nominal,
            claimed,
            more,
            until_change,
            self.status.connected,
            0.25,
            jitter(),
        )
        if self.rescan_due and self.last_scan is not None:
            wait = min(wait, max(self.last_scan + _SCAN_REUSE_SECONDS - time.monotonic(), 0.0))
        return time.monotonic() + wait

    async def _cycle(self, free: int, forced: bool, eager: bool) -> tuple[int, bool]:
        """Scans after the cursor (when forced or the last scan is not recent), then claims
        up to ``free`` events and starts them. After a hint the claim goes out beside the
        scan instead of after it: a round trip less between a publish and its handler."""
        recent = self.last_scan is not None and time.monotonic() - self.last_scan < _SCAN_REUSE_SECONDS
        if eager and recent:
            # Hints come faster than scans are useful: claim now, scan once the last one is
            # old enough (the next cycle is due by then; see _after_cycle).
            n_claimed, more = await self._claim(free)
            self.rescan_due = True
            return n_claimed, more
        if eager:
            scanned, claimed = await asyncio.gather(self._scan(), self._claim(free), return_exceptions=True)
            if isinstance(claimed, BaseException):
                raise claimed
            if isinstance(scanned, BaseException):
                raise scanned
            return claimed
        scan: tuple[Scan, bool] | None = None
        # While claims come back full there is a backlog to work through: scanning it again
        # would only re-read it. A hint or the timer (forced) still scans.
        if forced or self.scan_needed or not (recent or self.last_claim_full):
            scan = await self._scan()
        worth_claiming = self.claim_backlog or scan is None or scan[0].claimable > 0 or scan[1]
        if not worth_claiming:
            return 0, False
        return await self._claim(free)

    async def _claim(self, free: int) -> tuple[int, bool]:
        """Claims up to ``free`` events and starts them; whether the claim came back full."""
        limit = min(free, BATCH_EVENTS_MAX)
        answer = await self.client.claim(
            ClaimRequest(
                session_id=self.session_id,
                limit=limit,
                lease_seconds=self.config.lease_seconds,
            )
        )
        self.last_claim_full = len(answer.claims) == limit
        if len(answer.claims) < limit:
            self.claim_backlog = False
        for claim in answer.claims:
            self._start(claim)
        return len(answer.claims), len(answer.claims) == limit

    async def _scan(self) -> tuple[Scan, bool]:
        """Reads the inbox after the cursor, page by page; persists where the cursor may move."""
        cursor = self.state.cursor(self.inbox)
        held = set(self.held)
        started_ms = _now_ms()
        self.scan_needed = False
        scan = Scan(cursor)
        pages = 0
        while True:
            request = PollRequest(
                after_seq=max(scan.seen_through, cursor),
                limit=min(max(self.config.page_size, 1), BATCH_EVENTS_MAX),
            )
            try:
                page = await self.client.poll(request)
            except ProblemError as err:
                if err.code != "cursor_reset_required":
                    raise
                cursor = await self._resync()
                scan = Scan(cursor)
                continue
            scan.add_page(page.events, page.next_cursor, page.head_seq, _now_ms(), held)
            pages += 1
            if not page.more_available:
                truncated = False
                break
            if pages >= max(self.config.scan_pages_max, 1):
                truncated = True
                break
        self.last_scan = time.monotonic()
        if scan.cursor > cursor:
            await asyncio.to_thread(self.state.advance_cursor, self.inbox, scan.cursor)
        assert self.signals is not None
        self.signals.known_head = max(self.signals.known_head, scan.head_seq)
        self.claimable_at.scanned(started_ms, scan.next_change_ms)
        self.rescan_due = False
        self.observe("scanned", cursor=scan.cursor, head_seq=scan.head_seq)
        return scan, truncated

    async def _resync(self) -> int:
        """After ``cursor_reset_required``: hands every page of the snapshot to the resync
        callback, then continues after ``resume_after_seq``."""
        page_size = min(max(self.config.page_size, 1), BATCH_EVENTS_MAX)
        snapshot = _resync.start(await self.client.resync_page(0, page_size))
        while (after := _resync.next_page_after(snapshot)) is not None:
            page = await self.client.resync_page(after, page_size)
            _resync.add_page(snapshot, page.open_events, page.more_available)
        self.observe("resynced", snapshot=snapshot)
        resume = snapshot.resume_after_seq
        if self.resync_callback is None:
            log.warning(
                "cursor reset: events older than the retention window are gone; continuing "
                "(head %s, resume after %s, %s open events)",
                snapshot.head_seq, resume, len(snapshot.open_events),
            )
        else:
            try:
                await _invoke(self.resync_callback, _is_async(self.resync_callback), snapshot)
            except Retry as err:
                raise ProblemError(503, "resync_deferred", err.reason) from err
            except Exception as err:
                raise ResyncFailed(f"the resync callback failed: {err}") from err
        await asyncio.to_thread(self.state.reset_cursor, self.inbox, resume)
        self.summary.resyncs += 1
        self.claim_backlog = True
        return resume

    def _start(self, claim: Claim) -> None:
        self.held[claim.event_id] = claim.lease_token
        task = asyncio.ensure_future(self._work(claim))
        self.tasks.add(task)
        self.running.add(claim.event_id)

        def done(finished: asyncio.Task[None]) -> None:
            self.tasks.discard(finished)
            self.held.pop(claim.event_id, None)
            self._slot_free(claim.event_id)

        task.add_done_callback(done)

    def _slot_free(self, event_id: str) -> None:
        if event_id in self.running:
            self.running.discard(event_id)
            self.task_done = True
            self._poke()

    def _count(self, outcome: Outcome) -> None:
        setattr(self.summary, outcome.kind, getattr(self.summary, outcome.kind) + 1)

    async def _work(self, claim: Claim) -> None:
        started = time.monotonic()
        self.observe("started", event=claim.event)
        try:
            assert self.delivery is not None
            outcome = await self.delivery.finish(claim)
        except asyncio.CancelledError:
            self._count(Outcome("unconfirmed", "stopped"))
            raise
        self._count(outcome)
        if outcome.kind == "released":
            # Noted once the release was answered: never earlier than the service's own time.
            self.claimable_at.note(_now_ms() + retry_after_seconds(outcome.after) * 1000)
        elif outcome.kind == "unconfirmed":
            # Its lease may have ended while the acknowledgement was failing, and no hint
            # announces that: look now rather than at the safety net (a redelivery is answered
            # from the local record).
            self.scan_needed = True
            self.task_done = True
            self._poke()
        self.observe(
            "finished", event=claim.event, outcome=outcome, elapsed=time.monotonic() - started
        )

    async def _drain(self) -> None:
        """Lets running handlers finish within the grace period, then stops them and releases
        their events so they need not wait out their leases."""
        if not self.tasks:
            return
        _, pending = await asyncio.wait(set(self.tasks), timeout=self.config.shutdown_grace)
        if not pending:
            return
        unfinished = dict(self.held)
        for task in pending:
            task.cancel()
        await asyncio.wait(pending)
        for event_id, lease_token in unfinished.items():
            try:
                await self.client.release(
                    ReleaseRequest(event_id=event_id, lease_token=lease_token, retry_after_seconds=0, reason="agent_shutdown")
                )
                log.info("released %s on shutdown", event_id)
            except InboxError as err:
                log.warning("could not release %s on shutdown (its lease will expire): %s", event_id, err)


def _retry_after(err: InboxError) -> float | None:
    """The service's ``Retry-After`` in seconds, when the failed request's answer carried one."""
    return err.retry_after if isinstance(err, ProblemError) else None
