"""Fixtures for the `agent-inbox mcp` tests: a real `agent-inbox serve` on SQLite, tokens
issued against its database, HTTP publishing, and MCP clients (the official Python SDK)
spawning `agent-inbox mcp` over stdio.

The binary comes from AGENT_INBOX_BIN (default: target/debug/agent-inbox of this repo).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parents[4]
BIN = os.environ.get("AGENT_INBOX_BIN", str(REPO / "target" / "debug" / "agent-inbox"))
TENANT = "demo"
STARTUP_SECONDS = 30
_agents = itertools.count(1)


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


@dataclass
class InboxServer:
    """One `agent-inbox serve` process and the database its tokens are issued against."""

    base: str
    database_url: str
    process: subprocess.Popen
    home: Path
    log: list[str] = field(default_factory=list)

    def issue(
        self,
        subject: str,
        kind: str = "agent",
        refresh: bool = False,
        ttl: str | None = None,
        tenant: str = TENANT,
        scopes: str | None = None,
    ) -> list[str]:
        """Issues a token (and with `refresh` a refresh token) as an operator would."""
        args = [BIN, "token", "issue", "--tenant", tenant, "--subject", subject, "--kind", kind]
        args += ["--database-url", self.database_url]
        if refresh:
            args.append("--refresh")
        if ttl:
            args += ["--ttl", ttl]
        if scopes:
            args += ["--scope", scopes]
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, env=clean_env(self.home))
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    def agent_token(self, subject: str, **kwargs: Any) -> str:
        return self.issue(subject, **kwargs)[0]

    def publisher_token(self, tenant: str = TENANT) -> str:
        return self.issue("test_app", kind="publisher", tenant=tenant)[0]

    def http(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                text = answer.read()
                return answer.status, json.loads(text) if text else None
        except urllib.error.HTTPError as refused:
            text = refused.read()
            return refused.code, json.loads(text) if text else None

    def publish(self, token: str, recipient: str, payload: dict, event_type: str = "task.assigned") -> str:
        status, body = self.http(
            "POST",
            "/v1/events",
            token,
            {"recipients": [recipient], "event_type": event_type, "payload": payload},
        )
        assert status == 200 or status == 201, body
        return body["deliveries"][0]["event_id"]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a child: no inherited agent-inbox settings, a private config dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_INBOX_")}
    env.update(
        AGENT_INBOX_HOME=str(home),
        AGENT_INBOX_SECRET_STORE="file",
        AGENT_INBOX_LOG="warn,agent_inbox=info",
    )
    env.update(extra)
    return env


def start_server(directory: Path) -> InboxServer:
    database_url = f"sqlite://{directory}/inbox.db"
    home = directory / "operator"
    home.mkdir()
    process = subprocess.Popen(
        [BIN, "serve", "--listen", "127.0.0.1:0", "--database-url", database_url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(home),
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
    return InboxServer(base=base[0], database_url=database_url, process=process, home=home, log=log)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def server() -> Any:
    assert Path(BIN).exists(), f"{BIN} is missing; build it with: cargo build -p agent-inbox"
    directory = Path(tempfile.mkdtemp(prefix="agent-inbox-mcp-"))
    inbox = start_server(directory)
    try:
        yield inbox
    finally:
        inbox.process.terminate()
        try:
            inbox.process.wait(10)
        except subprocess.TimeoutExpired:
            inbox.process.kill()
            inbox.process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def agent_id() -> str:
    """A fresh agent per test, so inboxes never mix."""
    return f"agent_{os.getpid()}_{next(_agents)}"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private agent-inbox config directory for one test's `login` profile."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def mcp_parameters(home: Path, args: list[str], **env: str) -> StdioServerParameters:
    return StdioServerParameters(command=BIN, args=["mcp", *args], env=clean_env(home, **env))


@contextlib.asynccontextmanager
async def mcp_client(home: Path, args: list[str], mode: str = "auto", **kwargs: Any):
    """An MCP client session with `agent-inbox mcp ARGS` as its server process."""
    async with Client(mcp_parameters(home, args), mode=mode, read_timeout_seconds=60, **kwargs) as client:
        yield client


def login(server: InboxServer, home: Path, agent: str, tenant: str = TENANT, *flags: str) -> Path:
    """`agent-inbox login` with a fresh refresh token; returns the file that keeps it."""
    refresh = server.issue(agent, refresh=True, tenant=tenant)[1]
    out = subprocess.run(
        [BIN, "login", "--server", server.base, *flags],
        input=refresh + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(home),
    )
    assert out.returncode == 0, out.stderr
    return home / "default.refresh-token"


def structured(result: Any) -> dict:
    """A tool result's structured content, which carries the same JSON as its text."""
    assert result.structured_content is not None, result
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


class RefusingProxy:
    """A loopback HTTP proxy in front of the real server. It forwards every request, except
    that the next `count` requests to `path` get `status` with a Retry-After header and a
    problem document, as the service answers when its database is busy (503) or a caller is
    rate limited (429). It records when each request to a refused path arrived."""

    PROBLEMS = {503: ("database_busy", "the database is busy; retry in a moment"),
                429: ("rate_limited", "sending requests faster than allowed")}

    def __init__(self, target: str) -> None:
        import http.client
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        self.rules: dict[str, list[Any]] = {}
        self.arrivals: dict[str, list[float]] = {}
        self.lock = threading.Lock()
        upstream = urlsplit(target)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_any(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                path = self.path.split("?")[0]
                with proxy.lock:
                    rule = proxy.rules.get(path)
                    if rule is not None:
                        proxy.arrivals.setdefault(path, []).append(time.monotonic())
                    refuse = rule is not None and rule[2] > 0
                    if refuse:
                        rule[2] -= 1
                if refuse:
                    status, retry_after = rule[0], rule[1]
                    code, detail = proxy.PROBLEMS[status]
                    problem = json.dumps(
                        {"type": f"urn:agent-inbox:problem:{code}", "title": code, "status": status,
                         "code": code, "detail": detail}
                    ).encode()
                    self.send_response(status)
                    self.send_header("content-type", "application/problem+json")
                    self.send_header("retry-after", str(retry_after))
                    self.send_header("content-length", str(len(problem)))
                    self.end_headers()
                    self.wfile.write(problem)
                    return
                connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "host")}
                headers["host"] = upstream.netloc
                connection.request(self.command, self.path, body=body or None, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            do_GET = do_POST = do_DELETE = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def refuse(self, path: str, status: int, retry_after: int, count: int) -> None:
        with self.lock:
            self.rules[path] = [status, retry_after, count]
            self.arrivals[path] = []

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def proxy(server: InboxServer) -> Any:
    refusing = RefusingProxy(server.base)
    try:
        yield refusing
    finally:
        refusing.close()


class RawClient:
    """A JSON-RPC client over the stdio of `agent-inbox mcp`, written by hand: for what the
    official SDK will not send or accept (a task on a 2025-11-25 session), and to stand in for
    a client with its own stack (Claude Code). Notifications are kept with when they arrived."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.ids = itertools.count(1)
        self.answers: dict[Any, Any] = {}
        self.notifications: list[tuple[float, dict]] = []
        self.arrived = None  # an anyio.Event, made on the event loop

    async def _read(self) -> None:
        import anyio

        buffered = b""
        async for chunk in self.process.stdout:
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                if not line.strip():
                    continue
                message = json.loads(line)
                if "method" in message and "id" not in message:
                    self.notifications.append((time.monotonic(), message))
                elif "id" in message:
                    self.answers[message["id"]] = message
                self.arrived.set()
                self.arrived = anyio.Event()

    async def send(self, message: dict) -> None:
        await self.process.stdin.send((json.dumps(message) + "\n").encode())

    async def request(self, method: str, params: dict | None = None, seconds: float = 30) -> dict:
        request_id = next(self.ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.until(lambda: self.answers.get(request_id), f"the answer to {method}", seconds)

    async def notify(self, method: str, params: dict | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    def received(self, method: str, since: int = 0) -> list[tuple[float, dict]]:
        return [(at, n) for at, n in self.notifications[since:] if n["method"] == method]

    async def until(self, condition: Callable[[], Any], what: str, seconds: float = 10) -> Any:
        import anyio

        with anyio.fail_after(seconds):
            while not (found := condition()):
                await self.arrived.wait()
        return found

    async def initialize(self, capabilities: dict | None = None, version: str = "2025-11-25") -> dict:
        answer = await self.request("initialize", {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "agent-inbox-tests", "version": "0"},
        })
        assert "result" in answer, answer
        await self.notify("notifications/initialized")
        return answer["result"]


@contextlib.asynccontextmanager
async def raw_client(home: Path, args: list[str]):
    """`agent-inbox mcp ARGS` with a `RawClient` on its stdio; its stderr is kept in a file."""
    import anyio

    log = home / "mcp-stderr.log"
    with open(log, "wb") as stderr:
        process = await anyio.open_process([BIN, "mcp", *args], env=clean_env(home), stderr=stderr)
        client = RawClient(process)
        client.arrived = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(client._read)
                try:
                    yield client
                finally:
                    await process.stdin.aclose()
                    with anyio.move_on_after(5):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                    group.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
