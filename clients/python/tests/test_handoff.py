"""A handler that hands its work on: it returns ``HandOff(follow_ups)``, and the agent commits
them with the acknowledgement (only while the lease holds, deduplicated by the acknowledged
event); the local record is written only after the hand-off committed, so a redelivery after a
refused hand-off runs the handler again instead of acknowledging it without its follow-ups."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent_inbox import AcknowledgeRequest, Event, HandOff, LocalState, ProblemError, PublishRequest, RunSummary
from agent_inbox._contract import AgentConfig
from agent_inbox._delivery import Delivery
from agent_inbox._wire import to_json_bytes
from conftest import Server, unique, wait_until
from test_agent import running_agent
from test_quarantine import _claim


def test_a_handler_hands_off_to_the_next_agent_once(server: Server, tmp_path: Path) -> None:
    agent, reviewer = unique("writer"), unique("reviewer")
    token = server.token(agent)

    def handler(event: Event) -> HandOff:
        return HandOff([PublishRequest(recipients=[reviewer], event_type="draft.review", payload={"draft": event.event_id})])

    with running_agent(server.base, token, tmp_path / "state.db", handler) as run:
        (written,) = server.publish(agent)
        wait_until("the event is finished", 30, lambda: len(run.kinds("finished")) == 1)
    assert run.summary == RunSummary(acked=1)
    assert server.all_in_state(token, [written], "acked")
    handed = list(server.events(server.token(reviewer)).values())
    assert [e.payload for e in handed] == [{"draft": written}]
    assert handed[0].deduplication_key == f"handoff:{written}:0"


class _RefusingAcks:
    def __init__(self) -> None:
        self.sent: list[object] = []

    async def acknowledge(self, entry) -> None:  # type: ignore[no-untyped-def]
        self.sent.append(entry)
        raise ProblemError(409, "lease_expired", "the lease ended")


def test_a_refused_hand_off_is_not_recorded_so_the_event_runs_again(tmp_path: Path) -> None:
    state = LocalState(tmp_path / "state.db", capacity=4)
    acks = _RefusingAcks()
    follow_up = PublishRequest(recipients=["next"], event_type="t", payload={"n": 1})
    delivery = Delivery(
        None, state, AgentConfig(), lambda event: HandOff([follow_up]), acks,  # type: ignore[arg-type]
        "t/a", 30.0, lambda: None, lambda *_: None, lambda _: None,
    )
    outcome = asyncio.run(delivery.finish(_claim()))
    assert outcome.kind == "unconfirmed"
    assert state.processed("t/a", "evt_1") is None, "nothing was handed on, so nothing is recorded"
    body = json.loads(to_json_bytes(AcknowledgeRequest(acks=acks.sent)))  # type: ignore[arg-type]
    assert body["acks"][0]["follow_ups"] == [{"recipients": ["next"], "event_type": "t", "payload": {"n": 1}}]
