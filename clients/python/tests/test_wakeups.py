"""When a connected `Agent` wakes up without a hint, and what it tells the service about an
outcome: an event that becomes claimable later (a lease a crashed process held, a retry
delay) is taken when it does, not at the 5-minute safety net; a fractional retry delay is
never cut short; a `Fatal` reason reaches the operator, a release's reason on several lines
is accepted; while requests fail, hints that keep
coming over the stream do not make the runner knock more often than its backoff says. The
poll schedule here keeps the default 5-minute ceiling, so a forgotten wake-up shows as a
timeout instead of hiding behind a short safety net."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from agent_inbox import (
    AgentConfig,
    ClaimRequest,
    Client,
    Event,
    Fatal,
    PollSchedule,
    Retry,
)
from conftest import Server, unique, wait_until
from proxy import Proxy
from test_agent import running_agent


def connected(**changes: Any) -> AgentConfig:
    """A quick first poll, but the default ceiling: while connected, only hints and known
    changes wake the agent before 5 minutes."""
    config = AgentConfig(poll=PollSchedule(interval_min=0.1, interval_max=300.0), shutdown_grace=2.0)
    for name, value in changes.items():
        setattr(config, name, value)
    return config


def test_a_lease_a_crashed_process_held_is_taken_soon_after_it_ends(server: Server, tmp_path: Path) -> None:
    agent = unique("crashed")
    token = server.token(agent)
    ids = server.publish(agent, 40)
    # Another process of this agent claims two with a 3 s lease, then dies without a word.
    with Client(server.base, token) as client:
        crashed = client.claim(ClaimRequest(limit=2, lease_seconds=3)).claims
    lease_ends = time.monotonic() + 3
    assert len(crashed) == 2
    handled: list[str] = []

    def handler(event: Event) -> None:
        # Handlers finish one after another, so cycles follow each other within moments of
        # a scan: those claim without scanning again.
        time.sleep(0.03 * (event.payload["n"] % 4))
        handled.append(event.event_id)

    # Claims come back full while the backlog lasts, so most cycles claim without scanning.
    with running_agent(server.base, token, tmp_path / "state.db", handler, connected(concurrency=4)) as run:
        wait_until("the stream is open", 10,
                   lambda: any(d["kind"] == "sse" and d["connected"] for d in run.kinds("transport")))
        wait_until("the 38 others are handled", 20, lambda: len(handled) >= 38)
        # The lease ends, the scavenger (every 200 ms here) makes them available again: no
        # hint says so, the runner must remember when to look.
        wait_until("the two the crashed process held are handled", 10,
                   lambda: server.all_in_state(token, ids, "acked"))
    taken_after = time.monotonic() - lease_ends
    assert taken_after < 3, f"taken {taken_after:.1f} s after the lease ended"
    assert sorted(handled) == sorted(ids)


def test_a_fractional_retry_comes_back_no_sooner_than_asked_and_soon_after(server: Server, tmp_path: Path) -> None:
    agent = unique("retry")
    token = server.token(agent)
    runs: list[float] = []

    def handler(event: Event) -> None:
        runs.append(time.monotonic())
        if len(runs) == 1:
            # After the scan that went out beside the claim has come back: it saw the event
            # under this agent's lease (or claimable), not when the retry will be due.
            time.sleep(0.1)
            raise Retry(after=1.6, reason="not yet")

    # A long lease: a scan that saw the event under this agent's own lease knows only when
    # that ends, not when the retry is due.
    with running_agent(server.base, token, tmp_path / "state.db", handler, connected(lease_seconds=30)) as run:
        wait_until("the stream is open", 10,
                   lambda: any(d["kind"] == "sse" and d["connected"] for d in run.kinds("transport")))
        # Past the runner's 0.2 s reuse of a scan: the hint's claim goes out beside a new scan.
        time.sleep(0.3)
        (event_id,) = server.publish(agent)
        wait_until("the event is released", 10, lambda: len(runs) == 1 and run.kinds("finished"))
        released_at = time.monotonic()
        # The handler raised within moments of the scan, and its claim came back full: the
        # cycle that follows claims without scanning, and must still know when the retry is due.
        wait_until("the event runs again", 8, lambda: len(runs) == 2)
        wait_until("and is acknowledged", 10, lambda: server.all_in_state(token, [event_id], "acked"))
    # Released 0.1 s after the first run started, claimable again no sooner than 1.6 s later;
    # due within the delay and a second (some more for a loaded machine), not at the safety net.
    assert runs[1] - runs[0] >= 1.7, f"ran again {runs[1] - runs[0] - 0.1:.2f} s after its release, asked 1.6 s"
    assert runs[1] - released_at < 2.6 + 1.0, f"ran again {runs[1] - released_at:.2f} s after its release"


def test_a_fatal_reason_is_kept_for_the_operator(server: Server, tmp_path: Path) -> None:
    agent = unique("fatal")
    token = server.token(agent)
    admin = server.token("py_operator", kind="admin")

    def handler(event: Event) -> None:
        raise Fatal(event.payload["why"])

    (event_id,) = server.publish(agent, payload={"why": "no such customer:\n4711"})
    with running_agent(server.base, token, tmp_path / "state.db", handler, connected()) as run:
        wait_until("the event is dead-lettered", 20, lambda: server.all_in_state(token, [event_id], "dead_letter"))
        wait_until("its outcome is counted", 10, lambda: run.kinds("finished"))
    detail = httpx.get(
        f"{server.base}/v1/admin/inboxes/{agent}/events/{event_id}",
        headers={"authorization": f"Bearer {admin}"},
    )
    assert detail.status_code == 200, detail.text
    event = detail.json()["event"]
    assert event["dead_letter_state"] == "handler_failed"
    # Control characters become spaces: the service keeps a reason on one line.
    assert event["reason"] == "no such customer: 4711", event


def test_while_requests_fail_hints_that_keep_coming_do_not_bypass_the_backoff(server: Server, tmp_path: Path) -> None:
    agent = unique("failing")
    token = server.token(agent)
    proxy = Proxy(server.port)
    handled: list[str] = []
    config = connected()
    try:
        with running_agent(proxy.base, token, tmp_path / "state.db", lambda e: handled.append(e.event_id), config) as run:
            wait_until("the stream is open", 10,
                       lambda: any(d["kind"] == "sse" and d["connected"] for d in run.kinds("transport")))
            wait_until("the first scan", 10, lambda: run.kinds("scanned"))
            # The stream stays up; scans and claims are cut on the way to the service.
            proxy.refuse = lambda request: b"/v1/inbox/poll-after-cursor" in request or b"/v1/inbox/claim" in request
            ids: list[str] = []
            started = time.monotonic()
            for n in range(25):  # a hint every 200 ms for 5 s
                time.sleep(max(started + n * 0.2 - time.monotonic(), 0.0))
                ids += server.publish(agent, payload={"n": n})
            refused = proxy.refused
            proxy.refuse = None
            # Backing off from 0.5 s to 2 s: about 5 attempts in 5 s. One per hint would be 25.
            assert refused <= 10, f"{refused} refused requests in 5 s of hints"
            wait_until("every event handled once the requests go through", 15, lambda: len(handled) == 25)
    finally:
        proxy.close()
    assert sorted(handled) == sorted(ids)


def test_a_release_reason_on_several_lines_is_accepted(server: Server, tmp_path: Path) -> None:
    agent = unique("lines")
    token = server.token(agent)
    runs: list[str] = []

    def handler(event: Event) -> None:
        runs.append(event.event_id)
        if len(runs) == 1:
            # An exception's message often spans lines (a traceback, a server's answer).
            raise ValueError("upstream answered:\n  503 busy\r\n" + "x" * 300)

    with running_agent(server.base, token, tmp_path / "state.db", handler,
                       connected(unexpected_error_retry_seconds=0.5)) as run:
        (event_id,) = server.publish(agent)
        wait_until("the event is handled after its release", 10,
                   lambda: server.all_in_state(token, [event_id], "acked"))
        wait_until("both outcomes are counted", 10, lambda: len(run.kinds("finished")) == 2)
        outcomes = [d["outcome"].kind for d in run.kinds("finished")]
    assert outcomes == ["released", "acked"], "released, not refused and left to its lease"
    assert runs == [event_id, event_id]
