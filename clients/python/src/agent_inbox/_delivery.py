"""One claimed event, from its lease to its outcome: deduplicate it against the local record,
or run the handler while heartbeating the lease; record the result *before* acknowledging it
(so a redelivery after a crash or a lost acknowledgement is acknowledged from the record
instead of run twice); then acknowledge, release for a retry, dead-letter, or quarantine (set
aside for a person, with the handler's reason). The runner
(``_agent.py``) decides when events are claimed; this module only finishes them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ._acks import AckSender
from ._async_client import AsyncClient
from ._contract import (
    AgentConfig, Event, Fatal, Handler, HandOff, Outcome, QuarantineError, Retry, _invoke, _is_async,
    fit_reason, known_quarantine_class,
)
from ._errors import InboxError
from ._local_state import LocalState
from ._models import AckEntry, Claim, HeartbeatEntry, HeartbeatRequest, ReleaseRequest
from ._schedule import heartbeat_delay, heartbeat_retry_delay, retry_after_seconds

log = logging.getLogger("agent_inbox")

#: A redelivered quarantine whose reason the local state did not keep.
_QUARANTINED_BEFORE = ("quarantined by this agent before the event was delivered again", "other")


def ack_entry(
    claim: Claim, result: str, quarantine: tuple[str, str] | None, reason: str = ""
) -> AckEntry:
    """The acknowledgement of a recorded result: a quarantine carries its reason and class, a
    failure its reason (kept with the dead letter; none when the handler gave none)."""
    if result == "failed":
        return AckEntry(event_id=claim.event_id, lease_token=claim.lease_token, result="failed", reason=fit_reason(reason) or None)
    if result != "quarantined":
        return AckEntry(event_id=claim.event_id, lease_token=claim.lease_token, result="completed")
    reason, quarantine_class = quarantine or _QUARANTINED_BEFORE
    return AckEntry(
        event_id=claim.event_id, lease_token=claim.lease_token, result="quarantined", reason=reason,
        class_=known_quarantine_class(quarantine_class),
    )


class Delivery:
    """Finishes claimed events for one running agent (one inbox, one session)."""

    def __init__(
        self,
        client: AsyncClient,
        state: LocalState,
        config: AgentConfig,
        handler: Handler,
        acks: AckSender,
        inbox: str,
        lease: float,
        session_id: Callable[[], str | None],
        observe: Callable[..., None],
        slot_free: Callable[[str], None],
    ) -> None:
        self.client = client
        self.state = state
        self.config = config
        self.handler = handler
        self.handler_async = _is_async(handler)
        self.acks = acks
        self.inbox = inbox
        self.lease = lease
        self.session_id = session_id
        self.observe = observe
        #: Called once the outcome is recorded: the slot frees while the ack is on its way.
        self.slot_free = slot_free

    async def finish(self, claim: Claim) -> Outcome:
        """Deduplicate, or run the handler under heartbeats; then acknowledge or release."""
        try:
            previous = self.state.processed(self.inbox, claim.event_id)
            # Only a completed event is answered from the record. One that failed or was
            # quarantined here comes back only when its acknowledgement was lost or an operator
            # requeued or released it, and an operator is asking for exactly that: to run it again.
            if previous != "completed":
                previous = None
        except InboxError as err:
            # Without the record we cannot tell whether this ran before; give it back.
            log.error("local state unreadable; releasing the event: %s", err)
            return await self._released(claim, 5.0, "local_state_unavailable")
        if previous is not None:
            try:
                await self.acks.acknowledge(ack_entry(claim, previous, None))
            except InboxError as err:
                return Outcome("unconfirmed", str(err))
            return Outcome("deduplicated", previous)
        event = Event(claim.event, claim.visibility_lease_until_utc)
        done: object = None
        try:
            done = await self._with_heartbeats(claim, _invoke(self.handler, self.handler_async, event))
            result, reason = "completed", ""
            quarantine: tuple[str, str] | None = None
        except Retry as err:
            return await self._released(claim, err.after, err.reason)
        except Fatal as err:
            result, reason, quarantine = "failed", err.reason, None
        except QuarantineError as err:
            result, reason = "quarantined", err.reason
            quarantine = (err.reason, err.quarantine_class)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("handler raised %r for %s; releasing it for a retry", err, claim.event_id)
            return await self._released(
                claim, self.config.unexpected_error_retry_seconds, f"{type(err).__name__}: {err}"
            )
        if isinstance(done, HandOff) and done.follow_ups and result == "completed":
            return await self._handed_off(claim, done)
        try:
            await asyncio.to_thread(
                self.state.record_processed,
                self.inbox, claim.event_id, claim.event.inbox_seq, result, quarantine,
            )
        except InboxError as err:
            log.warning("could not record %s as processed: %s", claim.event_id, err)
        self.slot_free(claim.event_id)
        try:
            await self.acks.acknowledge(ack_entry(claim, result, quarantine, reason))
        except InboxError as err:
            return Outcome("unconfirmed", str(err))
        if quarantine is not None:
            return Outcome("quarantined", quarantine[0], quarantine_class=quarantine[1])
        return Outcome("acked") if result == "completed" else Outcome("failed", reason)

    async def _handed_off(self, claim: Claim, done: HandOff) -> Outcome:
        """Acknowledges with the follow-ups, and records the event only once that committed:
        until then nothing was handed on, and a redelivery must run again to make them."""
        self.slot_free(claim.event_id)
        entry = AckEntry(
            event_id=claim.event_id, lease_token=claim.lease_token, result="completed", follow_ups=list(done.follow_ups)
        )
        try:
            await self.acks.acknowledge(entry)
        except InboxError as err:
            return Outcome("unconfirmed", str(err))
        try:
            await asyncio.to_thread(
                self.state.record_processed, self.inbox, claim.event_id, claim.event.inbox_seq, "completed", None
            )
        except InboxError as err:
            log.warning("could not record %s as processed: %s", claim.event_id, err)
        return Outcome("acked")

    async def _released(self, claim: Claim, after: float, reason: str) -> Outcome:
        request = ReleaseRequest(
            event_id=claim.event_id,
            lease_token=claim.lease_token,
            retry_after_seconds=retry_after_seconds(after),
            # The service refuses control characters (an exception's message often has lines).
            reason=fit_reason(reason),
        )
        try:
            await self.acks.retrying(lambda: self.client.release(request))
        except InboxError as err:
            return Outcome("unconfirmed", str(err))
        return Outcome("released", reason, after)

    async def _with_heartbeats(self, claim: Claim, work: Awaitable[object]) -> object:
        """Runs ``work`` while extending the lease at half its length. A lost lease cannot be
        won back: the handler is left to finish, its result recorded for deduplication."""
        task = asyncio.ensure_future(work)
        delay: float | None = heartbeat_delay(self.lease)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=delay)
                if task in done:
                    return task.result()
                request = HeartbeatRequest(
                    leases=[
                        HeartbeatEntry(
                            event_id=claim.event_id, lease_token=claim.lease_token, extend_by_seconds=max(int(self.lease), 1)
                        )
                    ],
                    session_id=self.session_id(),
                )
                try:
                    answer = await self.client.heartbeat(request)
                except InboxError as err:
                    if err.transient:
                        delay = heartbeat_retry_delay(self.lease)
                    else:
                        log.warning("heartbeat refused for %s: %s", claim.event_id, err)
                        delay = None
                    continue
                error = answer.leases[0].error if answer.leases else None
                if error is None:
                    delay = heartbeat_delay(self.lease)
                else:
                    log.warning("lease of %s lost while the handler runs: %s", claim.event_id, error.code)
                    self.observe("lease_lost", event_id=claim.event_id)
                    delay = None
        finally:
            if not task.done():
                task.cancel()
