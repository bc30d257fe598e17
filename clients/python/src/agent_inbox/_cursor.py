"""What a scan of the inbox after the cursor means, as a pure fold over poll pages: how far
the cursor may move (only over a prefix of terminal events), how many events are claimable
now, and when something not claimable yet may become so."""

from __future__ import annotations

from collections.abc import Iterable, Set
from datetime import datetime

from ._models import EventEnvelope

TERMINAL = frozenset(("acked", "dead_letter", "quarantined", "expired"))


def parse_utc_ms(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


class Scan:
    def __init__(self, cursor: int) -> None:
        self.cursor = cursor
        self.blocked = False
        self.claimable = 0
        self.next_change_ms: int | None = None
        self.head_seq = 0
        self.seen_through = cursor

    def add_page(
        self,
        events: Iterable[EventEnvelope],
        next_cursor: int,
        head_seq: int,
        now_ms: int,
        held: Set[str],
    ) -> None:
        """Adds one page. ``held`` are the events this agent works on: their leases are ours."""
        self.head_seq = max(self.head_seq, head_seq)
        for event in events:
            self.seen_through = max(self.seen_through, event.inbox_seq)
            state = event.ack_state
            if state in TERMINAL:
                if not self.blocked:
                    self.cursor = max(self.cursor, event.inbox_seq)
                continue
            if state == "claimed":
                until = parse_utc_ms(event.visibility_lease_until_utc)
                if until is not None and event.event_id not in held:
                    self._wake_at(until)
            elif state in ("available", "retry_scheduled"):
                available = parse_utc_ms(event.availability_at_utc) or 0
                retry = parse_utc_ms(event.next_retry_at_utc) or 0
                start = max(available, retry)
                if start <= now_ms and state == "available":
                    self.claimable += 1
                elif event.event_id not in held:
                    self._wake_at(start)
            self.blocked = True
        if not self.blocked:
            self.cursor = max(self.cursor, next_cursor)
        self.seen_through = max(self.seen_through, next_cursor)

    def _wake_at(self, at_ms: int) -> None:
        self.next_change_ms = at_ms if self.next_change_ms is None else min(self.next_change_ms, at_ms)
