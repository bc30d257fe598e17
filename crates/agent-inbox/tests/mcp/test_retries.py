"""503 and 429 answers are retried with backoff that honours Retry-After, within a budget; a
wait longer than the budget comes back at once as a tool error that says how long to wait."""

from __future__ import annotations

import time

import pytest

from conftest import mcp_client, structured

pytestmark = pytest.mark.anyio


async def test_a_busy_service_is_retried_after_its_retry_after(server, home, agent_id, proxy):
    event_id = server.publish(server.publisher_token(), agent_id, {"n": 1})
    async with mcp_client(home, ["--server", proxy.base, "--token", server.agent_token(agent_id)]) as client:
        proxy.refuse("/v1/inbox/claim", 503, retry_after=1, count=2)
        started = time.monotonic()
        result = await client.call_tool("inbox_claim", {})
        assert not result.is_error, result
        assert structured(result)["claims"][0]["event_id"] == event_id
        arrivals = proxy.arrivals["/v1/inbox/claim"]
        assert len(arrivals) == 3, "two refusals, then the claim that went through"
        gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
        assert all(gap >= 0.95 for gap in gaps), f"each retry waited for Retry-After: {gaps}"
        assert time.monotonic() - started < 10

        lease = structured(result)["claims"][0]["lease_token"]
        proxy.refuse("/v1/inbox/acknowledge", 429, retry_after=1, count=1)
        acked = await client.call_tool("inbox_ack", {"event_id": event_id, "lease_token": lease})
        assert not acked.is_error, acked
        assert len(proxy.arrivals["/v1/inbox/acknowledge"]) == 2


async def test_a_retry_after_beyond_the_budget_is_a_tool_error_at_once(server, home, agent_id, proxy):
    async with mcp_client(home, ["--server", proxy.base, "--token", server.agent_token(agent_id)]) as client:
        proxy.refuse("/v1/inbox/poll-after-cursor", 429, retry_after=600, count=5)
        started = time.monotonic()
        result = await client.call_tool("inbox_poll", {})
        assert time.monotonic() - started < 3
        assert result.is_error
        body = structured(result)
        assert body["code"] == "rate_limited" and body["status"] == 429
        assert body["retry_after_seconds"] == 600
        assert len(proxy.arrivals["/v1/inbox/poll-after-cursor"]) == 1
