"""The current protocol: both protocol versions negotiate, every tool's structured result fits
its declared outputSchema, `inbox_wait` as a task (the tasks extension), and a hand-off through
`inbox_ack`'s follow_ups."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

import anyio
import jsonschema
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from conftest import mcp_client, mcp_parameters, structured

pytestmark = pytest.mark.anyio

TASKS = "io.modelcontextprotocol/tasks"
EVERY_SCOPE = (
    "inbox.poll inbox.claim inbox.ack inbox.release inbox.heartbeat stream.subscribe events.publish events.handoff"
)
TASK_SECONDS = 10


def token_args(server, token: str) -> list[str]:
    return ["--server", server.base, "--token", token]


class CreatedTask(types.Result):
    """`tools/call` answered with a task (`resultType: "task"`), as SEP-2663 has it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = "task"
    taskId: str
    status: str
    pollIntervalMs: int | None = None
    ttlMs: int | None = None


class TaskRequest(types.Request[dict[str, Any], str]):
    name_param = "taskId"


class TaskAnswer(types.Result):
    model_config = ConfigDict(extra="allow")


class WaitTasks(ClientExtension):
    """The client side of the tasks extension, just enough to drive `inbox_wait`'s task by hand."""

    identifier = TASKS

    def claims(self):
        async def unused(result, ctx):  # the tests drive tasks/get themselves
            raise AssertionError("tests call with allow_claimed")

        return [ResultClaim(result_type="task", model=CreatedTask, resolve=unused)]


async def task_call(client: Client, method: str, task_id: str) -> dict:
    answer = await client.session.send_request(
        TaskRequest(method=method, params={"taskId": task_id}), TaskAnswer
    )
    return answer.model_dump(by_alias=True, exclude_none=True)


async def start_wait(client: Client, **arguments: Any) -> CreatedTask:
    created = await client.session.call_tool("inbox_wait", arguments, allow_claimed=True)
    assert isinstance(created, CreatedTask), created
    assert created.status == "working"
    return created


async def get_until_done(client: Client, task_id: str, seconds: float) -> dict:
    with anyio.fail_after(seconds):
        while True:
            state = await task_call(client, "tasks/get", task_id)
            if state["status"] != "working":
                return state
            await anyio.sleep(0.05)


@pytest.mark.parametrize("mode,version", [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28"), ("auto", "2026-07-28")])
async def test_both_protocol_versions_negotiate(server, home, agent_id, mode, version):
    async with mcp_client(home, token_args(server, server.agent_token(agent_id)), mode=mode) as client:
        assert client.protocol_version == version
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert "inbox_wait" in tools
        result = structured(await client.call_tool("inbox_wait", {"timeout_seconds": 0}))
        assert result["work_waiting"] is False


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_every_tool_answers_what_its_output_schema_says(server, home, agent_id, mode):
    token = server.agent_token(agent_id, scopes=EVERY_SCOPE)
    async with mcp_client(home, token_args(server, token), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {
            "inbox_wait", "inbox_poll", "inbox_claim", "inbox_ack", "inbox_release", "inbox_heartbeat", "inbox_publish"
        }
        for tool in tools.values():
            assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        checked: set[str] = set()

        async def call(name: str, arguments: dict) -> dict:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result
            body = structured(result)
            jsonschema.validate(body, tools[name].output_schema)
            checked.add(name)
            return body

        published = await call(
            "inbox_publish", {"recipients": [agent_id, agent_id + "_b"], "event_type": "task.assigned", "payload": {"n": 1}}
        )
        assert len(published["deliveries"]) == 2
        await call("inbox_publish", {"recipients": [agent_id], "event_type": "task.assigned", "payload": {"n": 2}})
        await call("inbox_wait", {"timeout_seconds": 0})
        await call("inbox_poll", {})
        claimed = (await call("inbox_claim", {"limit": 2}))["claims"]
        assert len(claimed) == 2
        first, second = claimed
        await call("inbox_heartbeat", {"event_id": first["event_id"], "lease_token": first["lease_token"]})
        await call("inbox_release", {"event_id": second["event_id"], "lease_token": second["lease_token"]})
        acked = await call(
            "inbox_ack",
            {
                "event_id": first["event_id"],
                "lease_token": first["lease_token"],
                "follow_ups": [{"recipients": [agent_id + "_c"], "event_type": "task.review", "payload": {"from": 1}}],
            },
        )
        assert acked["ack_state"] == "acked" and len(acked["follow_ups"]) == 1
        await call("inbox_claim", {"limit": 1})
        assert checked == set(tools)


async def test_a_hand_off_through_inbox_ack_publishes_once_and_not_on_a_stale_lease(server, home, agent_id):
    publisher = server.publisher_token()
    server.publish(publisher, agent_id, {"step": 1})
    async with mcp_client(home, token_args(server, server.agent_token(agent_id))) as client:
        claim = structured(await client.call_tool("inbox_claim", {"limit": 1, "lease_seconds": 60}))["claims"][0]
        hand_off = {
            "event_id": claim["event_id"],
            "lease_token": claim["lease_token"],
            "follow_ups": [{"recipients": [agent_id + "_next"], "event_type": "task.next", "payload": {"step": 2}}],
        }
        first = structured(await client.call_tool("inbox_ack", hand_off))
        again = structured(await client.call_tool("inbox_ack", hand_off))
        assert first["follow_ups"][0]["deliveries"][0]["deduplicated"] is False
        assert again["follow_ups"][0]["deliveries"][0]["deduplicated"] is True
        assert again["follow_ups"][0]["deliveries"][0]["event_id"] == first["follow_ups"][0]["deliveries"][0]["event_id"]
        stale = await client.call_tool("inbox_ack", {**hand_off, "lease_token": "not-the-lease-token-at-all-0000000"})
        assert stale.is_error
    status, page = server.http("POST", "/v1/inbox/poll-after-cursor", server.agent_token(agent_id + "_next"), {"after_seq": 0})
    assert status == 200 and [e["payload"] for e in page["events"]] == [{"step": 2}]


async def test_a_token_without_events_handoff_cannot_hand_off(server, home, agent_id):
    server.publish(server.publisher_token(), agent_id, {"step": 1})
    token = server.agent_token(agent_id, scopes="inbox.poll inbox.claim inbox.ack")
    async with mcp_client(home, token_args(server, token)) as client:
        assert "inbox_publish" not in {tool.name for tool in (await client.list_tools()).tools}
        claim = structured(await client.call_tool("inbox_claim", {"limit": 1}))["claims"][0]
        refused = await client.call_tool(
            "inbox_ack",
            {"event_id": claim["event_id"], "lease_token": claim["lease_token"],
             "follow_ups": [{"recipients": ["someone"], "event_type": "task.next"}]},
        )
        assert refused.is_error and refused.structured_content["code"] == "scope_missing"
    status, page = server.http("POST", "/v1/inbox/poll-after-cursor", server.agent_token("someone"), {"after_seq": 0})
    assert status == 200 and page["events"] == []


async def test_wait_as_a_task_completes_within_a_second_of_a_publish(server, home, agent_id, capsys):
    publisher = server.publisher_token()
    token = server.agent_token(agent_id)
    async with mcp_client(home, token_args(server, token), mode="2026-07-28", extensions=[WaitTasks()]) as client:
        started = time.monotonic()
        created = await start_wait(client, timeout_seconds=20)
        assert time.monotonic() - started < 5, "the call answers at once with a task"
        assert created.pollIntervalMs and created.pollIntervalMs <= 500
        assert (await task_call(client, "tasks/get", created.taskId))["status"] == "working"
        await anyio.to_thread.run_sync(lambda: server.publish(publisher, agent_id, {"n": 1}))
        published = time.monotonic()
        done = await get_until_done(client, created.taskId, TASK_SECONDS)
        latency = time.monotonic() - published
        with capsys.disabled():  # the figure shows in scripts/test-mcp.sh's output
            print(f"\ninbox_wait task completed {latency * 1000:.0f} ms after the publish")
        assert latency < 1.0, f"the task completed {latency:.2f} s after the publish"
        assert done["status"] == "completed"
        assert done["result"]["structuredContent"]["work_waiting"] is True
        assert json.loads(done["result"]["content"][0]["text"]) == done["result"]["structuredContent"]


async def test_wait_as_a_task_survives_a_restart_of_the_mcp_server(server, home, agent_id):
    token = server.agent_token(agent_id)
    args = token_args(server, token)
    async with mcp_client(home, args, mode="2026-07-28", extensions=[WaitTasks()]) as client:
        task_id = (await start_wait(client, timeout_seconds=25)).taskId
    # That server process is gone; a new one (same home, same agent) knows the task.
    await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 1}))
    async with mcp_client(home, args, mode="2026-07-28", extensions=[WaitTasks()]) as client:
        done = await get_until_done(client, task_id, TASK_SECONDS)
        assert done["status"] == "completed" and done["result"]["structuredContent"]["claimable"] == 1
    # Another agent's server does not.
    async with mcp_client(home, token_args(server, server.agent_token(agent_id + "_other")), mode="2026-07-28",
                          extensions=[WaitTasks()]) as client:
        with pytest.raises(Exception, match="no task"):
            await task_call(client, "tasks/get", task_id)


async def test_wait_as_a_task_cancels_and_ends_with_no_work(server, home, agent_id):
    async with mcp_client(home, token_args(server, server.agent_token(agent_id)), mode="2026-07-28",
                          extensions=[WaitTasks()]) as client:
        cancelled = await start_wait(client, timeout_seconds=20)
        await task_call(client, "tasks/cancel", cancelled.taskId)
        assert (await task_call(client, "tasks/get", cancelled.taskId))["status"] == "cancelled"
        short = await start_wait(client, timeout_seconds=1)
        done = await get_until_done(client, short.taskId, TASK_SECONDS)
        assert done["status"] == "completed" and done["result"]["structuredContent"]["work_waiting"] is False


async def test_a_client_without_tasks_keeps_the_bounded_wait(server, home, agent_id):
    async with mcp_client(home, token_args(server, server.agent_token(agent_id)), mode="2026-07-28") as client:
        result = await client.call_tool("inbox_wait", {"timeout_seconds": 1})
        assert structured(result)["work_waiting"] is False


def task_client(server, home, agent_id):
    return mcp_client(home, token_args(server, server.agent_token(agent_id)), mode="2026-07-28",
                      extensions=[WaitTasks()])


async def refused(client: Client, method: str, params: dict) -> MCPError:
    with pytest.raises(MCPError) as raised:
        await client.session.send_request(TaskRequest(method=method, params=params), TaskAnswer)
    return raised.value


async def test_a_completed_task_keeps_its_answer_after_a_claim_and_in_another_server(server, home, agent_id):
    async with task_client(server, home, agent_id) as client:
        task_id = (await start_wait(client, timeout_seconds=20)).taskId
        await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 1}))
        done = await get_until_done(client, task_id, TASK_SECONDS)
        assert done["status"] == "completed" and done["result"]["structuredContent"]["work_waiting"] is True
        claimed = structured(await client.call_tool("inbox_claim", {"limit": 1}))["claims"]
        assert len(claimed) == 1
        assert await task_call(client, "tasks/get", task_id) == done, "a claim does not reopen a finished task"
    # Another server process of the same home reads the outcome the first one kept.
    async with task_client(server, home, agent_id) as client:
        assert await task_call(client, "tasks/get", task_id) == done


async def test_a_task_that_ended_with_no_work_stays_so_after_a_publish(server, home, agent_id):
    async with task_client(server, home, agent_id) as client:
        task_id = (await start_wait(client, timeout_seconds=1)).taskId
        done = await get_until_done(client, task_id, TASK_SECONDS)
        assert done["status"] == "completed" and done["result"]["structuredContent"]["work_waiting"] is False
        await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 1}))
        assert await task_call(client, "tasks/get", task_id) == done


async def test_cancelling_a_finished_task_is_refused_and_changes_nothing(server, home, agent_id):
    async with task_client(server, home, agent_id) as client:
        task_id = (await start_wait(client, timeout_seconds=20)).taskId
        await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 1}))
        done = await get_until_done(client, task_id, TASK_SECONDS)
        error = await refused(client, "tasks/cancel", {"taskId": task_id})
        assert error.code == -32602 and "completed" in error.message, error.message
        assert await task_call(client, "tasks/get", task_id) == done

        assert len(structured(await client.call_tool("inbox_claim", {"limit": 1}))["claims"]) == 1
        cancelled_id = (await start_wait(client, timeout_seconds=20)).taskId  # nothing waits now
        await task_call(client, "tasks/cancel", cancelled_id)
        cancelled = await task_call(client, "tasks/get", cancelled_id)
        assert cancelled["status"] == "cancelled"
        again = await refused(client, "tasks/cancel", {"taskId": cancelled_id})
        assert again.code == -32602 and "cancelled" in again.message, again.message
        await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 2}))
        assert await task_call(client, "tasks/get", cancelled_id) == cancelled
    async with task_client(server, home, agent_id) as client:
        assert await task_call(client, "tasks/get", cancelled_id) == cancelled, "a cancellation outlives its server"


async def test_a_wrong_argument_type_for_a_task_names_the_argument(server, home, agent_id):
    async with task_client(server, home, agent_id) as client:
        result = await client.session.call_tool("inbox_wait", {"timeout_seconds": "soon"}, allow_claimed=True)
        assert getattr(result, "is_error", False), result
        body = structured(result)
        assert body["code"] == "invalid_argument" and "timeout_seconds" in body["detail"], body


async def test_tasks_update_is_acknowledged_for_a_task_of_this_agent_only(server, home, agent_id):
    """The extension's third method: inbox_wait never asks for input, so there is nothing to
    answer and the update is acknowledged (its responses ignored, as the extension says)."""
    async with task_client(server, home, agent_id) as client:
        task_id = (await start_wait(client, timeout_seconds=20)).taskId
        answered = await client.session.send_request(
            TaskRequest(method="tasks/update", params={"taskId": task_id, "inputResponses": {}}), TaskAnswer
        )
        assert answered.model_dump(exclude_none=True, by_alias=True).get("resultType", "complete") == "complete"
        error = await refused(client, "tasks/update", {"taskId": "wait.unknown", "inputResponses": {}})
        assert error.code == -32602, error
