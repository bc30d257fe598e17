"""Acknowledgements on their way to the service. Those of events that finish while another
request is on its way share the next one (the endpoint takes a batch; each ack keeps its own
outcome), so a busy agent sends far fewer requests without waiting any longer. Every request
is repeated with backoff while it fails transiently: an ack or a release with the same lease
token is idempotent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ._async_client import AsyncClient
from ._contract import AgentConfig
from ._errors import InboxError, ProblemError, ProtocolError
from ._models import AckEntry, AckOutcome, AcknowledgeRequest
from ._schedule import jitter

#: Acknowledgements sent in one request at most.
_ACK_BATCH_MAX = 100

T = TypeVar("T")


class AckSender:
    def __init__(self, client: AsyncClient, config: AgentConfig, session_id: Callable[[], str | None]) -> None:
        self.client = client
        self.config = config
        self.session_id = session_id
        self.queue: list[tuple[AckEntry, asyncio.Future[AckOutcome]]] = []
        self.flusher: asyncio.Task[None] | None = None

    async def acknowledge(self, entry: AckEntry) -> None:
        """Resolves once the service accepted ``entry``; raises its refusal or the last failure."""
        done: asyncio.Future[AckOutcome] = asyncio.get_running_loop().create_future()
        self.queue.append((entry, done))
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self._flush())
        outcome = await asyncio.shield(done)
        if outcome.error is not None:
            raise ProblemError(409, outcome.error.code, outcome.error.detail)

    async def _flush(self) -> None:
        while self.queue:
            batch, self.queue = self.queue[:_ACK_BATCH_MAX], self.queue[_ACK_BATCH_MAX:]
            request = AcknowledgeRequest(acks=[entry for entry, _ in batch], session_id=self.session_id())
            try:
                answer = await self.retrying(lambda: self.client.acknowledge(request))
            except InboxError as err:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(err)
                continue
            outcomes = {outcome.event_id: outcome for outcome in answer.results}
            for entry, done in batch:
                if done.done():
                    continue
                outcome = outcomes.get(entry.event_id)
                if outcome is None:
                    done.set_exception(ProtocolError("the acknowledgement answer left an event out"))
                else:
                    done.set_result(outcome)

    async def retrying(self, request: Callable[[], Awaitable[T]]) -> T:
        """Repeats ``request`` while it fails transiently, with backoff, up to the attempt limit."""
        attempt = 0
        while True:
            try:
                return await request()
            except InboxError as err:
                attempt += 1
                if not err.transient or attempt >= self.config.ack_attempts_max:
                    raise
                await asyncio.sleep(self.config.ack_retry.delay(attempt, jitter()))

