"""The ``text/event-stream`` wire format: an incremental parser fed raw bytes as they arrive,
yielding complete events. Pure, so any chunking gives the same events."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Longest line accepted; a stream sending longer lines is broken or hostile.
LINE_BYTES_MAX = 64 * 1024
_LINE_END = re.compile(rb"\r\n|\r(?!\Z)|\n")


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None = None
    retry_ms: int | None = None


class SseParser:
    def __init__(self) -> None:
        self._buffer = bytearray()
        self._after_cr = False
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry_ms: int | None = None
        self._pending = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Feeds bytes; returns the events they complete."""
        events: list[SseEvent] = []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = False
        start = 0
        for match in _LINE_END.finditer(chunk):
            self._buffer += chunk[start : match.start()]
            line = bytes(self._buffer).decode("utf-8", "replace")
            self._buffer.clear()
            event = self._line(line)
            if event is not None:
                events.append(event)
            start = match.end()
        rest = chunk[start:]
        if rest.endswith(b"\r"):
            # A line ended with a lone CR so far; a LF starting the next chunk belongs to it.
            self._buffer += rest[:-1]
            line = bytes(self._buffer).decode("utf-8", "replace")
            self._buffer.clear()
            self._after_cr = True
            event = self._line(line)
            if event is not None:
                events.append(event)
        else:
            self._buffer += rest
        if len(self._buffer) > LINE_BYTES_MAX:
            raise ValueError(f"the event stream sent a line longer than {LINE_BYTES_MAX} bytes")
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._last_id = value
        elif name == "retry":
            if value.isdigit():
                self._retry_ms = int(value)
        else:
            return None
        self._pending = True
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._pending:
            return None
        self._pending = False
        event = SseEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._last_id,
            retry_ms=self._retry_ms,
        )
        self._event, self._data, self._retry_ms = "", [], None
        return event
