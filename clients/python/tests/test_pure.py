"""The pure parts: SSE parsing under any chunking, the schedules, the cursor fold, the resync
page join, and the problem decoding."""

from __future__ import annotations

import httpx
import pytest

from agent_inbox import EventEnvelope, PollSchedule, ResyncResponse
from agent_inbox._core import problem, RetryPolicy
from agent_inbox._cursor import Scan
from agent_inbox._errors import ProblemError, parse_retry_after
from agent_inbox._resync import add_page, next_page_after, start
from agent_inbox._contract import fit_reason
from agent_inbox._schedule import (
    OUTAGE_BACKOFF,
    Backoff,
    LongPollWait,
    heartbeat_delay,
    next_cycle_after,
    outage_delay,
    refresh_due,
    retry_after_seconds,
)
from agent_inbox._sse import SseParser


def test_sse_any_chunking_gives_the_same_events() -> None:
    stream = "retry: 3000\n\nevent: inbox.updated\r\nid: 12\r\ndata: line one\r\ndata: line two é\r\n\r\n: comment\n\ndata:x\n\ndata:cr\r\rdata:y\r\n\n".encode()
    whole = SseParser().feed(stream)
    assert [e.event for e in whole] == ["message", "inbox.updated", "message", "message", "message"]
    assert [e.data for e in whole[3:]] == ["cr", "y"]
    assert whole[0].retry_ms == 3000
    assert whole[1].data == "line one\nline two é" and whole[1].id == "12"
    assert whole[2].data == "x" and whole[2].id == "12", "the last id carries over"
    for size in range(1, 8):
        parser = SseParser()
        events = []
        for i in range(0, len(stream), size):
            events.extend(parser.feed(stream[i : i + size]))
        assert events == whole, f"chunks of {size}"


def test_sse_refuses_endless_lines() -> None:
    with pytest.raises(ValueError):
        SseParser().feed(b"a" * (64 * 1024 + 1))


def test_poll_interval_drops_after_work_and_grows_to_five_minutes() -> None:
    schedule = PollSchedule()
    nominal = schedule.next_nominal(None, False)
    seen = [nominal]
    for _ in range(12):
        nominal = schedule.next_nominal(nominal, False)
        seen.append(nominal)
    assert seen[:6] == [1, 2, 4, 8, 16, 32]
    assert seen[-1] == 300
    assert schedule.next_nominal(64, True) == 1
    assert schedule.jittered(300, 1.0) == 240 and schedule.jittered(300, 0.0) == 300


def test_next_cycle_after_work_and_while_connected() -> None:
    schedule = PollSchedule()
    assert next_cycle_after(schedule, 300, 1, True, None, False, 0.25, 0.0) == (0.0, None)
    assert next_cycle_after(schedule, None, 0, False, None, False, 0.25, 0.0) == (1.0, 1.0)
    assert next_cycle_after(schedule, 8, 0, False, None, True, 0.25, 1.0) == (300.0, None)
    wait, _ = next_cycle_after(schedule, None, 0, False, 2.0, True, 0.25, 1.0)
    assert wait == 2.25


def test_a_retry_delay_is_whole_seconds_rounded_up_never_sooner() -> None:
    assert retry_after_seconds(1.6) == 2
    assert retry_after_seconds(3) == 3
    assert retry_after_seconds(0.001) == 1
    assert retry_after_seconds(0) == 0
    assert retry_after_seconds(-1) == 0
    assert retry_after_seconds(float("nan")) == 0
    assert retry_after_seconds(1e12) == 604_800, "a week at most"


def test_a_reason_as_the_service_keeps_it() -> None:
    assert fit_reason("no such customer:\n4711\r\n") == "no such customer: 4711"
    assert fit_reason("\t\n") == "", "nothing left: no reason"
    assert len(fit_reason("é" * 150).encode()) == 200, "cut at a character"


def test_backoff_heartbeats_refresh_and_long_poll_wait() -> None:
    backoff = Backoff(base=1, max=60)
    assert backoff.delay(1, 1.0) == 1 and backoff.delay(3, 0.0) == 2 and backoff.delay(99, 1.0) == 60
    assert heartbeat_delay(120) == 60 and heartbeat_delay(0) == 0.2
    assert not refresh_due(779, 900) and refresh_due(780, 900)
    wait = LongPollWait.new(25)
    wait.on_cut(4.1)
    assert (wait.wait_seconds, wait.ceiling_seconds) == (3, 3)
    wait.on_answer()
    assert wait.wait_seconds == 3


def _event(seq: int, state: str, **extra: str) -> EventEnvelope:
    return EventEnvelope(
        event_id=f"e{seq}", tenant_id="t", recipient_kind="agent", recipient_id="a", inbox_seq=seq,
        event_type="task", priority="normal", availability_at_utc="2020-01-01T00:00:00Z",
        ack_state=state, delivery_attempts=0, dead_letter_state="none",
        created_at_utc="2020-01-01T00:00:00Z", **extra,  # type: ignore[arg-type]
    )


def test_a_service_that_went_away_is_probed_at_most_two_seconds_apart() -> None:
    assert outage_delay(OUTAGE_BACKOFF, 1, 1.0, None) == 0.5
    for attempt in range(1, 100):
        for j in (0.0, 0.5, 1.0):
            delay = outage_delay(OUTAGE_BACKOFF, attempt, j, None)
            assert delay <= 2.0, f"a return noticed within 2 s: {delay}"
            assert delay >= 0.25, f"no hammering: {delay}"
    # Fifteen seconds away, with the mean jitter: about a dozen probes.
    elapsed, probes = 0.0, 0
    while elapsed < 15:
        probes += 1
        elapsed += outage_delay(OUTAGE_BACKOFF, probes, 0.5, None)
    assert 10 <= probes <= 13, probes
    # The service's Retry-After is never cut short, up to five minutes.
    assert outage_delay(OUTAGE_BACKOFF, 1, 0.0, 7.0) == 7.0
    assert outage_delay(OUTAGE_BACKOFF, 1, 0.0, 86_400.0) == 300.0


def test_the_cursor_moves_over_terminal_events_only() -> None:
    scan = Scan(10)
    now = 1_800_000_000_000
    scan.add_page([_event(11, "acked"), _event(12, "dead_letter"), _event(13, "available"), _event(14, "acked")], 14, 20, now, set())
    assert (scan.cursor, scan.claimable, scan.blocked, scan.head_seq) == (12, 1, True, 20)
    leased = _event(15, "claimed", visibility_lease_until_utc="2027-01-15T08:00:00Z")
    scan.add_page([leased], 15, 20, now, set())
    assert scan.cursor == 12 and scan.next_change_ms is not None
    own = Scan(0)
    own.add_page([leased], 15, 20, now, {"e15"})
    assert own.next_change_ms is None, "our own lease is no reason to wake"


def test_resync_pages_are_joined_up_to_the_resume_point() -> None:
    snapshot = start(ResyncResponse(9, 1, 9, [_event(2, "available"), _event(4, "available")], True))
    assert next_page_after(snapshot) == 4
    add_page(snapshot, [_event(5, "available"), _event(10, "available")], True)
    assert [e.inbox_seq for e in snapshot.open_events] == [2, 4, 5]
    assert next_page_after(snapshot) is None


def test_problems_carry_code_status_detail_and_retry_after() -> None:
    response = httpx.Response(
        503,
        headers={"retry-after": "7", "content-type": "application/problem+json"},
        json={"type": "urn:agent-inbox:problem:overloaded", "title": "t", "status": 503, "code": "overloaded", "detail": "try later", "extra": 1},
    )
    err = problem(response)
    assert (err.status, err.code, err.detail, err.retry_after, err.extensions) == (503, "overloaded", "try later", 7.0, {"extra": 1})
    assert err.transient
    assert RetryPolicy().delay(err, 1) == 7.0
    assert RetryPolicy(attempts_max=1).delay(err, 1) is None
    html = problem(httpx.Response(502, text="<html>bad gateway</html>"))
    assert html.code == "http_502" and html.transient
    assert not ProblemError(409, "lease_mismatch", "x").transient
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 - 10) == 10.0
