"""An example worker: handles `report.requested` events, retries what is not ready yet and
dead-letters what can never work.

    AGENT_INBOX_URL=http://127.0.0.1:8080 AGENT_INBOX_REFRESH_TOKEN=... python worker.py

The refresh token (from `agent-inbox token issue --refresh`, second line) is rotated on every
refresh and kept in ./worker.refresh-token (0600), beside the local state ./worker.state.db.
Ctrl-C lets the running handler finish, then stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from agent_inbox import (
    Agent,
    AgentConfig,
    AsyncClient,
    Credentials,
    Event,
    Fatal,
    FileTokenStore,
    LocalState,
    ResyncResponse,
    Retry,
)


async def handle(event: Event) -> None:
    """Returning acknowledges; ``Retry`` releases for later; ``Fatal`` dead-letters."""
    payload = event.payload or {}
    if event.event_type != "report.requested":
        return  # not ours: acknowledge and move on
    if "report_id" not in payload:
        raise Fatal("a report request without report_id can never be served")
    if payload.get("ready") is False:
        raise Retry(after=60, reason="the data for this report is not in yet")
    await asyncio.sleep(0.1)  # stand-in for the real work; make it idempotent where you can
    print(f"report {payload['report_id']} done ({event.event_id})")


async def rebuild(snapshot: ResyncResponse) -> None:
    """After a long absence the service's history was trimmed: rebuild from what is open."""
    print(f"resync: {len(snapshot.open_events)} open events, continuing after {snapshot.resume_after_seq}")


async def main() -> None:
    logging.basicConfig(level=logging.INFO)
    store = FileTokenStore(Path("worker.refresh-token"))
    if store.load() is None:
        store.save(os.environ["AGENT_INBOX_REFRESH_TOKEN"])
    client = AsyncClient(os.environ.get("AGENT_INBOX_URL", "http://127.0.0.1:8080"), Credentials.refreshing(store))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    agent = Agent(client, LocalState("worker.state.db"), AgentConfig(concurrency=4))
    summary = await agent.run(handle, rebuild, stop)
    print(summary)
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
