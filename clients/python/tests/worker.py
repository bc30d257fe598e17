"""A worker process for the fault tests: an `Agent` whose handler records each event it
starts and finishes in files, so a test can kill it and count. Not an example to copy; see
examples/worker.py for that."""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from pathlib import Path

from agent_inbox import Agent, AgentConfig, AsyncClient, Event, LocalState, PollSchedule, SigningKey
from agent_inbox._agent import Progress


def append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--handler-seconds", type=float, default=0.0)
    parser.add_argument("--wait-for-go", action="store_true")
    parser.add_argument("--hmac-key-id")
    parser.add_argument("--hmac-secret-hex")
    args = parser.parse_args()
    directory = Path(args.dir)
    me = str(os.getpid())

    def handler(event: Event) -> None:
        append(directory / "started", f"{event.event_id} {me}")
        if args.wait_for_go:
            while not (directory / "go").exists():
                time.sleep(0.02)
        if args.handler_seconds:
            time.sleep(args.handler_seconds)
        append(directory / "handled", f"{event.event_id} {me}")

    def observe(progress: Progress) -> None:
        if progress.kind == "finished":
            append(directory / "outcomes", f"{progress.details['event'].event_id} {progress.details['outcome'].kind} {me}")
        elif progress.kind == "transport":
            append(directory / "transport", f"{progress.details['kind']} {progress.details['connected']} {me}")

    key = None
    if args.hmac_key_id:
        key = SigningKey.hmac_sha256(args.hmac_key_id, bytes.fromhex(args.hmac_secret_hex))
    client = AsyncClient(args.base, args.token, signing_key=key)
    config = AgentConfig(
        concurrency=args.concurrency,
        poll=PollSchedule(interval_min=0.1, interval_max=2.0),
        shutdown_grace=2.0,
        observer=observe,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    summary = Agent(client, LocalState(args.state), config).run_sync(handler, stop=stop)
    append(directory / "summary", f"{summary} {me}")


if __name__ == "__main__":
    main()
