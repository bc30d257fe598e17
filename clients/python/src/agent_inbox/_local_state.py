"""The agent's own durable memory in a local SQLite file: the cursor it polls after, and a
bounded record of events it already processed (with the result), so an event delivered again
after a crash or a lost acknowledgement is acknowledged without running the handler twice.
The same schema as the Rust SDK's, so both can share a file, plus a table of its own for the
reasons of quarantined events (so a redelivery is acknowledged with the same one). Rows are
keyed by inbox."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from ._errors import LocalStateError

PROCESSED_CAPACITY_DEFAULT = 10_000
_PRUNE_EVERY = 64

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS inbox_cursor (
        inbox TEXT PRIMARY KEY,
        after_seq INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS processed_event (
        inbox TEXT NOT NULL,
        event_id TEXT NOT NULL,
        inbox_seq INTEGER NOT NULL,
        result TEXT NOT NULL,
        processed_at_ms INTEGER NOT NULL,
        PRIMARY KEY (inbox, event_id))""",
    "CREATE INDEX IF NOT EXISTS processed_event_age ON processed_event (inbox, processed_at_ms)",
    """CREATE TABLE IF NOT EXISTS processed_quarantine (
        inbox TEXT NOT NULL,
        event_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        class TEXT NOT NULL,
        PRIMARY KEY (inbox, event_id))""",
)


def _now_ms() -> int:
    return int(time.time() * 1000)


class LocalState:
    """The state file. Thread-safe; each call is one short transaction."""

    def __init__(self, path: str | os.PathLike[str], capacity: int = PROCESSED_CAPACITY_DEFAULT):
        self.path = Path(path)
        self.capacity = max(capacity, 1)
        self._lock = threading.Lock()
        self._inserts = 0
        try:
            if self.path.parent != Path(""):
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(
                self.path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed record survives the process crashing (what the
            # record is for) without an fsync per event.
            self._db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                self._db.execute(statement)
            # Reads get a connection of their own: in WAL mode they never wait for a write
            # (nor for the fsync of a checkpoint), so an agent's event loop is not held up.
            self._reader = sqlite3.connect(
                self.path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
            self._read_lock = threading.Lock()
        except (sqlite3.Error, OSError) as err:
            raise LocalStateError(f"local state {self.path}: {err}") from err

    def _run(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as err:
            raise LocalStateError(f"local state {self.path}: {err}") from err

    def _read(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            with self._read_lock:
                return self._reader.execute(sql, args).fetchall()
        except sqlite3.Error as err:
            raise LocalStateError(f"local state {self.path}: {err}") from err

    def cursor(self, inbox: str) -> int:
        """The cursor to poll after (0 when none was stored)."""
        rows = self._read("SELECT after_seq FROM inbox_cursor WHERE inbox = ?", (inbox,))
        return max(int(str(rows[0][0])), 0) if rows else 0

    def advance_cursor(self, inbox: str, after_seq: int) -> None:
        """Moves the cursor forward, never back (another process sharing the file may be ahead)."""
        self._run(
            """INSERT INTO inbox_cursor (inbox, after_seq, updated_at_ms) VALUES (?, ?, ?)
               ON CONFLICT (inbox) DO UPDATE SET after_seq = MAX(after_seq, excluded.after_seq),
                   updated_at_ms = excluded.updated_at_ms""",
            (inbox, after_seq, _now_ms()),
        )

    def reset_cursor(self, inbox: str, after_seq: int) -> None:
        """Sets the cursor exactly: after a resync, where the service says to continue."""
        self._run(
            """INSERT INTO inbox_cursor (inbox, after_seq, updated_at_ms) VALUES (?, ?, ?)
               ON CONFLICT (inbox) DO UPDATE SET after_seq = excluded.after_seq,
                   updated_at_ms = excluded.updated_at_ms""",
            (inbox, after_seq, _now_ms()),
        )

    def processed(self, inbox: str, event_id: str) -> str | None:
        """``completed``, ``failed`` or ``quarantined`` when this agent processed ``event_id``
        before."""
        rows = self._read(
            "SELECT result FROM processed_event WHERE inbox = ? AND event_id = ?", (inbox, event_id)
        )
        if not rows:
            return None
        result = str(rows[0][0])
        return result if result in ("failed", "quarantined") else "completed"

    def quarantine_detail(self, inbox: str, event_id: str) -> tuple[str, str] | None:
        """The reason and class recorded with a ``quarantined`` result."""
        rows = self._read(
            "SELECT reason, class FROM processed_quarantine WHERE inbox = ? AND event_id = ?",
            (inbox, event_id),
        )
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def record_processed(
        self,
        inbox: str,
        event_id: str,
        inbox_seq: int,
        result: str,
        quarantine: tuple[str, str] | None = None,
    ) -> None:
        """Records the handler's result before it is acknowledged: a crash between the two then
        costs an acknowledgement, not a second run. ``quarantine``: with ``quarantined``, the
        reason and class."""
        if quarantine is not None:
            self._run(
                """INSERT INTO processed_quarantine (inbox, event_id, reason, class) VALUES (?, ?, ?, ?)
                   ON CONFLICT (inbox, event_id) DO UPDATE SET reason = excluded.reason,
                       class = excluded.class""",
                (inbox, event_id, quarantine[0], quarantine[1]),
            )
        self._run(
            """INSERT INTO processed_event (inbox, event_id, inbox_seq, result, processed_at_ms)
               VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (inbox, event_id) DO UPDATE SET result = excluded.result""",
            (inbox, event_id, inbox_seq, result, _now_ms()),
        )
        self._inserts += 1
        if self._inserts % _PRUNE_EVERY == 1:
            self.prune(inbox)

    def prune(self, inbox: str) -> None:
        """Forgets all but the newest ``capacity`` processed ids of ``inbox``."""
        self._run(
            """DELETE FROM processed_event WHERE inbox = ? AND rowid IN (
                   SELECT rowid FROM processed_event WHERE inbox = ?
                   ORDER BY processed_at_ms DESC, rowid DESC LIMIT -1 OFFSET ?)""",
            (inbox, inbox, self.capacity),
        )
        self._run(
            """DELETE FROM processed_quarantine WHERE inbox = ? AND event_id NOT IN (
                   SELECT event_id FROM processed_event WHERE inbox = ?)""",
            (inbox, inbox),
        )

    def processed_count(self, inbox: str) -> int:
        rows = self._read("SELECT COUNT(*) FROM processed_event WHERE inbox = ?", (inbox,))
        return int(str(rows[0][0]))

    def close(self) -> None:
        with self._lock, self._read_lock:
            self._db.close()
            self._reader.close()
