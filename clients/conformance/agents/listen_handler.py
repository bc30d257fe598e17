#!/usr/bin/env python3
"""The handler `agent-inbox listen --exec` runs for the conformance suite (README.md, "The
conformance agent"): once per event, with the event JSON on stdin. It follows the script the
event's payload carries (`"conformance": [action, ...]`, one action per attempt, the last one
repeating), logs `start` and `end` lines to CONFORMANCE_LOG, and tells listen the outcome by its
exit code:

    0   complete
    75  retry      (listen releases the event for its --retry-after, CONFORMANCE_RETRY_AFTER:
                    the script's `after` is not listen's to choose)
    65  quarantine (the reason is written to stderr as given: listen keeps its last line; its
                    class is always `other`)
    1   fatal      (the same; listen dead-letters the event with "the command exited with 1:
                    LAST LINE")

A `crash` SIGKILLs listen (CONFORMANCE_AGENT_PID) and then this command's own process group
(listen runs each command in a group of its own) after logging `start`.

With --resync it is listen's --on-resync command instead: the resync snapshot JSON on stdin,
one `resync` line logged, exit 0.

Log lines carry the agent's pid (CONFORMANCE_AGENT_PID, which listen_agent.sh exports as the pid
listen runs under), not this short-lived process's. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

EXIT_COMPLETE = 0
EXIT_FATAL = 1
EXIT_QUARANTINE = 65
EXIT_RETRY = 75


def log_path() -> str:
    path = os.environ.get("CONFORMANCE_LOG")
    if not path:
        sys.stderr.write("listen_handler: CONFORMANCE_LOG is not set\n")
        sys.exit(EXIT_RETRY)
    return path


def agent_pid() -> int:
    try:
        return int(os.environ["CONFORMANCE_AGENT_PID"])
    except (KeyError, ValueError):
        return os.getpid()


def log(path: str, line: dict[str, Any]) -> None:
    """Appends one JSON line with one write (O_APPEND)."""
    record: dict[str, Any] = {"t": int(time.time() * 1000), "pid": agent_pid()}
    record.update(line)
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def starts(path: str, event_id: str | None) -> int:
    """How many `start` lines the log holds for the event: the attempt number."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    count = 0
    for text in lines:
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("what") == "start" and line.get("event") == event_id:
            count += 1
    return count


def action_for(payload: Any, attempt: int) -> dict[str, Any]:
    script = payload.get("conformance") if isinstance(payload, dict) else None
    if isinstance(script, list) and script:
        action = script[min(attempt, len(script) - 1)]
        if isinstance(action, dict):
            return action
    return {"do": "complete"}



def resync(path: str) -> int:
    snapshot = json.load(sys.stdin)
    open_ids = [event.get("event_id") for event in snapshot.get("open_events") or []]
    log(path, {"what": "resync", "open": open_ids, "resume_after_seq": snapshot.get("resume_after_seq")})
    return EXIT_COMPLETE


def handle(path: str) -> int:
    event = json.load(sys.stdin)
    event_id = event.get("event_id") or os.environ.get("AGENT_INBOX_EVENT_ID")
    attempt = starts(path, event_id)
    action = action_for(event.get("payload"), attempt)
    log(path, {"what": "start", "event": event_id, "attempt": attempt})
    verb = action.get("do", "complete")
    if verb == "crash":
        os.kill(agent_pid(), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    sleep = action.get("sleep")
    if isinstance(sleep, (int, float)) and sleep > 0:
        time.sleep(sleep)
    reason: str | None = None
    if verb == "retry":
        outcome, code = "retry", EXIT_RETRY
    elif verb == "fatal":
        outcome, code, reason = "fatal", EXIT_FATAL, str(action.get("reason", ""))
    elif verb == "quarantine":
        outcome, code, reason = "quarantine", EXIT_QUARANTINE, str(action.get("reason", ""))
    else:
        if verb != "complete":
            sys.stderr.write("listen_handler: unknown action %r; completing\n" % (verb,))
        outcome, code = "complete", EXIT_COMPLETE
    log(path, {"what": "end", "event": event_id, "outcome": outcome})
    if reason:
        sys.stderr.write(reason + "\n")
        sys.stderr.flush()
    return code


def main() -> int:
    path = log_path()
    if sys.argv[1:] == ["--resync"]:
        return resync(path)
    if sys.argv[1:]:
        sys.stderr.write("usage: listen_handler.py [--resync]\n")
        return 2
    return handle(path)


if __name__ == "__main__":
    sys.exit(main())
