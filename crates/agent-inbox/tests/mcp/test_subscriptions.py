"""The `inbox://head` resource (the head and the waiting work) and its subscriptions:
`resources/subscribe` on a handshake-era session, `subscriptions/listen` on a current one; a
publish, a requeue and a lease running out make the server send
`notifications/resources/updated`, a publish within 100 ms."""

from __future__ import annotations

import json
import statistics
import time
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


LATENCY_SAMPLES = 10
LATENCY_MEDIAN_MAX = 0.100
LATENCY_MAX = 1.0


def latency_report(what: str, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    median = statistics.median(ordered)
    return (
        f"\n{what}: median {median * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms over {len(ordered)}"
        f" publishes ({', '.join(f'{s * 1000:.0f}' for s in latencies)} ms)"
    )


def check_latencies(what: str, latencies: list[float], capsys) -> None:
    """The rule of the issue's 'within 100 ms': the median of the samples under 100 ms and none over
    1 s, generous enough for a loaded 2-core CI machine. Each sample runs from just before the
    publish is sent to the notification's arrival, so it includes the publish's own round trip."""
    with capsys.disabled():  # the figures show in scripts/test-mcp.sh's output
        print(latency_report(what, latencies))
    assert statistics.median(latencies) < LATENCY_MEDIAN_MAX, latency_report(what, latencies)
    assert max(latencies) < LATENCY_MAX, latency_report(what, latencies)


def timed_publish(server, publisher: str, agent_id: str, payload: dict) -> float:
    """Publishes from a worker thread; returns the monotonic time just before the request went out."""
    started = time.monotonic()
    server.publish(publisher, agent_id, payload)
    return started


async def test_a_listen_subscriber_hears_of_a_publish_within_100_ms(server, home, agent_id, capsys):
    publisher = server.publisher_token()
    async with mcp_client(home, token_args(server, agent_id)) as client:
        async with client.listen(resource_subscriptions=[HEAD]) as subscription:
            events = subscription.__aiter__()
            with anyio.fail_after(NOTIFICATION_SECONDS):
                await events.__anext__()  # the "look again" every stream starts with
            latencies = []
            for n in range(LATENCY_SAMPLES + 1):
                started = await anyio.to_thread.run_sync(timed_publish, server, publisher, agent_id, {"n": n})
                with anyio.fail_after(NOTIFICATION_SECONDS):
                    event = await events.__anext__()
                arrived = time.monotonic()
                assert str(event.uri) == HEAD
                if n > 0:  # the first publish warms the server's stream up
                    latencies.append(arrived - started)
    check_latencies("notifications/resources/updated over subscriptions/listen", latencies, capsys)


async def test_the_head_resource_counts_the_waiting_work(server, home, agent_id):
    publisher = server.publisher_token()
    for n in (1, 2):
        server.publish(publisher, agent_id, {"n": n})
    async with mcp_client(home, token_args(server, agent_id)) as client:
        head = await read_head(client)
        assert (head["head_seq"], head["claimable"], head["claimable_count_capped"]) == (2, 2, False), head
        assert "next_claimable_at_utc" not in head
        await client.call_tool("inbox_claim", {"limit": 1, "lease_seconds": 60})
        head = await read_head(client)
        assert head["claimable"] == 1, head
        assert head["next_claimable_at_utc"], "the claimed event's lease end is when it may come back"


async def test_a_lease_running_out_and_a_requeue_are_changes_too(server, home, agent_id):
    """Neither moves the head: a lease that runs out sends no hint at all, and a requeue only a
    nudge. A subscriber hears of both, and nothing of a claim."""
    token = server.agent_token(agent_id)
    server.publish(server.publisher_token(), agent_id, {"n": 1})
    async with mcp_client(home, ["--server", server.base, "--token", token]) as client:
        async with client.listen(resource_subscriptions=[HEAD]) as subscription:
            events = subscription.__aiter__()
            with anyio.fail_after(NOTIFICATION_SECONDS):
                await events.__anext__()  # the "look again" every stream starts with

            async def next_change(what: str) -> float:
                started = time.monotonic()
                with anyio.fail_after(NOTIFICATION_SECONDS):
                    event = await events.__anext__()
                assert str(event.uri) == HEAD, what
                return time.monotonic() - started

            status, claimed = server.http("POST", "/v1/inbox/claim", token, {"limit": 1, "lease_seconds": 1})
            assert status == 200 and len(claimed["claims"]) == 1, claimed
            waited = await next_change("the lease ran out")
            assert waited < 5, f"a lease of 1 s came back after {waited:.1f} s"
            assert (await read_head(client))["claimable"] == 1

            status, claimed = server.http("POST", "/v1/inbox/claim", token, {"limit": 1, "lease_seconds": 60})
            claim = claimed["claims"][0]
            status, acked = server.http("POST", "/v1/inbox/acknowledge", token, {"acks": [
                {"event_id": claim["event_id"], "lease_token": claim["lease_token"], "result": "failed",
                 "reason": "parked for the test"}]})
            assert status == 200, acked
            assert (await read_head(client))["claimable"] == 0
            admin = server.issue("operator", kind="admin")[0]
            status, requeued = server.http("POST", "/v1/admin/parked/requeue", admin,
                                           {"recipient_id": agent_id, "event_ids": [claim["event_id"]]})
            assert status == 200, requeued
            await next_change("the requeue")
            assert (await read_head(client))["claimable"] == 1
