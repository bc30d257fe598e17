"""`agent-inbox mcp --claude-channel` against the Claude Code channels contract, with a
hand-written client standing in for Claude Code (no model runs here): the server declares the
experimental `claude/channel` capability, offers only handshake protocol versions (Claude Code
takes channel notifications on those alone), and sends `notifications/claude/channel` with
`{content, meta}` (meta keys identifiers, values strings) within 100 ms of a publish; never
for another agent's or tenant's events, and never with payload text."""

from __future__ import annotations

import re
import time

import anyio
import pytest

from conftest import TENANT, mcp_client, raw_client
from test_subscriptions import LATENCY_SAMPLES, check_latencies, timed_publish

pytestmark = pytest.mark.anyio

CHANNEL = "notifications/claude/channel"
# What Claude Code 2.1.332 keeps of `meta` (others it drops): keys matching this.
META_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The channel's own throttle (channel.rs INTERVAL): one notification per second at most.
INTERVAL_SECONDS = 1.0
PAYLOAD_MARKER = "IGNORE-PREVIOUS-INSTRUCTIONS-payload-text"
QUIET_SECONDS = 1.5


def channel_args(server, agent_id: str, tenant: str = TENANT) -> list[str]:
    return ["--server", server.base, "--token", server.agent_token(agent_id, tenant=tenant), "--claude-channel"]


async def test_the_channel_declares_itself_and_speaks_the_handshake(server, home, agent_id):
    async with raw_client(home, channel_args(server, agent_id)) as client:
        discovered = await client.request("server/discover", {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "claude-code-stand-in", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }})
        # Either answer sends a client back to the handshake: a discover result or an
        # unsupported-version error, each naming handshake versions only.
        if "result" in discovered:
            versions = discovered["result"]["supportedVersions"]
        else:
            assert discovered["error"]["code"] == -32022, discovered
            versions = discovered["error"]["data"]["supported"]
        assert "2026-07-28" not in versions and "2025-11-25" in versions, discovered
        info = await client.initialize()
        assert info["protocolVersion"] == "2025-11-25"
        assert info["capabilities"]["experimental"]["claude/channel"] == {}, info["capabilities"]
        assert "<channel source=" in info["instructions"], info["instructions"]
    # The official client, asked to choose, falls back to the handshake too.
    async with mcp_client(home, channel_args(server, agent_id)) as client:
        assert client.protocol_version == "2025-11-25"


async def test_a_channel_client_is_told_of_a_publish_within_100_ms(server, home, agent_id, capsys):
    publisher = server.publisher_token()
    async with raw_client(home, channel_args(server, agent_id)) as client:
        await client.initialize()
        # The channel's first look (for work already waiting) comes before the first publish,
        # or that publish would be told as waiting, and once more as arrived a second later.
        await anyio.sleep(0.3)
        latencies = []
        for n in range(LATENCY_SAMPLES + 1):
            seen = len(client.notifications)
            payload = {"n": n, "text": PAYLOAD_MARKER}
            started = await anyio.to_thread.run_sync(timed_publish, server, publisher, agent_id, payload)
            arrived, told = (await client.until(lambda: client.received(CHANNEL, seen), "the channel event"))[0]
            if n > 0:  # the first publish warms the server's stream up
                latencies.append(arrived - started)
            params = told["params"]
            assert set(params) == {"content", "meta"}, params
            assert PAYLOAD_MARKER not in str(params), "never payload text"
            assert f"{n + 1} event" in params["content"] and "task.assigned" in params["content"], params
            assert "inbox_claim" in params["content"]
            meta = params["meta"]
            assert all(META_KEY.match(key) and isinstance(value, str) for key, value in meta.items()), meta
            assert (meta["agent"], meta["tenant"], meta["claimable"]) == (agent_id, TENANT, str(n + 1)), meta
            assert meta["event"] == "work_arrived"
            await anyio.sleep(INTERVAL_SECONDS + 0.05 - (time.monotonic() - arrived))
    check_latencies("notifications/claude/channel", latencies, capsys)


async def test_nothing_is_told_of_another_agents_or_tenants_events(server, home, agent_id):
    async with raw_client(home, channel_args(server, agent_id)) as client:
        await client.initialize()
        await anyio.sleep(0.3)  # the channel follows its inbox
        server.publish(server.publisher_token(), agent_id + "_other", {"n": 1})
        server.publish(server.publisher_token("other_tenant"), agent_id, {"n": 2})
        await anyio.sleep(QUIET_SECONDS)
        assert client.received(CHANNEL) == [], "another agent's and another tenant's events are not told"
        server.publish(server.publisher_token(), agent_id, {"n": 3})
        _, told = (await client.until(lambda: client.received(CHANNEL), "the agent's own event"))[0]
        assert told["params"]["meta"]["claimable"] == "1"


async def test_a_lease_running_out_wakes_the_session_again(server, home, agent_id):
    token = server.agent_token(agent_id)
    async with raw_client(home, ["--server", server.base, "--token", token, "--claude-channel"]) as client:
        await client.initialize()
        await anyio.sleep(0.3)
        server.publish(server.publisher_token(), agent_id, {"n": 1})
        await client.until(lambda: client.received(CHANNEL), "the publish")
        seen = len(client.notifications)
        status, claimed = server.http("POST", "/v1/inbox/claim", token, {"limit": 1, "lease_seconds": 1})
        assert status == 200 and claimed["claims"], claimed
        _, told = (await client.until(lambda: client.received(CHANNEL, seen), "the lease running out", 10))[0]
        assert told["params"]["meta"]["event"] == "work_available", told
        assert "became claimable again" in told["params"]["content"]


async def test_work_waiting_as_the_session_begins_is_told_at_once(server, home, agent_id):
    server.publish(server.publisher_token(), agent_id, {"n": 1})
    server.publish(server.publisher_token(), agent_id, {"n": 2}, event_type="review.requested")
    async with raw_client(home, channel_args(server, agent_id)) as client:
        await client.initialize()
        _, told = (await client.until(lambda: client.received(CHANNEL), "the waiting work"))[0]
        meta = told["params"]["meta"]
        assert (meta["event"], meta["claimable"], meta["event_types"]) == (
            "work_waiting", "2", "review.requested,task.assigned"), meta
