"""`inbox_wait`'s task status pushed (the tasks extension's `notifications/tasks`) instead of
polled: on protocol 2026-07-28 to a `subscriptions/listen` stream that names the task in
`notifications.taskIds`; on a 2025-11-25 session, which has no listen, to the client that made
the task. The official Python client has no `taskIds` argument to `listen()`, so the stream is
opened with a raw request through its session, and the pushes are read with a notification
binding of a client extension."""

from __future__ import annotations

import time
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.extension import ClientExtension, NotificationBinding, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict

from conftest import mcp_client, raw_client
from test_current import TASKS, CreatedTask, TaskAnswer, start_wait, token_args
from test_subscriptions import LATENCY_MAX, timed_publish

pytestmark = pytest.mark.anyio

PUSH_SECONDS = 10


class RawRequest(types.Request[dict[str, Any], str]):
    pass


class TaskState(BaseModel):
    model_config = ConfigDict(extra="allow")
    taskId: str
    status: str


class Pushes:
    """What a client was pushed: each `notifications/tasks` with when it arrived, and the
    `notifications/subscriptions/acknowledged` of its raw listen streams."""

    def __init__(self) -> None:
        self.states: list[tuple[float, TaskState]] = []
        self.acknowledged: list[types.SubscriptionFilter] = []
        self.changed = anyio.Event()

    async def on_task(self, state: TaskState) -> None:
        self.states.append((time.monotonic(), state))
        self.changed.set()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.SubscriptionsAcknowledgedNotification):
            self.acknowledged.append(message.params.notifications)
            self.changed.set()

    async def until(self, condition, what: str) -> Any:
        with anyio.fail_after(PUSH_SECONDS):
            while not (found := condition()):
                self.changed = anyio.Event()
                await self.changed.wait()
        return found

    def state(self, task_id: str, status: str) -> tuple[float, TaskState] | None:
        return next(((at, s) for at, s in self.states if s.taskId == task_id and s.status == status), None)


class PushedTasks(ClientExtension):
    """The tasks extension with `inbox_wait`'s task claimed (2026-07-28) and its pushes read."""

    identifier = TASKS

    def __init__(self, pushes: Pushes) -> None:
        self.pushes = pushes

    def claims(self):
        async def unused(result, ctx):
            raise AssertionError("tests call with allow_claimed")

        return [ResultClaim(result_type="task", model=CreatedTask, resolve=unused)]

    def notifications(self):
        return [NotificationBinding(method="notifications/tasks", params_type=TaskState, handler=self.pushes.on_task)]


def push_client(server, home, agent_id: str, pushes: Pushes):
    return mcp_client(home, token_args(server, server.agent_token(agent_id)), mode="2026-07-28",
                      extensions=[PushedTasks(pushes)], message_handler=pushes.on_message)


async def listen_raw(client, task_group, notifications: dict) -> anyio.CancelScope:
    """Opens `subscriptions/listen` with a filter the SDK's listen() cannot say; cancelling the
    returned scope ends it."""
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            try:
                await client.session.send_request(
                    RawRequest(method="subscriptions/listen", params={"notifications": notifications}), TaskAnswer
                )
            except MCPError:
                pass

    task_group.start_soon(run)
    return scope


async def test_a_listen_stream_that_names_a_task_is_pushed_its_completion(server, home, agent_id, capsys):
    pushes = Pushes()
    publisher = server.publisher_token()
    latencies = []
    async with push_client(server, home, agent_id, pushes) as client:
        async with anyio.create_task_group() as group:
            for n in range(4):
                task_id = (await start_wait(client, timeout_seconds=20)).taskId
                stream = await listen_raw(client, group, {"taskIds": [task_id, "wait.not-a-task"]})
                honored = await pushes.until(lambda: len(pushes.acknowledged) > n and pushes.acknowledged[n], "ack")
                assert honored.model_extra["taskIds"] == [task_id], "its own task, not a made-up one"
                await pushes.until(lambda: pushes.state(task_id, "working"), "the state as the stream starts")
                started = await anyio.to_thread.run_sync(timed_publish, server, publisher, agent_id, {"n": n})
                arrived, done = await pushes.until(lambda: pushes.state(task_id, "completed"), "the completion")
                latencies.append(arrived - started)
                assert done.model_extra["result"]["structuredContent"]["work_waiting"] is True
                assert done.model_extra["_meta"]["io.modelcontextprotocol/subscriptionId"], "on its stream"
                claimed = await client.call_tool("inbox_claim", {"limit": 10})
                assert claimed.structured_content["claims"], claimed
                stream.cancel()
    with capsys.disabled():
        print(f"\nnotifications/tasks pushed {', '.join(f'{s * 1000:.0f}' for s in latencies)} ms after the publish")
    assert max(latencies) < LATENCY_MAX


async def test_a_task_of_another_agent_is_not_followed(server, home, agent_id):
    pushes = Pushes()
    async with push_client(server, home, agent_id, pushes) as client:
        foreign = (await start_wait(client, timeout_seconds=20)).taskId
    other = Pushes()
    async with push_client(server, home, agent_id + "_other", other) as client:
        async with anyio.create_task_group() as group:
            stream = await listen_raw(client, group, {"taskIds": [foreign]})
            honored = await other.until(lambda: other.acknowledged and other.acknowledged[0], "ack")
            assert not (honored.model_extra or {}).get("taskIds"), honored
            await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 1}))
            await anyio.sleep(1.0)
            assert other.states == [], "nothing of another agent's task"
            stream.cancel()


async def test_naming_tasks_without_the_extension_is_refused(server, home, agent_id):
    async with mcp_client(home, token_args(server, server.agent_token(agent_id)), mode="2026-07-28") as client:
        with pytest.raises(MCPError) as raised:
            with anyio.fail_after(PUSH_SECONDS):
                await client.session.send_request(
                    RawRequest(method="subscriptions/listen", params={"notifications": {"taskIds": ["wait.x"]}}),
                    TaskAnswer,
                )
        assert raised.value.code == -32021, raised.value
        required = raised.value.error.data["requiredCapabilities"]["extensions"]
        assert TASKS in required, raised.value.error.data


async def test_a_handshake_session_is_pushed_the_completion_of_its_task(server, home, agent_id, capsys):
    """2025-11-25 has no subscriptions/listen: a client that declared the extension in its
    initialize is pushed the final state of each task it made, on the session. The official
    client never declares a claim-bearing extension on a handshake wire, so a hand-written
    client stands in for one that does."""
    async with raw_client(home, token_args(server, server.agent_token(agent_id))) as client:
        info = await client.initialize({"extensions": {TASKS: {}}})
        assert info["protocolVersion"] == "2025-11-25" and TASKS in info["capabilities"]["extensions"], info
        created = await client.request("tools/call", {"name": "inbox_wait", "arguments": {"timeout_seconds": 20}})
        task = created["result"]
        assert (task["resultType"], task["status"]) == ("task", "working"), created
        started = await anyio.to_thread.run_sync(timed_publish, server, server.publisher_token(), agent_id, {"n": 1})
        arrived, pushed = (await client.until(lambda: client.received("notifications/tasks"), "the push"))[0]
        params = pushed["params"]
        assert (params["taskId"], params["status"]) == (task["taskId"], "completed"), pushed
        assert params["result"]["structuredContent"]["claimable"] == 1
        assert "_meta" not in params, "not on a subscription: the session has none"
        polled = await client.request("tasks/get", {"taskId": task["taskId"]})
        envelope = ("_meta", "resultType")
        assert {k: v for k, v in polled["result"].items() if k not in envelope} == {
            k: v for k, v in params.items() if k not in envelope}, "the push is what tasks/get answers"
    with capsys.disabled():
        print(f"\nnotifications/tasks on a 2025-11-25 session {(arrived - started) * 1000:.0f} ms after the publish")
    assert arrived - started < LATENCY_MAX
