"""Credentials as `listen` uses them: a login profile whose refresh token rotates, a fixed
token that is not refreshed, and signed calls when the profile has a key."""

from __future__ import annotations

import subprocess

import pytest

from conftest import BIN, clean_env, login, mcp_client, structured, wait_until

pytestmark = pytest.mark.anyio


async def test_a_refused_access_token_is_replaced_through_the_refresh_token(server, home, agent_id):
    """The service stops accepting the access tokens in use (their signing key retires): the
    profile's session refreshes and carries on; a fixed --token is not refreshed, and its tool
    calls say why. (Expiry takes the same path, the service's 401, but its leeway makes a test of
    it take half a minute.)"""
    token_file = login(server, home, agent_id)
    server.publish(server.publisher_token(), agent_id, {"n": 1})
    fixed = server.agent_token(agent_id)
    async with mcp_client(home, []) as client, mcp_client(home, ["--server", server.base, "--token", fixed]) as bare:
        before = token_file.read_text().strip()
        first = structured(await client.call_tool("inbox_poll", {}))
        assert len(first["events"]) == 1
        assert structured(await bare.call_tool("inbox_poll", {}))["events"] == first["events"]

        out = subprocess.run(
            [BIN, "keys", "rotate", "--overlap", "1s", "--database-url", server.database_url],
            capture_output=True,
            text=True,
            timeout=30,
            env=clean_env(server.home),
        )
        assert out.returncode == 0, out.stderr
        wait_until(
            lambda: server.http("GET", "/v1/inbox/head", fixed)[0] == 401,
            10,
            "tokens of the retired key to be refused",
        )
        second = await client.call_tool("inbox_poll", {})
        assert not second.is_error, second
        assert structured(second)["events"] == first["events"]
        assert token_file.read_text().strip() != before, "the refresh rotated the stored token"

        refused = await bare.call_tool("inbox_poll", {})
        assert refused.is_error
        body = structured(refused)
        assert body["status"] == 401 and body["code"] == "invalid_token", body


async def test_the_profile_key_signs_claims_where_the_tenant_requires_it(server, home, agent_id):
    tenant = "signed"
    admin = server.issue("operator", kind="admin", tenant=tenant)[0]
    status, body = server.http("POST", "/v1/admin/tenant-policy", admin, {"signatures_required": True})
    assert status == 200, body
    event_id = server.publish(server.publisher_token(tenant), agent_id, {"n": 1})

    # A bare token signs nothing: the service refuses its claim, and the tool says why.
    async with mcp_client(home, ["--server", server.base, "--token", server.agent_token(agent_id, tenant=tenant)]) as c:
        refused = await c.call_tool("inbox_claim", {})
        assert refused.is_error and structured(refused)["code"] == "signature_required", refused

    login(server, home, agent_id, tenant, "--signing-key", "auto")
    async with mcp_client(home, []) as client:
        [claim] = structured(await client.call_tool("inbox_claim", {}))["claims"]
        assert claim["event_id"] == event_id
        acked = await client.call_tool("inbox_ack", {"event_id": event_id, "lease_token": claim["lease_token"]})
        assert not acked.is_error, acked
