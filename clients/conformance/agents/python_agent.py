"""The Python runner's conformance agent: the SDK's `Agent` with the suite's handler (the event's
payload says what each attempt does) and event log. The protocol is in ../README.md."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent_inbox import (
    Agent,
    AgentConfig,
    AsyncClient,
    Event,
    Fatal,
    LocalState,
    QuarantineError,
    ResyncResponse,
    Retry,
    SessionSuperseded,
    TransportConfig,
    TransportPolicy,
)

LOG = Path(os.environ["CONFORMANCE_LOG"])
TRANSPORTS = ("sse", "long-poll", "poll")


def log(what: str, **fields: Any) -> None:
    """One line, one write: lines from several processes never interleave."""
    line = json.dumps({"t": int(time.time() * 1000), "pid": os.getpid(), "what": what, **fields})
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def attempts_so_far(event_id: str) -> int:
    try:
        lines = LOG.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if line and (entry := json.loads(line))["what"] == "start"
               and entry["event"] == event_id)


def handle(event: Event) -> None:
    script = event.payload.get("conformance") if isinstance(event.payload, dict) else None
    attempt = attempts_so_far(event.event_id)
    action: dict[str, Any] = script[min(attempt, len(script) - 1)] if script else {}
    log("start", event=event.event_id, attempt=attempt)
    do = action.get("do", "complete")
    if do == "crash":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    if action.get("sleep"):
        time.sleep(float(action["sleep"]))
    log("end", event=event.event_id, outcome=do)
    if do == "retry":
        raise Retry(after=float(action["after"]))
    if do == "fatal":
        raise Fatal(action["reason"])
    if do == "quarantine":
        raise QuarantineError(action["reason"], action["class"])


async def resync(snapshot: ResyncResponse) -> None:
    log("resync", open=[e.event_id for e in snapshot.open_events], resume_after_seq=snapshot.resume_after_seq)


def config() -> AgentConfig:
    env = os.environ
    best = env.get("CONFORMANCE_TRANSPORT", "sse")
    policy = TransportPolicy()
    if "CONFORMANCE_UPGRADE_AFTER" in env:
        policy = TransportPolicy(upgrade_after=float(env["CONFORMANCE_UPGRADE_AFTER"]))
    made = AgentConfig(
        concurrency=int(env.get("CONFORMANCE_CONCURRENCY", "1")),
        transport=TransportConfig(allowed=TRANSPORTS[TRANSPORTS.index(best):], policy=policy),  # type: ignore[arg-type]
    )
    if "CONFORMANCE_SHUTDOWN_GRACE" in env:
        made.shutdown_grace = float(env["CONFORMANCE_SHUTDOWN_GRACE"])
    return made


def main() -> int:
    state = Path(os.environ["CONFORMANCE_STATE"])
    state.mkdir(parents=True, exist_ok=True)
    client = AsyncClient(os.environ["CONFORMANCE_BASE"], os.environ["CONFORMANCE_TOKEN"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log("ready")
    try:
        Agent(client, LocalState(state / "state.db"), config()).run_sync(handle, resync=resync, stop=stop)
    except SessionSuperseded as err:
        print(err, file=sys.stderr)
        return 3
    except Exception as err:  # noqa: BLE001 - the driver reads the reason on stderr
        print(f"the agent stopped: {err!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
