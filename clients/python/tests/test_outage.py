"""A service that went away is found again soon after it returns (GUARANTEES.md row 9): the
server is killed while a connected `Agent` runs, comes back 8 s later on the same port and
database, and an event published right then is handled within 4 s (the 2 s cap of the outage
backoff, a scan and a claim, with room for a loaded machine), without a restart of the runner. On the idle polling schedule (1 s doubling) the runner's next probe after 8 s away
could come up to 8 s after the return."""

from __future__ import annotations

import time
from pathlib import Path

from agent_inbox import AgentConfig, Event
from conftest import Server, unique, wait_until
from test_agent import running_agent


def test_a_service_that_comes_back_after_8_s_away_is_found_within_seconds_of_its_return(tmp_path: Path) -> None:
    # A server of its own: the shared one must not go away under the other tests.
    server = Server("sqlite", tmp_path)
    try:
        agent = unique("outage")
        token = server.token(agent)
        handled: dict[str, float] = {}

        def handler(event: Event) -> None:
            handled[event.event_id] = time.monotonic()

        with running_agent(server.base, token, tmp_path / "state.db", handler,
                           AgentConfig(shutdown_grace=2.0)) as run:
            wait_until("the stream is open", 10,
                       lambda: any(d["kind"] == "sse" and d["connected"] for d in run.kinds("transport")))
            wait_until("the first scan", 10, lambda: run.kinds("scanned"))
            server.stop()
            wait_until("the runner notices the outage", 10, lambda: run.kinds("disconnected"))
            time.sleep(8)
            server.start()
            back_at = time.monotonic()
            (event_id,) = server.publish(agent)
            wait_until("the event published after the return is handled", 15, lambda: event_id in handled)
            after_return = handled[event_id] - back_at
            probes = len(run.kinds("disconnected"))
            print(f"handled {after_return:.2f} s after the service returned; {probes} failed probes while away")
            assert after_return <= 4.0, f"handled {after_return:.2f} s after the service returned"
            # Not hammering while away: the backoff's floor is 0.25 s, so about 32 probes in 8 s at most.
            assert probes <= 32, f"{probes} failed probes in 8 s"
    finally:
        server.stop()
