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
            except OSError as err:
                raise DaemonUnavailable(f"no local daemon answers at {self.path}: {err}") from err
            return _ask(conn, _wait_line(identity, timeout), timeout)

    async def wait_async(self, identity: DaemonIdentity, timeout: float) -> int | None:
        """:meth:`wait` for asyncio."""
        if not hasattr(socket, "AF_UNIX"):
            raise DaemonUnavailable("the local wake daemon needs Unix domain sockets")
        loop = asyncio.get_running_loop()
        # A plain socket rather than asyncio's streams: after a failed write a stream drops
        # what the daemon sent, and that may be the reason it hung up.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(conn, str(self.path)), ANSWER_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as err:
                raise DaemonUnavailable(f"no local daemon answers at {self.path}: {err!r}") from err
            return await _ask_async(conn, _wait_line(identity, timeout), timeout)


#: How long a request that could not be sent waits for the answer the daemon may have sent
#: before hanging up: one that refuses at once (another user, too many clients) writes its
#: answer and hangs up, so a write a moment later fails (EPIPE) with the answer already there.
_REFUSAL_READ_TIMEOUT = 0.2


def _ask(conn: socket.socket, request: bytes, timeout: float) -> int | None:
    """Sends a wait on a connected blocking socket and reads its answers."""
    reader = conn.makefile("rb")
    try:
        conn.sendall(request)
    except OSError as err:
        conn.settimeout(_REFUSAL_READ_TIMEOUT)
        try:
            line = reader.readline(LINE_BYTES_MAX)
        except OSError:
            line = b""
        raise _refusal(line) or DaemonUnavailable(f"the local daemon broke off: cannot send the request: {err}") from err
    try:
        answer = _parse(reader.readline(LINE_BYTES_MAX))
        if answer.get("type") == "waiting":
            conn.settimeout(timeout + _FINAL_ANSWER_GRACE)
            answer = _parse(reader.readline(LINE_BYTES_MAX))
    except OSError as err:
        raise DaemonUnavailable(f"the local daemon broke off: {err}") from err
    return _outcome(answer)


async def _ask_async(conn: socket.socket, request: bytes, timeout: float) -> int | None:
    """:func:`_ask` on a connected non-blocking socket."""
    lines = _SocketLines(conn)
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_sendall(conn, request), ANSWER_TIMEOUT)
    except (OSError, asyncio.TimeoutError) as err:
        try:
            line = await asyncio.wait_for(lines.readline(), _REFUSAL_READ_TIMEOUT)
        except (OSError, asyncio.TimeoutError):
            line = b""
        raise _refusal(line) or DaemonUnavailable(f"the local daemon broke off: cannot send the request: {err!r}") from err
    try:
        answer = _parse(await asyncio.wait_for(lines.readline(), ANSWER_TIMEOUT))
        if answer.get("type") == "waiting":
            answer = _parse(await asyncio.wait_for(lines.readline(), timeout + _FINAL_ANSWER_GRACE))
    except (OSError, asyncio.TimeoutError) as err:
        raise DaemonUnavailable(f"the local daemon broke off: {err!r}") from err
    return _outcome(answer)


class _SocketLines:
    """Lines from a non-blocking socket, at most :data:`LINE_BYTES_MAX` bytes each, newline
    included; a line cut short (the daemon hung up, or the line is too long) comes without its
    newline, as a file's ``readline(LINE_BYTES_MAX)`` gives it."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._buffer = b""

    async def readline(self) -> bytes:
        while True:
            newline = self._buffer.find(b"\n", 0, LINE_BYTES_MAX)
            if newline >= 0 or len(self._buffer) >= LINE_BYTES_MAX:
                end = newline + 1 if newline >= 0 else LINE_BYTES_MAX
                line, self._buffer = self._buffer[:end], self._buffer[end:]
                return line
            chunk = await asyncio.get_running_loop().sock_recv(self._conn, LINE_BYTES_MAX)
            if not chunk:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += chunk


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


def _refusal(line: bytes) -> DaemonUnavailable | None:
    """The daemon's refusal, if ``line`` is one."""
    try:
        answer = _parse(line)
    except DaemonUnavailable:
        return None
    if answer.get("type") != "error":
        return None
    return DaemonUnavailable(f"the local daemon refused: {answer.get('message')}", answer.get("code"))


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
