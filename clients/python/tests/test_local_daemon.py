"""``wait_for_work`` asks the local wake daemon first: a real ``agent-inbox daemon`` for a
profile ``agent-inbox login`` made answers it (the daemon counts the wait), and without a
daemon, or with one that refuses, the service answers the same."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_inbox import (
    AsyncClient,
    Client,
    DaemonIdentity,
    DaemonUnavailable,
    LocalDaemon,
    wait_for_work,
    wait_for_work_async,
)

from conftest import Server, binary, unique, wait_until


class Local:
    """A login profile for a fresh agent, and a daemon for it."""

    def __init__(self, server: Server, directory: Path) -> None:
        self.agent = unique("py_daemon")
        self.home = directory / "home"
        self.socket = directory / "run" / "daemon.sock"
        self.env = dict(os.environ, AGENT_INBOX_HOME=str(self.home), AGENT_INBOX_SECRET_STORE="file",
                        AGENT_INBOX_DAEMON_SOCKET=str(self.socket))
        refresh = server.token(self.agent, refresh=True).splitlines()[1]
        subprocess.run([binary(), "login", "--server", server.base], input=refresh + "\n", text=True,
                       env=self.env, check=True, capture_output=True, timeout=60)
        self.identity = DaemonIdentity.from_profile(home=self.home)
        self.daemon = LocalDaemon(self.socket)
        self.access = server.token(self.agent)
        self.process: subprocess.Popen[bytes] | None = None

    def start_daemon(self) -> None:
        self.process = subprocess.Popen([binary(), "daemon"], env=self.env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_until("the daemon follows the profile, live", 20, lambda: self.fresh())

    def status(self) -> dict[str, object] | None:
        out = subprocess.run([binary(), "daemon", "status"], env=self.env, capture_output=True, timeout=30)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def fresh(self) -> bool:
        status = self.status()
        return bool(status and any(i["fresh"] for i in status["identities"]))  # type: ignore[attr-defined]

    def waiters(self) -> int:
        status = self.status()
        return sum(i["waiters"] for i in status["identities"]) if status else 0  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def local(server: Server, tmp_path: Path) -> Iterator[Local]:
    started = Local(server, tmp_path)
    try:
        yield started
    finally:
        started.stop()


def test_the_daemon_answers_a_wait_without_a_connection_of_our_own(server: Server, local: Local) -> None:
    local.start_daemon()
    found: list[int | None] = []
    with Client(server.base, local.access) as client:
        waiting = threading.Thread(target=lambda: found.append(wait_for_work(client, 30, identity=local.identity, daemon=local.daemon)))
        waiting.start()
        wait_until("the daemon holds the wait", 20, lambda: local.waiters() == 1)
        server.publish(local.agent)
        waiting.join(20)
    assert found == [1]
    status = local.status()
    assert status is not None and status["waits_answered"] == 1
    # asyncio, with the event still waiting: answered at once, by the daemon again.
    async def wait_async() -> int | None:
        async with AsyncClient(server.base, local.access) as client:
            return await wait_for_work_async(client, 10, identity=local.identity, daemon=local.daemon)
    assert asyncio.run(wait_async()) == 1
    status = local.status()
    assert status is not None and status["waits_answered"] == 2


def test_without_the_daemon_the_service_gives_the_same_answer(server: Server, local: Local) -> None:
    with pytest.raises(DaemonUnavailable):
        local.daemon.wait(local.identity, 1)
    with Client(server.base, local.access) as client:
        started = time.monotonic()
        assert wait_for_work(client, 1, identity=local.identity, daemon=local.daemon) is None
        assert time.monotonic() - started >= 0.9, "waited its time at the service"
        server.publish(local.agent, n=2)
        assert wait_for_work(client, 10, identity=local.identity, daemon=local.daemon) == 2

    # A daemon that refuses (it knows the profile as another agent) is asked no further.
    local.start_daemon()
    other = DaemonIdentity(local.identity.profile, local.identity.server_url, local.identity.tenant_id, "someone_else")
    with pytest.raises(DaemonUnavailable) as refused:
        local.daemon.wait(other, 1)
    assert refused.value.code == "identity_mismatch"
    with Client(server.base, local.access) as client:
        assert wait_for_work(client, 10, identity=other, daemon=local.daemon) == 2


class RefusingDaemon:
    """A daemon that refuses every client at once, as the real one refuses another user's
    process: it writes its answer and hangs up without reading the request."""

    def __init__(self, path: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.sendall(b'{"v":1,"type":"error","code":"peer_refused","message":"not for you"}\n')
            conn.close()

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(10)


def test_a_refusal_sent_before_the_request_is_read_is_named(tmp_path: Path) -> None:
    """A request longer than the socket's buffer is still being written when the daemon hangs
    up, so the write fails (EPIPE, or a reset): the refusal already sent is still named."""
    refusing = RefusingDaemon(tmp_path / "daemon.sock")
    try:
        daemon = LocalDaemon(tmp_path / "daemon.sock")
        long = DaemonIdentity("p" * (4 << 20), "http://127.0.0.1:1", "t", "a")
        with pytest.raises(DaemonUnavailable) as refused:
            daemon.wait(long, 1)
        assert refused.value.code == "peer_refused", refused.value
        assert "not for you" in str(refused.value)

        async def wait_async() -> None:
            await daemon.wait_async(long, 1)
        with pytest.raises(DaemonUnavailable) as refused:
            asyncio.run(wait_async())
        assert refused.value.code == "peer_refused", refused.value
    finally:
        refusing.close()
