"""The official A2A SDKs (Python `a2a-sdk`, JS `@a2a-js/sdk`) as foreign clients of an agent that
is away: the message is kept, the agent's runner starts later, is killed mid-task (SIGKILL during
the handler), its lease runs out, another run completes the task, and the client sees it
`completed` with the result through GetTask and SubscribeToTask, on SQLite and MariaDB, with
nothing lost or done twice. Beyond the specification, a subscription resumes after an event id
(Last-Event-ID), even once the task is over.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conftest import PythonPeer, wait_until


def kinds(events: list[dict]) -> list[str]:
    """Each event as `member:state` (`statusUpdate:TASK_STATE_WORKING`, `artifactUpdate:`)."""
    named = []
    for event in events:
        (member, body), = event.items()
        named.append(f"{member}:{body.get('status', {}).get('state', '')}")
    return named


def test_a_message_to_an_agent_that_is_away_is_completed_once_after_a_kill(server: Any, runners: Any, peer: Any) -> None:
    sent = peer.send("m-1", "six times seven")
    task_id = sent["id"]
    assert sent["status"]["state"] == "TASK_STATE_SUBMITTED", sent
    assert peer.send("m-1", "six times seven")["id"] == task_id, "the same messageId answers the same task"
    followed = peer.subscribe(task_id)
    wait_until(lambda: followed.events, 15, "the subscription's first event (the task as it stands)")

    # The agent comes back, takes the message and is killed while its handler runs.
    first = runners(hang=True)
    wait_until(lambda: (runners.marks / "started.log").exists(), 30, "the first run to start the handler")
    wait_until(lambda: peer.get(task_id)["status"]["state"] == "TASK_STATE_WORKING", 10, "the task to be working")
    first.kill()
    assert peer.get(task_id)["status"]["state"] == "TASK_STATE_WORKING", "a killed run changes nothing"

    # Another run takes it once the lease runs out, and finishes it.
    runners(hang=False)
    events = followed.wait(60)
    assert kinds(events)[0] == "task:TASK_STATE_SUBMITTED", kinds(events)
    assert kinds(events)[-1] == "statusUpdate:TASK_STATE_COMPLETED", kinds(events)
    assert "artifactUpdate:" in kinds(events), kinds(events)
    done = peer.get(task_id)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
    assert [a["parts"][0]["text"] for a in done["artifacts"]] == ["echo: six times seven"], done
    assert done["status"]["message"]["parts"][0]["text"] == "done on attempt 2", done

    # Nothing lost, nothing done twice: one event, two starts (one killed), one completion.
    started = (runners.marks / "started.log").read_text().split("\n")
    assert [line.split()[:2] for line in started if line] == [[task_id, "1"], [task_id, "2"]], started
    assert (runners.marks / "completed.log").read_text().split() == [task_id]
    assert len(server.inbox(runners.token)) == 1
    listed = peer.list()
    assert listed["totalSize"] == 1 and listed["tasks"][0]["id"] == task_id, listed

    # Beyond the spec: resuming after the first event replays every update since, in order.
    resumed = peer.subscribe(task_id, after=1).wait(30)
    assert kinds(resumed)[0] == "task:TASK_STATE_COMPLETED", kinds(resumed)
    assert kinds(resumed)[1:] == kinds(events)[1:], (kinds(resumed), kinds(events))


def test_cancel_and_push_notifications(server: Any, runners: Any) -> None:
    """With the Python SDK: a push config gets the task's updates, signed and authenticated; a
    task canceled before any agent took it is never run."""
    received: list[tuple[dict, dict]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append((dict(self.headers), json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        peer = PythonPeer(server, server.issue("peer_app", kind="publisher", scopes="a2a.send"))
        task_id = peer.send("m-push", "tell me when done")["id"]
        from a2a.types import AuthenticationInfo, TaskPushNotificationConfig

        config = TaskPushNotificationConfig(
            task_id=task_id,
            url=f"http://127.0.0.1:{hook.server_port}/a2a",
            token="tok-1",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="hook-secret"),
        )
        created = peer._run(lambda client: _dict(client.create_task_push_notification_config(config)))
        assert created["token"] == "tok-1" and "credentials" not in created.get("authentication", {}), created

        canceled_id = peer.send("m-cancel", "never mind")["id"]
        assert peer.cancel(canceled_id)["status"]["state"] == "TASK_STATE_CANCELED"
        runners(hang=False)
        wait_until(lambda: peer.get(task_id)["status"]["state"] == "TASK_STATE_COMPLETED", 30, "the task to complete")
        wait_until(
            lambda: any(body.get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED" for _, body in received),
            30,
            "the completed task's push notification",
        )
        headers, _ = received[-1]
        lowered = {k.lower(): v for k, v in headers.items()}
        assert lowered["authorization"] == "Bearer hook-secret" and lowered["x-a2a-notification-token"] == "tok-1"
        assert "signature" in lowered and lowered["content-type"] == "application/a2a+json", lowered
        assert [k.split(":")[0] for k in kinds([b for _, b in received])] == ["statusUpdate", "artifactUpdate", "statusUpdate"]
        assert (runners.marks / "completed.log").read_text().split() == [task_id], "the canceled task never ran"
        assert peer.get(canceled_id)["status"]["state"] == "TASK_STATE_CANCELED"
    finally:
        hook.shutdown()


async def _dict(answer: Any) -> dict:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(await answer)

