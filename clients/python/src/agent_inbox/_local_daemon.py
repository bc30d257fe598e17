"""The local wake daemon (``agent-inbox daemon``) from Python: ask it first whether work waits
for a login profile, and the service itself when it is absent, stale or refuses. The answer is
the same either way; when the daemon answers, this process opens no connection of its own.

The daemon speaks JSON lines on a Unix domain socket (the Rust crate's
``inbox_client::local_daemon::protocol``): one request line, answered by ``waiting`` and then
``work`` or ``timeout``, or by an ``error`` line with a stable ``code``."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._async_client import AsyncClient
from ._client import Client
from ._errors import InboxError, ProblemError
from ._models import PollRequest, PollResponse

PROTOCOL_VERSION = 1
#: Longest line either side accepts, newline included.
LINE_BYTES_MAX = 4096
#: How long connecting, and the daemon's first answer, may take.
ANSWER_TIMEOUT = 2.0
#: After a wait's own timeout, how long its last answer may still take.
_FINAL_ANSWER_GRACE = 2.0
#: Claimable events counted per look, as ``agent-inbox wait`` counts them.
_COUNTED_MAX = 100


class DaemonUnavailable(InboxError):
    """The daemon could not answer: absent, stale, refusing (``code`` names why) or broken."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class DaemonIdentity:
    """Who to ask about: a login profile and what it says, so a daemon reading another
    configuration directory refuses instead of answering for the wrong inbox."""

    profile: str
    server_url: str
    tenant_id: str
    agent_id: str

    @classmethod
    def from_profile(cls, profile: str = "default", home: Path | None = None,
                     server_url: str | None = None) -> DaemonIdentity:
        """The identity ``agent-inbox login`` recorded for ``profile`` in ``home``."""
        record = json.loads((home or config_home()).joinpath(f"{profile}.json").read_text())
        return cls(
            profile=profile,
            server_url=(server_url or record["server_url"]).rstrip("/"),
            tenant_id=record["tenant_id"],
            agent_id=record["agent_id"],
        )


def config_home() -> Path:
    """``AGENT_INBOX_HOME``, else ``$XDG_CONFIG_HOME/agent-inbox``, else
    ``~/.config/agent-inbox``: where ``agent-inbox login`` keeps profiles."""
    if os.environ.get("AGENT_INBOX_HOME"):
        return Path(os.environ["AGENT_INBOX_HOME"])
    if os.environ.get("XDG_CONFIG_HOME"):
        return Path(os.environ["XDG_CONFIG_HOME"]) / "agent-inbox"
    return Path.home() / ".config" / "agent-inbox"


def socket_path(home: Path | None = None) -> Path:
    """``AGENT_INBOX_DAEMON_SOCKET``, else ``$XDG_RUNTIME_DIR/agent-inbox/daemon.sock``, else
    ``daemon.sock`` in the configuration directory: where the daemon listens."""
    if os.environ.get("AGENT_INBOX_DAEMON_SOCKET"):
        return Path(os.environ["AGENT_INBOX_DAEMON_SOCKET"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "agent-inbox" / "daemon.sock"
    return (home or config_home()) / "daemon.sock"


class LocalDaemon:
    """The daemon at ``path`` (default: :func:`socket_path`)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or socket_path()

    def wait(self, identity: DaemonIdentity, timeout: float) -> int | None:
        """Claimable events once there are some (at most 100 counted), or ``None`` after
        ``timeout`` seconds with none. Raises :class:`DaemonUnavailable`."""
        if not hasattr(socket, "AF_UNIX"):
            raise DaemonUnavailable("the local wake daemon needs Unix domain sockets")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(ANSWER_TIMEOUT)
            try:
                conn.connect(str(self.path))
                conn.sendall(_wait_line(identity, timeout))
                reader = conn.makefile("rb")
                answer = _parse(reader.readline(LINE_BYTES_MAX))
                if answer.get("type") == "waiting":
                    conn.settimeout(timeout + _FINAL_ANSWER_GRACE)
                    answer = _parse(reader.readline(LINE_BYTES_MAX))
            except OSError as err:
                raise DaemonUnavailable(f"no local daemon answers at {self.path}: {err}") from err
        return _outcome(answer)

    async def wait_async(self, identity: DaemonIdentity, timeout: float) -> int | None:
        """:meth:`wait` for asyncio."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(self.path), limit=LINE_BYTES_MAX), ANSWER_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError, AttributeError) as err:
            raise DaemonUnavailable(f"no local daemon answers at {self.path}: {err!r}") from err
        try:
            writer.write(_wait_line(identity, timeout))
            await writer.drain()
            answer = _parse(await asyncio.wait_for(reader.readline(), ANSWER_TIMEOUT))
            if answer.get("type") == "waiting":
                answer = _parse(await asyncio.wait_for(reader.readline(), timeout + _FINAL_ANSWER_GRACE))
        except (OSError, ValueError, asyncio.TimeoutError) as err:
            raise DaemonUnavailable(f"the local daemon broke off: {err!r}") from err
        finally:
            writer.close()
        return _outcome(answer)


def wait_for_work(client: Client, timeout: float, *, identity: DaemonIdentity | None = None,
                  daemon: LocalDaemon | None = None) -> int | None:
    """Blocks until claimable work waits (returns how many, at most 100 counted) or ``timeout``
    seconds pass (``None``). With an ``identity`` the local daemon is asked first; when it
    cannot answer, the service is long-polled for the rest of the time, from the start of the
    inbox (a requeued event sits behind any cursor)."""
    deadline = time.monotonic() + timeout
    if identity is not None:
        try:
            return (daemon or LocalDaemon()).wait(identity, timeout)
        except DaemonUnavailable:
            pass
    after_seq, failures = 0, 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            page = client.poll(_look(after_seq, remaining))
        except InboxError as err:
            after_seq, failures = _after_failure(err, after_seq, failures, remaining)
            if failures:
                time.sleep(_backoff(err, failures, remaining))
            continue
        failures = 0
        found, after_seq = _found(page, after_seq)
        if found:
            return found


async def wait_for_work_async(client: AsyncClient, timeout: float, *,
                              identity: DaemonIdentity | None = None,
                              daemon: LocalDaemon | None = None) -> int | None:
    """:func:`wait_for_work` for asyncio."""
    deadline = time.monotonic() + timeout
    if identity is not None:
        try:
            return await (daemon or LocalDaemon()).wait_async(identity, timeout)
        except DaemonUnavailable:
            pass
    after_seq, failures = 0, 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            page = await client.poll(_look(after_seq, remaining))
        except InboxError as err:
            after_seq, failures = _after_failure(err, after_seq, failures, remaining)
            if failures:
                await asyncio.sleep(_backoff(err, failures, remaining))
            continue
        failures = 0
        found, after_seq = _found(page, after_seq)
        if found:
            return found


def _wait_line(identity: DaemonIdentity, timeout: float) -> bytes:
    request: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": "wait", "identity": asdict(identity),
                               "timeout_ms": max(0, int(timeout * 1000))}
    return (json.dumps(request, separators=(",", ":")) + "\n").encode()


def _parse(line: bytes) -> dict[str, Any]:
    if not line.endswith(b"\n"):
        raise DaemonUnavailable("the local daemon hung up or sent a line too long")
    try:
        answer = json.loads(line)
    except ValueError as err:
        raise DaemonUnavailable(f"the local daemon sent a line that is not JSON: {err}") from err
    if not isinstance(answer, dict) or answer.get("v") != PROTOCOL_VERSION:
        raise DaemonUnavailable(f"the local daemon speaks another protocol version: {line!r}")
    return answer


def _outcome(answer: dict[str, Any]) -> int | None:
    kind = answer.get("type")
    if kind == "work":
        return int(answer["claimable"])
    if kind == "timeout":
        return None
    if kind == "error":
        raise DaemonUnavailable(f"the local daemon refused: {answer.get('message')}", answer.get("code"))
    raise DaemonUnavailable(f"an answer out of place: {answer}")


def _look(after_seq: int, remaining: float) -> PollRequest:
    wait_seconds = min(25, max(1, math.ceil(remaining)))
    return PollRequest(after_seq=after_seq, limit=_COUNTED_MAX, wait_seconds=wait_seconds,
                       include_claimable_only=True)


def _found(page: PollResponse, after_seq: int) -> tuple[int, int]:
    """How many claimable events the page shows, and where to read next."""
    if page.events:
        return len(page.events), after_seq
    return 0, page.next_cursor if page.more_available else after_seq


def _after_failure(err: InboxError, after_seq: int, failures: int, remaining: float) -> tuple[int, int]:
    """A cursor reset restarts at the oldest event (no failure); a transient error counts one;
    anything else is raised."""
    if isinstance(err, ProblemError) and err.code == "cursor_reset_required":
        oldest = err.extensions.get("oldest_available_seq", 1)
        return max(0, int(oldest) - 1), 0
    if not err.transient:
        raise err
    return after_seq, failures + 1


def _backoff(err: InboxError, failures: int, remaining: float) -> float:
    delay = min(60.0, 2.0 ** (failures - 1))
    if isinstance(err, ProblemError) and err.retry_after is not None:
        delay = max(delay, err.retry_after)
    return min(delay, remaining)
