"""When a connected `Agent` wakes up without a hint: an event that becomes claimable later
(a lease a crashed process held) is taken when it does, not at the 5-minute safety net. The
poll schedule here keeps the default 5-minute ceiling, so a forgotten wake-up shows as a
timeout instead of hiding behind a short safety net."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agent_inbox import AgentConfig, ClaimRequest, Client, Event, PollSchedule
from conftest import Server, unique, wait_until
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
