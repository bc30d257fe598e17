"""Fixtures for the A2A tests: a real `agent-inbox serve` (on SQLite, or on a fresh MariaDB
database), tokens issued against its database, the agent's runner (`agent-inbox listen --batch 1`
with handler.py, started, stopped and SIGKILLed at will), and the official A2A SDKs as the
foreign clients: the Python `a2a-sdk` in this process, `@a2a-js/sdk` through client.mjs.

The binary comes from AGENT_INBOX_BIN (default: target/debug/agent-inbox of this repo); MariaDB
from AGENT_INBOX_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/test).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from google.protobuf.json_format import MessageToDict

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
BIN = os.environ.get("AGENT_INBOX_BIN", str(REPO / "target" / "debug" / "agent-inbox"))
MYSQL_URL = os.environ.get("AGENT_INBOX_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
TENANT = "demo"
AGENT = "alpha"
STARTUP_SECONDS = 30


def wait_until(condition: Callable[[], Any], seconds: float, what: str, every: float = 0.05) -> Any:
    """Polls `condition` until it returns something truthy, or fails naming `what`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        time.sleep(every)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A child's environment: no inherited agent-inbox settings, a private config dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_INBOX_")}
    env.update(AGENT_INBOX_HOME=str(home), AGENT_INBOX_SECRET_STORE="file", AGENT_INBOX_LOG="warn")
    env.update(extra)
    return env


class MariaDb:
    """A fresh database on the test MariaDB, dropped with it."""

    def __init__(self) -> None:
        url = urlsplit(MYSQL_URL)
        self.name = f"a2a_{secrets.token_hex(6)}"
        self.client = ["mariadb", "--protocol=tcp", "-h", url.hostname or "127.0.0.1", "-P", str(url.port or 3306)]
        self.client += ["-u", url.username or "root"] + ([f"-p{url.password}"] if url.password else [])
        self.sql(f"CREATE DATABASE {self.name}")
        self.url = f"{url.scheme}://{url.netloc}/{self.name}"

    def sql(self, statement: str) -> None:
        out = subprocess.run(self.client + ["-e", statement], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"MariaDB at {MYSQL_URL} refused {statement!r}: {out.stderr}"

    def drop(self) -> None:
        self.sql(f"DROP DATABASE IF EXISTS {self.name}")


@dataclass
class InboxServer:
    """One `agent-inbox serve` and what its children need to reach it."""

    base: str
    database_url: str
    process: subprocess.Popen
    directory: Path
    env: dict[str, str]
    log: list[str] = field(default_factory=list)

    def issue(self, subject: str, kind: str = "agent", scopes: str | None = None) -> str:
        args = [BIN, "token", "issue", "--tenant", TENANT, "--subject", subject, "--kind", kind]
        args += ["--database-url", self.database_url] + (["--scope", scopes] if scopes else [])
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, env=self.env)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()[0]

    @property
    def agent_url(self) -> str:
        """The agent's A2A base URL: its card is under it, as the SDKs resolve it."""
        return f"{self.base}/a2a/{TENANT}/{AGENT}/"

    def inbox(self, token: str) -> list[dict]:
        """Every event in the agent's inbox, as the agent polls them."""
        answer = httpx.post(f"{self.base}/v1/inbox/poll-after-cursor", json={}, headers={"authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        return answer.json()["events"]


def start_server(directory: Path, database_url: str) -> InboxServer:
    key_file = directory / "secrets.key"
    home = directory / "home"
    home.mkdir()
    env = clean_env(home, AGENT_INBOX_SECRETS_KEY_FILE=str(key_file))
    key = subprocess.run([BIN, "keys", "new-secrets-key"], capture_output=True, text=True, timeout=30, env=env)
    assert key.returncode == 0, key.stderr
    key_file.write_text(key.stdout)
    key_file.chmod(0o600)
    serve_env = dict(
        env,
        AGENT_INBOX_SCAVENGE_INTERVAL="200ms",
        AGENT_INBOX_CALLBACKS_ALLOW_HTTP_LOOPBACK="true",
        AGENT_INBOX_CALLBACKS_POLL_INTERVAL="100ms",
    )
    process = subprocess.Popen(
        [BIN, "serve", "--listen", "127.0.0.1:0", "--database-url", database_url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=serve_env,
    )
    log: list[str] = []
    found = threading.Event()
    base: list[str] = []

    def drain() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line)
            match = re.search(r"listening on (http://\S+)", line)
            if match and not found.is_set():
                base.append(match.group(1))
                found.set()

    threading.Thread(target=drain, daemon=True).start()
    if not found.wait(STARTUP_SECONDS):
        process.kill()
        raise AssertionError("agent-inbox serve did not start:\n" + "".join(log))
    server = InboxServer(base=base[0], database_url=database_url, process=process, directory=directory, env=env, log=log)
    wait_until(lambda: httpx.get(f"{server.base}/readyz").status_code == 200, STARTUP_SECONDS, "the server to be ready")
    return server


@pytest.fixture(params=["sqlite", "mariadb"])
def server(request: pytest.FixtureRequest) -> Any:
    assert Path(BIN).exists(), f"{BIN} is missing; build it with: cargo build -p agent-inbox"
    directory = Path(tempfile.mkdtemp(prefix="agent-inbox-a2a-"))
    database = MariaDb() if request.param == "mariadb" else None
    url = database.url if database else f"sqlite://{directory}/inbox.db"
    inbox = start_server(directory, url)
    try:
        yield inbox
    finally:
        inbox.process.terminate()
        try:
            inbox.process.wait(10)
        except subprocess.TimeoutExpired:
            inbox.process.kill()
            inbox.process.wait(10)
        if database:
            database.drop()
        shutil.rmtree(directory, ignore_errors=True)


class Runner:
    """The agent's runner: `agent-inbox listen --batch 1` running handler.py, in a process
    group of its own, with 2 s leases so a killed one's work comes back quickly."""

    def __init__(self, server: InboxServer, token: str, marks: Path, hang: bool) -> None:
        self.marks = marks
        env = dict(server.env, AGENT_INBOX_TOKEN=token, A2A_MARKS=str(marks), A2A_HANG="1" if hang else "0")
        command = [BIN, "listen", "--server", server.base, "--state", str(server.directory / "agent.state.db")]
        command += ["--lease", "2s", "--batch", "1", "--exec", f"{sys.executable} {HERE / 'handler.py'}"]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, start_new_session=True)

    def kill(self) -> None:
        """SIGKILLs the runner and the handler it runs, as a machine that dies would stop."""
        handlers = []
        for line in (self.marks / "started.log").read_text().splitlines():
            pid = int(line.split()[2])
            try:
                handlers.append(os.getpgid(pid))
            except ProcessLookupError:
                pass
        os.killpg(self.process.pid, signal.SIGKILL)
        for group in handlers:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


@pytest.fixture
def runners(server: InboxServer, tmp_path: Path) -> Any:
    """Starts runners for the agent `alpha` (`start(hang=...)`), all stopped at the end."""
    marks = tmp_path / "marks"
    marks.mkdir()
    token = server.issue(AGENT)
    started: list[Runner] = []

    def start(hang: bool = False) -> Runner:
        runner = Runner(server, token, marks, hang)
        started.append(runner)
        return runner

    start.marks = marks  # type: ignore[attr-defined]
    start.token = token  # type: ignore[attr-defined]
    yield start
    for runner in started:
        runner.stop()


class Stream:
    """A stream of events collected in the background until it ends."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    def wait(self, seconds: float = 60) -> list[dict]:
        assert self.done.wait(seconds), f"the stream did not end within {seconds}s; it got {self.events}"
        if self.error:
            raise self.error
        return self.events


class PythonPeer:
    """The Python `a2a-sdk` as the foreign client: the card resolved from the agent's URL, a
    client made by the SDK's factory for the card's JSON-RPC interface, the token on httpx."""

    name = "python"

    def __init__(self, server: InboxServer, token: str) -> None:
        self.url = server.agent_url.rstrip("/")
        self.token = token

    async def _client(self, http: httpx.AsyncClient, streaming: bool) -> Any:
        card = await A2ACardResolver(http, self.url).get_agent_card()
        return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming, polling=True)).create(card)

    def _run(self, work: Callable[[Any], Any], streaming: bool = False) -> Any:
        async def main() -> Any:
            async with httpx.AsyncClient(headers={"authorization": f"Bearer {self.token}"}) as http:
                return await work(await self._client(http, streaming))

        return asyncio.run(main())

    def send(self, message_id: str, text: str) -> dict:
        request = SendMessageRequest(message=Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)]))

        async def work(client: Any) -> dict:
            events = [MessageToDict(event) async for event in client.send_message(request)]
            assert len(events) == 1 and "task" in events[0], events
            return events[0]["task"]

        return self._run(work)

    def get(self, task_id: str) -> dict:
        return self._run(lambda client: _dict(client.get_task(GetTaskRequest(id=task_id))))

    def list(self) -> dict:
        return self._run(lambda client: _dict(client.list_tasks(ListTasksRequest(include_artifacts=True))))

    def cancel(self, task_id: str) -> dict:
        return self._run(lambda client: _dict(client.cancel_task(CancelTaskRequest(id=task_id))))

    def subscribe(self, task_id: str, after: int | None = None) -> Stream:
        stream = Stream()
        context = ClientCallContext(service_parameters={"Last-Event-ID": str(after)}) if after is not None else None

        async def work(client: Any) -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id), context=context):
                stream.events.append(MessageToDict(event))

        def run() -> None:
            try:
                self._run(work, streaming=True)
            except BaseException as error:  # noqa: BLE001 - reported by wait()
                stream.error = error
            stream.done.set()

        threading.Thread(target=run, daemon=True).start()
        return stream


async def _dict(answer: Any) -> dict:
    return MessageToDict(await answer)


class JsPeer:
    """`@a2a-js/sdk` as the foreign client, through client.mjs (one call per run)."""

    name = "js"

    def __init__(self, server: InboxServer, token: str) -> None:
        self.url = server.agent_url
        self.token = token

    def _call(self, *args: str) -> dict:
        out = subprocess.run(["node", str(HERE / "client.mjs"), args[0], self.url, self.token, *args[1:]],
                             capture_output=True, text=True, timeout=60, cwd=HERE)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout.splitlines()[-1])

    def send(self, message_id: str, text: str) -> dict:
        return self._call("send", message_id, text)

    def get(self, task_id: str) -> dict:
        return self._call("get", task_id)

    def list(self) -> dict:
        return self._call("list")

    def cancel(self, task_id: str) -> dict:
        return self._call("cancel", task_id)

    def subscribe(self, task_id: str, after: int | None = None) -> Stream:
        stream = Stream()
        args = ["node", str(HERE / "client.mjs"), "subscribe", self.url, self.token, task_id]
        args += [str(after)] if after is not None else []
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)

        def run() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                event = json.loads(line)
                if "error" in event:
                    stream.error = AssertionError(f"the JS client was refused: {event['error']}")
                    break
                stream.events.append(event)
            process.wait(30)
            if process.returncode and not stream.error:
                stream.error = AssertionError(f"client.mjs exited {process.returncode}: {process.stderr.read() if process.stderr else ''}")
            stream.done.set()

        threading.Thread(target=run, daemon=True).start()
        return stream


@pytest.fixture(params=["python", "js"])
def peer(request: pytest.FixtureRequest, server: InboxServer) -> Any:
    token = server.issue("peer_app", kind="publisher", scopes="a2a.send")
    return PythonPeer(server, token) if request.param == "python" else JsPeer(server, token)
