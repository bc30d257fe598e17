"""Latency of `agent-inbox mcp` as a model's client sees it, against a real server on SQLite:
publish (HTTP) to `inbox_wait` returning, one claim + ack cycle through the tools, and an
`inbox_poll` tool call next to the same poll made directly over HTTP.

    target/venvs/mcp/bin/python crates/agent-inbox/tests/mcp/bench_mcp.py [rounds]

Uses AGENT_INBOX_BIN like the tests. Prints one line per measure: median and 95th percentile.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))
from conftest import BIN, mcp_client, start_server  # noqa: E402


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"{name:<40} median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   (n={len(ms)})"


async def main(rounds: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="agent-inbox-mcp-bench-"))
    server = start_server(directory)
    home = directory / "home"
    home.mkdir()
    try:
        publisher = server.publisher_token()
        agent = server.agent_token("bench_agent")
        wake, cycle, tool_poll, http_poll = [], [], [], []
        async with mcp_client(home, ["--server", server.base, "--token", agent]) as client:
            await client.list_tools()
            for n in range(rounds):
                published: list[float] = []

                async def publish_later() -> None:
                    await anyio.sleep(0.2)
                    await anyio.to_thread.run_sync(lambda: server.publish(publisher, "bench_agent", {"n": n}))
                    published.append(time.perf_counter())

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(publish_later)
                    await client.call_tool("inbox_wait", {"timeout_seconds": 10})
                wake.append(time.perf_counter() - published[0])

                started = time.perf_counter()
                claim = (await client.call_tool("inbox_claim", {})).structured_content["claims"][0]
                await client.call_tool("inbox_ack", {"event_id": claim["event_id"], "lease_token": claim["lease_token"]})
                cycle.append(time.perf_counter() - started)

                started = time.perf_counter()
                await client.call_tool("inbox_poll", {"after_seq": n, "limit": 10})
                tool_poll.append(time.perf_counter() - started)
                started = time.perf_counter()
                server.http("POST", "/v1/inbox/poll-after-cursor", agent, {"after_seq": n, "limit": 10})
                http_poll.append(time.perf_counter() - started)
        print(f"binary: {BIN}")
        print(summary("publish -> inbox_wait returns", wake))
        print(summary("inbox_claim + inbox_ack (two tool calls)", cycle))
        print(summary("inbox_poll tool call", tool_poll))
        print(summary("the same poll over HTTP directly", http_poll))
    finally:
        server.process.terminate()
        server.process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 50)
