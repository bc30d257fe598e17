"""Joining the pages of the resync snapshot after ``cursor_reset_required`` into one, so the
resync callback never rebuilds from a part. Events past the first page's resume point are
left out: the scans that follow the resync find them as usual."""

from __future__ import annotations

from ._models import EventEnvelope, ResyncResponse


def add_page(snapshot: ResyncResponse, events: list[EventEnvelope], more: bool) -> None:
    resume = snapshot.resume_after_seq
    past_resume = any(e.inbox_seq > resume for e in events)
    snapshot.more_available = more and bool(events) and not past_resume
    snapshot.open_events.extend(e for e in events if e.inbox_seq <= resume)


def next_page_after(snapshot: ResyncResponse) -> int | None:
    """Where the next page starts, or ``None`` when the snapshot is whole."""
    if snapshot.more_available and snapshot.open_events:
        return snapshot.open_events[-1].inbox_seq
    return None


def start(first: ResyncResponse) -> ResyncResponse:
    events, first.open_events = first.open_events, []
    add_page(first, events, first.more_available)
    return first
