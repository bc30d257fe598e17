"""The `Agent` in process against the real service: handler outcomes (ack, Retry, Fatal),
heartbeats keeping a long handler's lease, the resync callback after a cursor reset, an SSE
stream cut down to long polls and then to polling and back, with sync and async handlers."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_inbox import (
    Agent,
    AgentConfig,
    AsyncClient,
    Event,
    Fatal,
    LocalState,
    PollSchedule,
    Progress,
    ResyncResponse,
    Retry,
    RunSummary,
    TransportConfig,
    TransportPolicy,
)
from agent_inbox import Backoff, Client, ClaimRequest, AcknowledgeRequest, AckEntry
from conftest import Server, unique, wait_until
from proxy import Proxy


def quick(**changes: Any) -> AgentConfig:
    config = AgentConfig(poll=PollSchedule(interval_min=0.1, interval_max=2.0), shutdown_grace=2.0)
    for name, value in changes.items():
        setattr(config, name, value)
    return config


class Running:
    def __init__(self) -> None:
        self.progress: list[Progress] = []
        self.summary: RunSummary | None = None
        self.error: BaseException | None = None

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [p.details for p in list(self.progress) if p.kind == kind]


@contextmanager
def running_agent(
    base: str, token: str, state: Path, handler: Callable[[Event], Any], config: AgentConfig | None = None,
    resync: Callable[[ResyncResponse], Any] | None = None,
) -> Iterator[Running]:
    """Runs ``Agent.run_sync`` in a thread; stops it (and checks it stopped cleanly) on exit."""
    run = Running()
    config = config or quick()
    config.observer = run.progress.append
    stop = threading.Event()

    def main() -> None:
        try:
            run.summary = Agent(AsyncClient(base, token), LocalState(state), config).run_sync(handler, resync, stop)
        except BaseException as err:  # reported to the test below
            run.error = err

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        yield run
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the agent stopped"
        assert run.error is None, run.error


def test_outcomes_ack_retry_and_dead_letter_with_a_sync_handler(server: Server, tmp_path: Path) -> None:
    agent = unique("outcomes")
    token = server.token(agent)
    runs: dict[str, int] = {}

    def handler(event: Event) -> None:
        runs[event.payload["kind"]] = runs.get(event.payload["kind"], 0) + 1
        if event.payload["kind"] == "retry" and runs["retry"] == 1:
            raise Retry(after=1, reason="not yet")
        if event.payload["kind"] == "fatal":
            raise Fatal("cannot ever work")

    with running_agent(server.base, token, tmp_path / "state.db", handler) as run:
        (ok,) = server.publish(agent, payload={"kind": "ok"})
        (retry,) = server.publish(agent, payload={"kind": "retry"})
        (fatal,) = server.publish(agent, payload={"kind": "fatal"})
        wait_until("all three are finished", 30, lambda: server.all_in_state(token, [ok, retry], "acked")
                   and server.all_in_state(token, [fatal], "dead_letter"))
        wait_until("the outcomes are counted", 10, lambda: len(run.kinds("finished")) == 4)
        outcomes = sorted(d["outcome"].kind for d in run.kinds("finished"))
    assert outcomes == ["acked", "acked", "failed", "released"]
    assert runs == {"ok": 1, "retry": 2, "fatal": 1}
    events = server.events(token)
    assert events[retry].delivery_attempts == 2
    assert events[fatal].dead_letter_state == "handler_failed"
    assert run.summary == RunSummary(acked=2, failed=1, released=1)


def test_heartbeats_keep_a_long_handlers_lease(server: Server, tmp_path: Path) -> None:
    agent = unique("heartbeat")
    token = server.token(agent)
    finish = threading.Event()
    runs: list[str] = []

    async def handler(event: Event) -> None:
        runs.append(event.event_id)
        await asyncio.to_thread(finish.wait, 60)

    (event_id,) = server.publish(agent)
    with running_agent(server.base, token, tmp_path / "state.db", handler, quick(lease_seconds=2)):
        leases: set[str] = set()

        def extended_four_times() -> bool:
            event = server.events(token)[event_id]
            if event.visibility_lease_until_utc:
                leases.add(event.visibility_lease_until_utc)
            return len(leases) >= 4

        started = time.monotonic()
        wait_until("the 2 s lease is extended four times", 30, extended_four_times, every=0.2)
        assert time.monotonic() - started > 2, "well past the lease's own length"
        event = server.events(token)[event_id]
        assert event.ack_state == "claimed" and event.delivery_attempts == 1, "never claimed again"
        finish.set()
        wait_until("the event is acknowledged", 20, lambda: server.all_in_state(token, [event_id], "acked"))
    assert runs == [event_id]


def test_a_cursor_reset_calls_resync_then_continues(server: Server, tmp_path: Path) -> None:
    agent = unique("resync")
    token = server.token(agent)
    ids = server.publish(agent, 4)
    with Client(server.base, token) as client:
        claimed = client.claim(ClaimRequest(limit=2))
        client.acknowledge(AcknowledgeRequest(acks=[AckEntry(event_id=c.event_id, lease_token=c.lease_token) for c in claimed.claims]))
    # Age the two finished events past retention (30 days), as the Rust tests move the store's
    # clock; the service's scavenger then archives them and moves the oldest available seq.
    month_ms = 31 * 86_400_000
    server.db.execute(
        f"UPDATE agent_inbox SET terminal_at_utc = terminal_at_utc - {month_ms} "
        f"WHERE recipient_id = '{agent}' AND terminal_at_utc IS NOT NULL"
    )
    with Client(server.base, token) as client:
        wait_until("retention archives the finished events", 30, lambda: client.head().oldest_available_seq == 3)
    snapshots: list[ResyncResponse] = []
    handled: list[str] = []

    async def resync(snapshot: ResyncResponse) -> None:
        snapshots.append(snapshot)

    with running_agent(server.base, token, tmp_path / "state.db", lambda e: handled.append(e.event_id),
                       resync=resync, config=quick(page_size=1)) as run:
        wait_until("the open events are handled after the resync", 30,
                   lambda: server.all_in_state(token, ids[2:], "acked"))
    assert len(snapshots) == 1, "resync called once, with every page"
    snapshot = snapshots[0]
    assert snapshot.oldest_available_seq == 3 and snapshot.resume_after_seq == 4
    assert [e.event_id for e in snapshot.open_events] == ids[2:]
    assert sorted(handled) == sorted(ids[2:])
    assert run.summary is not None and run.summary.resyncs == 1


def test_a_cut_stream_falls_back_to_long_poll_then_polling_and_recovers(server: Server, tmp_path: Path) -> None:
    agent = unique("transport")
    token = server.token(agent)
    proxy = Proxy(server.port)
    handled: list[str] = []
    config = quick(
        transport=TransportConfig(
            policy=TransportPolicy(failures_before_fallback=2, stream_life_min=5.0, upgrade_after=6.0),
            reconnect=Backoff(base=0.1, max=0.3),
            long_poll_wait_seconds=5,
        ),
    )
    try:
        with running_agent(proxy.base, token, tmp_path / "state.db", lambda e: handled.append(e.event_id), config) as run:
            def status() -> list[tuple[str, bool]]:
                return [(d["kind"], d["connected"]) for d in run.kinds("transport")]

            wait_until("the stream is open", 20, lambda: ("sse", True) in status())
            (first,) = server.publish(agent)
            wait_until("an event arrives over SSE", 20, lambda: first in handled)
            # A middlebox now breaks every event stream: the agent falls back to long polls.
            proxy.refuse = lambda request: request.startswith(b"GET /v1/streams/sse")
            proxy.cut_all()
            wait_until("it long-polls", 30, lambda: ("long-poll", True) in status())
            (second,) = server.publish(agent)
            wait_until("long polls get work", 30, lambda: second in handled)
            # Then it breaks the long polls too (the transport's probes and waits ask for one
            # event; the runner's scans for a page): the agent falls back to polling.
            proxy.refuse = lambda request: request.startswith(b"GET /v1/streams/sse") or (
                b"/v1/inbox/poll-after-cursor" in request and re.search(rb'"limit":1[,}]', request) is not None
            )
            proxy.cut_all()
            wait_until("then polls", 30, lambda: ("poll", False) in status())
            (third,) = server.publish(agent)
            wait_until("polling still gets work", 30, lambda: third in handled)
            # The middlebox behaves again: the better transport is tried again and holds.
            proxy.refuse = None
            marker = len(status())
            wait_until("the stream is back", 30, lambda: ("sse", True) in status()[marker:])
            (fourth,) = server.publish(agent)
            wait_until("an event arrives after recovery", 20, lambda: fourth in handled)
    finally:
        proxy.close()
    assert handled == [first, second, third, fourth]


def test_a_superseded_session_stops_the_agent_after_its_running_handler(server: Server, tmp_path: Path) -> None:
    from agent_inbox import SessionSuperseded, TenantPolicyRequest

    tenant = unique("single")
    with Client(server.base, server.token("operator", tenant=tenant, kind="admin")) as admin:
        admin.set_tenant_policy(TenantPolicyRequest(single_active_session=True))
    agent = unique("single")
    token = server.token(agent, tenant=tenant)
    release = threading.Event()
    handled: list[str] = []

    def handler(event: Event) -> None:
        release.wait(30)
        handled.append(event.event_id)

    (event_id,) = server.publish(agent, tenant=tenant)
    outcome: list[BaseException | RunSummary] = []

    def main() -> None:
        try:
            outcome.append(Agent(AsyncClient(server.base, token), LocalState(tmp_path / "a.db"), quick()).run_sync(handler))
        except BaseException as err:
            outcome.append(err)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        wait_until("the first agent holds the event", 20,
                   lambda: server.events(token)[event_id].ack_state == "claimed")
        with Client(server.base, token) as newer:
            newer.subscribe()  # another process of the same agent takes over
        release.set()
        thread.join(30)
    finally:
        release.set()
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SessionSuperseded), outcome
    assert handled == [event_id]
    assert server.all_in_state(token, [event_id], "acked"), "the running handler was let finish"


def test_an_agent_on_rotating_refresh_tokens(server: Server, tmp_path: Path) -> None:
    from agent_inbox import Credentials, FileTokenStore

    agent = unique("refreshing")
    _, refresh = server.token(agent, refresh=True).splitlines()
    store = FileTokenStore(tmp_path / "agent.refresh-token")
    store.save(refresh)
    ids = server.publish(agent, 3)
    handled: list[str] = []
    stop = threading.Event()
    client = AsyncClient(server.base, Credentials.refreshing(store))
    thread = threading.Thread(
        target=lambda: Agent(client, LocalState(tmp_path / "s.db"), quick()).run_sync(lambda e: handled.append(e.event_id), stop=stop),
        daemon=True,
    )
    thread.start()
    try:
        check = server.token(agent)
        wait_until("the events are handled", 20, lambda: server.all_in_state(check, ids, "acked"))
    finally:
        stop.set()
        thread.join(20)
    assert sorted(handled) == sorted(ids)
    rotated = store.load()
    assert rotated and rotated != refresh, "the spent refresh token was replaced"
    assert (tmp_path / "agent.refresh-token").stat().st_mode & 0o777 == 0o600
