"""The real `agent-inbox serve` for tests: a fresh database (a SQLite file, or a uniquely named
MariaDB database dropped after), the server on a fixed free port (so a restart keeps its
address), tokens from `token issue`, publishing and reading an inbox, and waiting on a condition
with a deadline. The Python SDK's tests and the runners' conformance suite
(clients/conformance) share it."""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from agent_inbox import Client, PollRequest, ProblemError, PublishRequest

REPO = Path(__file__).resolve().parents[3]


def binary() -> str:
    return os.environ.get("AGENT_INBOX_BIN") or str(REPO / "target" / "debug" / "agent-inbox")


def mysql_base_url() -> str:
    return os.environ.get("AGENT_INBOX_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


def wait_until(what: str, timeout: float, condition: Callable[[], Any], every: float = 0.05) -> Any:
    """Polls ``condition`` until it is truthy; fails naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for: {what}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Database:
    """A fresh database: a SQLite file, or a uniquely named MariaDB database dropped after."""

    def __init__(self, backend: str, directory: Path) -> None:
        self.backend = backend
        # The secrets key file: beside a SQLite file `serve` makes its own; MariaDB needs one
        # named, shared by the server and `token issue`.
        self.key_args: list[str] = []
        if backend == "sqlite":
            self.path = directory / "inbox.db"
            self.url = f"sqlite://{self.path}"
            self.name = ""
        else:
            base = urlsplit(mysql_base_url())
            self.name = f"pyinbox_{uuid.uuid4().hex[:12]}"
            self.url = f"{base.scheme}://{base.netloc}/{self.name}"
            self._mysql(f"CREATE DATABASE {self.name}")
            key_file = directory / "secrets.key"
            made = subprocess.run([binary(), "keys", "new-secrets-key"], check=True, capture_output=True, text=True)
            key_file.write_text(made.stdout)
            key_file.chmod(0o600)
            self.key_args = ["--secrets-key-file", str(key_file)]

    def _mysql(self, sql: str, database: str | None = None) -> None:
        base = urlsplit(mysql_base_url())
        args = ["mysql", "-h", base.hostname or "127.0.0.1", "-P", str(base.port or 3306)]
        args += ["-u", base.username or "root"]
        if base.password:
            args.append(f"-p{base.password}")
        if database:
            args += ["-D", database]
        try:
            subprocess.run(args + ["-e", sql], check=True, capture_output=True, text=True, timeout=30)
        except FileNotFoundError as err:
            raise AssertionError("the MariaDB tests need the `mysql` client on PATH (apt-get install mariadb-client)") from err
        except subprocess.CalledProcessError as err:
            raise AssertionError(
                f"MariaDB at {mysql_base_url()} refused {sql!r}: {err.stderr.strip()}; start it, or set "
                "AGENT_INBOX_TEST_MYSQL_URL"
            ) from err

    def execute(self, sql: str) -> None:
        """Runs one statement on the service's own database (used only to age rows past the
        retention window, as the Rust tests do by moving a store's clock)."""
        if self.backend == "sqlite":
            db = sqlite3.connect(self.path, timeout=10)
            try:
                db.execute(sql)
                db.commit()
            finally:
                db.close()
        else:
            self._mysql(sql, self.name)

    def drop(self) -> None:
        if self.backend != "sqlite":
            self._mysql(f"DROP DATABASE IF EXISTS {self.name}")


class Server:
    """`agent-inbox serve` on a fixed free port (so a restart keeps its address)."""

    def __init__(self, backend: str, directory: Path, flags: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.db = Database(backend, directory)
        self.backend = backend
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.flags = flags or []
        self.env = env or {}
        self.process: subprocess.Popen[str] | None = None
        self._stderr: list[str] = []
        self.start()
        self.publisher = self.token("py_publisher", kind="publisher")
        # `token issue` beside a server that just started can mint with a signing key the
        # server loads only at its next key reload (every 500 ms here): wait for that.
        wait_until("the server accepts tokens issued beside it", 20, lambda: self._accepts(self.publisher))

    def _accepts(self, token: str) -> bool:
        answer = httpx.get(self.base + "/v1/inbox/head", headers={"authorization": f"Bearer {token}"})
        return answer.status_code != 401

    def start(self) -> None:
        env = dict(os.environ)
        env.update(
            {
                "AGENT_INBOX_SCAVENGE_INTERVAL": "200ms",
                "AGENT_INBOX_HEARTBEAT_INTERVAL": "2s",
                "AGENT_INBOX_SIGNING_KEYS_RELOAD_INTERVAL": "500ms",
                "AGENT_INBOX_LOG": "warn",
                "AGENT_INBOX_AGENT_REQUESTS_PER_SECOND": "100000",
                "AGENT_INBOX_AGENT_REQUESTS_BURST": "100000",
                "AGENT_INBOX_TENANT_REQUESTS_PER_SECOND": "100000",
                "AGENT_INBOX_TENANT_REQUESTS_BURST": "100000",
            }
        )
        env.update(self.env)
        self.process = subprocess.Popen(
            [binary(), "serve", "--listen", f"127.0.0.1:{self.port}", "--database-url", self.db.url,
             *self.db.key_args, "--lease-default", "2s", *self.flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line)
            if "agent-inbox listening on" in line:
                break
        else:
            raise AssertionError("the server exited before listening:\n" + "".join(self._stderr))
        stderr = self.process.stderr
        threading.Thread(target=lambda: self._stderr.extend(stderr), daemon=True).start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def token(self, subject: str, *, tenant: str = "pytest", kind: str = "agent",
              refresh: bool = False, ttl: str | None = None) -> str:
        """The access token (and with ``refresh``, ``"access\\nrefresh"``)."""
        args = [binary(), "token", "issue", "--tenant", tenant, "--subject", subject, "--kind", kind,
                "--database-url", self.db.url, *self.db.key_args]
        if refresh:
            args.append("--refresh")
        if ttl:
            args += ["--ttl", ttl]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
        # Its stderr says why (a database locked by a wedged server, say): keep it in the failure.
        assert out.returncode == 0, f"token issue exited {out.returncode}: {out.stderr.strip()}"
        return out.stdout.strip()

    def client(self, token: str) -> Client:
        return Client(self.base, token)

    def publish(self, recipient: str, n: int = 1, event_type: str = "task", tenant: str = "pytest",
                payload: dict[str, Any] | None = None) -> list[str]:
        publisher = self.publisher if tenant == "pytest" else self.token("py_publisher", tenant=tenant, kind="publisher")
        with Client(self.base, publisher) as client:
            ids = []
            for i in range(n):
                answer = client.publish(
                    PublishRequest(recipients=[recipient], event_type=event_type, payload=payload or {"n": i})
                )
                ids.append(answer.deliveries[0].event_id)
            return ids

    def events(self, token: str) -> dict[str, Any]:
        """Every event of the agent's inbox by id."""
        events: dict[str, Any] = {}
        after = 0
        with Client(self.base, token) as client:
            while True:
                try:
                    page = client.poll(PollRequest(after_seq=after, limit=500))
                except ProblemError as err:
                    if err.code != "cursor_reset_required":
                        raise
                    after = client.head().oldest_available_seq - 1
                    continue
                for event in page.events:
                    events[event.event_id] = event
                after = page.next_cursor
                if not page.more_available:
                    return events

    def all_in_state(self, token: str, ids: list[str], state: str) -> bool:
        events = self.events(token)
        return all(i in events and events[i].ack_state == state for i in ids)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


