"""The pure parts that are this SDK's own: SSE parsing under any chunking, the resync page join,
and the problem decoding. The decisions the three runners share (schedules, backoff, Retry-After,
reasons, the cursor fold) are the shared vectors, replayed by test_vectors.py."""

from __future__ import annotations

import httpx
import pytest

from agent_inbox import Correlation, EventEnvelope, ResyncResponse
from agent_inbox._core import problem, RetryPolicy
from agent_inbox._errors import ProblemError
from agent_inbox._resync import add_page, next_page_after, start
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


def _event(seq: int) -> EventEnvelope:
    return EventEnvelope(
        event_id=f"e{seq}", tenant_id="t", recipient_kind="agent", recipient_id="a", inbox_seq=seq,
        event_type="task", priority="normal", availability_at_utc="2020-01-01T00:00:00Z",
        ack_state="available", delivery_attempts=0, dead_letter_state="none", correlation=Correlation(),
        created_at_utc="2020-01-01T00:00:00Z",
    )


def test_resync_pages_are_joined_up_to_the_resume_point() -> None:
    snapshot = start(ResyncResponse(head_seq=9, oldest_available_seq=1, resume_after_seq=9, open_events=[_event(2), _event(4)], more_available=True))
    assert next_page_after(snapshot) == 4
    add_page(snapshot, [_event(5), _event(10)], True)
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
