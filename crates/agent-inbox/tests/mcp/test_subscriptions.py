"""The `inbox://head` resource and its subscriptions: `resources/subscribe` on a handshake-era
session, `subscriptions/listen` on a current one; a publish makes the server send
`notifications/resources/updated`."""

from __future__ import annotations

import json
import warnings

import anyio
import mcp_types as types
import pytest

from conftest import mcp_client

pytestmark = pytest.mark.anyio

HEAD = "inbox://head"
NOTIFICATION_SECONDS = 10


def token_args(server, agent_id: str) -> list[str]:
    return ["--server", server.base, "--token", server.agent_token(agent_id)]


async def read_head(client) -> dict:
    result = await client.read_resource(HEAD)
    return json.loads(result.contents[0].text)


async def test_a_resources_subscribe_subscriber_hears_of_a_publish(server, home, agent_id):
    updated = anyio.Event()
    seen: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            seen.append(str(message.params.uri))
            updated.set()

    async with mcp_client(home, token_args(server, agent_id), mode="legacy", message_handler=on_message) as client:
        listed = await client.list_resources()
        assert [str(r.uri) for r in listed.resources] == [HEAD]
        assert (await read_head(client))["head_seq"] == 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(HEAD)
        await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(), agent_id, {"n": 1}))
        with anyio.fail_after(NOTIFICATION_SECONDS):
            await updated.wait()
        assert seen[0] == HEAD
        assert (await read_head(client))["head_seq"] == 1


async def test_a_listen_subscriber_hears_of_each_publish(server, home, agent_id):
    publisher = server.publisher_token()
    async with mcp_client(home, token_args(server, agent_id)) as client:
        async with client.listen(resource_subscriptions=[HEAD]) as subscription:
            assert subscription.honored.resource_subscriptions == [HEAD]
            events = subscription.__aiter__()
            for n in (1, 2):
                await anyio.to_thread.run_sync(lambda: server.publish(publisher, agent_id, {"n": n}))
                with anyio.fail_after(NOTIFICATION_SECONDS):
                    event = await events.__anext__()
                assert str(event.uri) == HEAD, event
                with anyio.fail_after(NOTIFICATION_SECONDS):
                    while (await read_head(client))["head_seq"] < n:
                        await anyio.sleep(0.05)


async def test_an_unknown_resource_is_a_protocol_error(server, home, agent_id):
    from mcp.shared.exceptions import MCPError

    async with mcp_client(home, token_args(server, agent_id)) as client:
        with pytest.raises(MCPError):
            await client.read_resource("inbox://tail")


async def test_following_the_head_never_takes_the_agents_session(server, home, agent_id):
    """Under the single-active-session policy a stream without the agent's session is refused;
    the subscription then follows the head by long polls, and the agent's own session (its
    `listen`) stays the active one."""
    tenant = "single"
    admin = server.issue("operator", kind="admin", tenant=tenant)[0]
    status, body = server.http("POST", "/v1/admin/tenant-policy", admin, {"single_active_session": True})
    assert status == 200, body
    agent_token = server.agent_token(agent_id, tenant=tenant)
    status, session = server.http("POST", "/v1/agent-sessions/subscribe", agent_token, {"device_id": "laptop"})
    assert status == 200, session

    updated = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.set()

    args = ["--server", server.base, "--token", agent_token]
    async with mcp_client(home, args, mode="legacy", message_handler=on_message) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(HEAD)
        await anyio.to_thread.run_sync(lambda: server.publish(server.publisher_token(tenant), agent_id, {"n": 1}))
        with anyio.fail_after(NOTIFICATION_SECONDS):
            await updated.wait()
    path = f"/v1/agent-sessions/{session['session_id']}/heartbeat"
    status, beat = server.http("POST", path, agent_token, {"last_seen_seq": 0})
    assert status == 200, f"the agent's session is still the active one: {beat}"
