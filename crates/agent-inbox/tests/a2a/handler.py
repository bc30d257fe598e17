"""The agent's handler for `agent-inbox listen --batch 1 --exec`: answers each A2A message with
an artifact, reporting the task's outcome on its outcome line (`"a2a": {...}`). It notes each
start and each completion in $A2A_MARKS, so the test can tell a run killed mid-task from one
that finished, and that nothing was done twice. With A2A_HANG=1 it never finishes (the test
kills it)."""

import json
import os
import sys
import time

marks = os.environ["A2A_MARKS"]


def note(name: str, line: str) -> None:
    with open(os.path.join(marks, name), "a", encoding="utf-8") as log:
        log.write(line + "\n")


for line in sys.stdin:
    if not line.strip():
        continue
    event = json.loads(line)
    task = event["payload"]
    text = task["message"]["parts"][0]["text"]
    attempt = event["delivery_attempts"]
    note("started.log", f"{task['task_id']} {attempt} {os.getpid()}")
    if os.environ.get("A2A_HANG") == "1":
        time.sleep(600)
    report = {
        "message": {"role": "ROLE_AGENT", "parts": [{"text": f"done on attempt {attempt}"}]},
        "artifacts": [{"name": "answer", "parts": [{"text": f"echo: {text}"}]}],
    }
    note("completed.log", task["task_id"])
    print(json.dumps({"event_id": event["event_id"], "outcome": "ack", "a2a": report}), flush=True)
