"""The Python Agent measured against a real `agent-inbox serve`, beside the Rust SDK's figures
from the same run (`inbox-bench agent`, driven as a subprocess).

- publish -> handler-start latency on SSE: 1,000 events published at 200/s by a separate
  process (SQLite), p50/p99/max;
- the same one event at a time (each published after the previous reached the handler), as
  the Rust bench measures it;
- drain: events/s of one agent with a no-op handler over a 10,000-event backlog on MariaDB
  (concurrency 8), and over a 2,000-event backlog on SQLite at concurrency 1 and 8 (the Rust
  bench's shape, for a like-for-like ratio).

    python bench/bench.py --rust-bench target/release/inbox-bench

AGENT_INBOX_BIN names the server binary; AGENT_INBOX_TEST_MYSQL_URL the MariaDB server (a
database is created and dropped). Progress goes to stderr, the table to stdout. Not a timed
test: the service, MariaDB and the agents share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from agent_inbox import Agent, AgentConfig, AsyncClient, Event, LocalState, PublishRequest, Client

REPO = Path(__file__).resolve().parents[3]
LIFTED = {
    "AGENT_INBOX_AGENT_REQUESTS_PER_SECOND": "100000",
    "AGENT_INBOX_AGENT_REQUESTS_BURST": "100000",
    "AGENT_INBOX_TENANT_REQUESTS_PER_SECOND": "100000",
    "AGENT_INBOX_TENANT_REQUESTS_BURST": "100000",
    "AGENT_INBOX_LOG": "warn",
    "AGENT_INBOX_SIGNING_KEYS_RELOAD_INTERVAL": "500ms",
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def binary() -> str:
    return os.environ.get("AGENT_INBOX_BIN") or str(REPO / "target" / "release" / "agent-inbox")


class Server:
    def __init__(self, database_url: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = database_url
        self.base = f"http://127.0.0.1:{port}"
        # MariaDB needs a secrets key file named (SQLite makes its own beside the database).
        self.key_args: list[str] = []
        if not database_url.startswith("sqlite"):
            key_file = Path(tempfile.mkdtemp()) / "secrets.key"
            made = subprocess.run([binary(), "keys", "new-secrets-key"], check=True, capture_output=True, text=True)
            key_file.write_text(made.stdout)
            key_file.chmod(0o600)
            self.key_args = ["--secrets-key-file", str(key_file)]
        self.process = subprocess.Popen(
            [binary(), "serve", "--listen", f"127.0.0.1:{port}", "--database-url", database_url, *self.key_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **LIFTED},
        )
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if "agent-inbox listening on" in line:
                break
        else:
            raise SystemExit("the server exited before listening")
        stderr = self.process.stderr
        threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()

    def token(self, subject: str, kind: str = "agent") -> str:
        out = subprocess.run(
            [binary(), "token", "issue", "--tenant", "bench", "--subject", subject, "--kind", kind,
             "--ttl", "1h", "--database-url", self.url, *self.key_args],
            check=True, capture_output=True, text=True,
        )
        token = out.stdout.strip()
        # A token minted beside a just-started server may name a key it loads a moment later.
        deadline = time.monotonic() + 20
        while httpx.get(self.base + "/v1/inbox/head", headers={"authorization": f"Bearer {token}"}).status_code == 401:
            if time.monotonic() > deadline:
                raise SystemExit("the server does not accept tokens issued beside it")
            time.sleep(0.1)
        return token

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def mysql(sql: str) -> None:
    base = urlsplit(os.environ.get("AGENT_INBOX_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"))
    args = ["mysql", "-h", base.hostname or "127.0.0.1", "-P", str(base.port or 3306), "-u", base.username or "root"]
    if base.password:
        args.append(f"-p{base.password}")
    subprocess.run(args + ["-e", sql], check=True, capture_output=True)


def mysql_url(name: str) -> str:
    base = urlsplit(os.environ.get("AGENT_INBOX_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"))
    return f"{base.scheme}://{base.netloc}/{name}"


def publish_paced(base: str, token: str, recipient: str, n: int, rate: float) -> None:
    """Run in a separate process: publishes ``n`` events at ``rate``/s, each carrying the
    monotonic time (system-wide on Linux) just before its request left."""
    with Client(base, token) as client:
        start = time.monotonic()
        for i in range(n):
            due = start + i / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            client.publish(PublishRequest(recipients=[recipient], event_type="bench.task",
                                          payload={"sent": time.monotonic(), "n": i}))


def publish_many(base: str, token: str, recipient: str, n: int, workers: int = 8) -> None:
    def work(count: int) -> None:
        with Client(base, token) as client:
            for _ in range(count):
                client.publish(PublishRequest(recipients=[recipient], event_type="bench.task", payload={"work": "none"}))

    threads = [threading.Thread(target=work, args=(n // workers + (1 if w < n % workers else 0),)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


async def sse_latency(server: Server, publisher: str, directory: Path, n: int, rate: float) -> list[float]:
    agent = "py_sse_agent"
    token = server.token(agent)
    latencies: list[float] = []
    done = asyncio.Event()
    warm = asyncio.Event()

    async def handler(event: Event) -> None:
        arrived = time.monotonic()
        payload = event.payload or {}
        if "sent" not in payload:
            warm.set()
            return
        latencies.append(arrived - payload["sent"])
        if len(latencies) == n:
            done.set()

    client = AsyncClient(server.base, token)
    stop = asyncio.Event()
    config = AgentConfig(concurrency=8)
    running = asyncio.ensure_future(Agent(client, LocalState(directory / "sse.db"), config).run(handler, stop=stop))
    # Let the agent connect and settle before measuring.
    await asyncio.sleep(1.0)
    await asyncio.to_thread(publish_many, server.base, publisher, agent, 1, 1)
    await asyncio.wait_for(warm.wait(), 30)
    publisher_process = subprocess.Popen(
        [sys.executable, __file__, "--publish-paced", json.dumps([server.base, publisher, agent, n, rate])]
    )
    await asyncio.wait_for(done.wait(), n / rate + 120)
    publisher_process.wait()
    stop.set()
    await running
    await client.aclose()
    return latencies


async def sse_latency_one_at_a_time(server: Server, publisher: str, directory: Path, n: int) -> list[float]:
    """The Rust bench's shape: each event published after the previous one reached the handler."""
    agent = "py_sse_serial"
    token = server.token(agent)
    arrivals: asyncio.Queue[float] = asyncio.Queue()

    async def handler(event: Event) -> None:
        arrivals.put_nowait(time.monotonic())

    client = AsyncClient(server.base, token)
    stop = asyncio.Event()
    running = asyncio.ensure_future(Agent(client, LocalState(directory / "serial.db")).run(handler, stop=stop))
    with Client(server.base, publisher) as publishing:
        request = PublishRequest(recipients=[agent], event_type="bench.task", payload={"work": "none"})
        await asyncio.to_thread(publishing.publish, request)
        await asyncio.wait_for(arrivals.get(), 30)
        latencies = []
        for _ in range(n):
            sent = time.monotonic()
            await asyncio.to_thread(publishing.publish, request)
            latencies.append(await asyncio.wait_for(arrivals.get(), 30) - sent)
    stop.set()
    await running
    await client.aclose()
    return latencies


async def drain(server: Server, publisher: str, directory: Path, subject: str, n: int, concurrency: int) -> float:
    token = server.token(subject)
    say(f"  publishing a backlog of {n}")
    await asyncio.to_thread(publish_many, server.base, publisher, subject, n)
    count = 0
    done = asyncio.Event()

    async def handler(event: Event) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    client = AsyncClient(server.base, token)
    stop = asyncio.Event()
    started = time.monotonic()
    agent = Agent(client, LocalState(directory / f"{subject}.db"), AgentConfig(concurrency=concurrency))
    running = asyncio.ensure_future(agent.run(handler, stop=stop))
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.monotonic() - started
    stop.set()
    summary = await running
    await client.aclose()
    say(f"  {summary.acked} acked in {elapsed:.2f} s")
    return n / elapsed


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(max(int(-(-len(ordered) * q // 1)), 1), len(ordered)) - 1
    return ordered[index]


def rust_figures(rust_bench: str | None, directory: Path) -> dict[str, str]:
    """Runs the Rust SDK's `inbox-bench agent` beside the same server binary; its rows by label."""
    if not rust_bench:
        return {}
    # `inbox-bench agent` finds `agent-inbox` in its own directory: lay out a copy of both.
    layout = directory / "rust"
    layout.mkdir(parents=True)
    shutil.copy(rust_bench, layout / "inbox-bench")
    shutil.copy(binary(), layout / "agent-inbox")
    say("Rust SDK: inbox-bench agent (SQLite)")
    out = subprocess.run(
        [str(layout / "inbox-bench"), "agent"], check=True, capture_output=True, text=True
    ).stdout
    rows = {}
    for line in out.splitlines():
        match = re.match(r"^(SSE agent|SDK agent, no-op, concurrency \d+|long-poll agent)\s{2,}(.*)$", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rust-bench", help="path of the built inbox-bench binary")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--backlog", type=int, default=10_000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="agent-inbox-py-bench-"))
    rows: list[tuple[str, str, str]] = []
    try:
        rust = rust_figures(args.rust_bench, directory)

        say(f"Python SSE agent: {args.events} events at {args.rate:.0f}/s (SQLite)")
        server = Server(f"sqlite://{directory / 'inbox.db'}")
        try:
            publisher = server.token("py_publisher", "publisher")
            latencies = await sse_latency(server, publisher, directory, args.events, args.rate)
            ms = [x * 1000 for x in latencies]
            rows.append((
                "SSE publish->handler-start (SQLite)",
                f"p50 {quantile(ms, 0.5):.1f} ms, p99 {quantile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms "
                f"({len(ms)} events at {args.rate:.0f}/s, concurrency 8)",
                "(the Rust bench publishes one at a time only: next row)",
            ))
            say("Python SSE agent: 300 events, one at a time (SQLite)")
            ms = [x * 1000 for x in await sse_latency_one_at_a_time(server, publisher, directory, 300)]
            rows.append((
                "SSE publish->handler-start, one at a time",
                f"p50 {quantile(ms, 0.5):.1f} ms, p99 {quantile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms ({len(ms)} events)",
                "SSE agent: " + rust.get("SSE agent", "not run"),
            ))
            for concurrency in (1, 8):
                say(f"Python drain, SQLite, 2000 events, concurrency {concurrency}")
                rate = await drain(server, publisher, directory, f"py_drain_{concurrency}", 2000, concurrency)
                label = f"SDK agent, no-op, concurrency {concurrency}"
                rows.append((f"drain 2,000 (SQLite), concurrency {concurrency}", f"{rate:.0f} events/s",
                             label + ": " + rust.get(label, "not run")))
        finally:
            server.stop()

        name = f"pybench_{uuid.uuid4().hex[:10]}"
        mysql(f"CREATE DATABASE {name}")
        try:
            server = Server(mysql_url(name))
            try:
                publisher = server.token("py_publisher", "publisher")
                for concurrency in (8,):
                    say(f"Python drain, MariaDB, {args.backlog} events, concurrency {concurrency}")
                    rate = await drain(server, publisher, directory, f"py_maria_{concurrency}", args.backlog, concurrency)
                    rows.append((f"drain {args.backlog:,} (MariaDB), concurrency {concurrency}", f"{rate:.0f} events/s",
                                 "(the Rust bench drains SQLite only; see the rows above)"))
            finally:
                server.stop()
        finally:
            mysql(f"DROP DATABASE IF EXISTS {name}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"\nPython Agent vs the Rust SDK, service and agents on this machine ({os.cpu_count()} cores, load {load:.1f})")
    print(f"{'measurement':<44} {'Python':<62} Rust SDK (inbox-bench agent, same run)")
    print("-" * 160)
    for label, python, rust_text in rows:
        print(f"{label:<44} {python:<62} {rust_text}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--publish-paced":
        publish_paced(*json.loads(sys.argv[2]))
    else:
        asyncio.run(main())
