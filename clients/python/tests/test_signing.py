"""Signed critical calls verified by the real service, for a tenant that requires them:
ed25519 keys registered by their public key and hmac-sha256 secrets the service issues; the
Agent claims, heartbeats and acknowledges with signatures; unsigned, replayed and tampered
requests are refused with their codes."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from agent_inbox import (
    AckEntry,
    AcknowledgeRequest,
    Agent,
    AgentConfig,
    AgentKeyRequest,
    AsyncClient,
    ClaimRequest,
    Client,
    Event,
    HeartbeatEntry,
    HeartbeatRequest,
    LocalState,
    PollSchedule,
    ProblemError,
    ReleaseRequest,
    SigningKey,
    TenantPolicyRequest,
)
from agent_inbox._signing import b64url_decode, sign_inbox_request
from conftest import Server, unique, wait_until


def signing_tenant(server: Server) -> str:
    tenant = unique("signed")
    with Client(server.base, server.token("operator", tenant=tenant, kind="admin")) as admin:
        policy = admin.set_tenant_policy(TenantPolicyRequest(signatures_required=True))
        assert policy.signatures_required and policy.tenant_id == tenant
        assert admin.tenant_policy().signatures_required
    return tenant


def test_ed25519_signed_calls_are_verified_and_unsigned_ones_refused(server: Server) -> None:
    tenant = signing_tenant(server)
    agent = unique("ed")
    token = server.token(agent, tenant=tenant)
    ids = server.publish(agent, 2, tenant=tenant)
    key = SigningKey.generate_ed25519()
    with Client(server.base, token) as unsigned:
        assert unsigned.signing_keys().signatures_required
        with pytest.raises(ProblemError) as refused:
            unsigned.claim(ClaimRequest(limit=1))
        assert refused.value.status == 401 and refused.value.code == "signature_required"
        registered = unsigned.register_signing_key(
            AgentKeyRequest(algorithm="ed25519", public_key=key.public_key, key_id=key.key_id)
        )
        assert registered.key_id == key.key_id and registered.public_key == key.public_key
    with Client(server.base, token, signing_key=key) as client:
        claimed = client.claim(ClaimRequest(limit=2))
        assert [c.event_id for c in claimed.claims] == ids
        first, second = claimed.claims
        beat = client.heartbeat(HeartbeatRequest(leases=[HeartbeatEntry(event_id=first.event_id, lease_token=first.lease_token, extend_by_seconds=30)]))
        assert beat.leases[0].error is None
        assert client.release(ReleaseRequest(event_id=second.event_id, lease_token=second.lease_token, retry_after_seconds=0)).ack_state
        acked = client.acknowledge(AcknowledgeRequest(acks=[AckEntry(event_id=first.event_id, lease_token=first.lease_token)]))
        assert acked.results[0].ack_state == "acked"
        assert [k.key_id for k in client.signing_keys().keys] == [key.key_id]

        # The same signature twice is a replay; a body that is not the signed one is refused.
        body = b'{"limit":1}'
        headers = sign_inbox_request(key, "POST", client.authority, "/v1/inbox/claim", body)
        headers.update({"authorization": f"Bearer {token}", "content-type": "application/json"})
        assert httpx.post(server.base + "/v1/inbox/claim", content=body, headers=headers).status_code == 200
        replay = httpx.post(server.base + "/v1/inbox/claim", content=body, headers=headers)
        assert replay.status_code == 401 and replay.json()["code"] == "signature_replayed"
        headers = sign_inbox_request(key, "POST", client.authority, "/v1/inbox/claim", body)
        headers.update({"authorization": f"Bearer {token}", "content-type": "application/json"})
        tampered = httpx.post(server.base + "/v1/inbox/claim", content=b'{"limit":9}', headers=headers)
        assert tampered.status_code == 401 and tampered.json()["code"] != "signature_required"
    other = SigningKey.generate_ed25519()
    with Client(server.base, token, signing_key=other) as stranger, pytest.raises(ProblemError) as unknown:
        stranger.claim(ClaimRequest(limit=1))
    assert unknown.value.status == 401 and unknown.value.code == "unknown_signing_key"


def test_hmac_sha256_secrets_sign_an_agents_whole_run(server: Server, tmp_path: Path) -> None:
    tenant = signing_tenant(server)
    agent = unique("hmac")
    token = server.token(agent, tenant=tenant)
    with Client(server.base, token) as unsigned:
        issued = unsigned.register_signing_key(AgentKeyRequest(algorithm="hmac-sha256"))
    assert issued.algorithm == "hmac-sha256" and issued.secret
    key = SigningKey.hmac_sha256(issued.key_id, b64url_decode(issued.secret))
    ids = server.publish(agent, 5, tenant=tenant)
    handled: list[str] = []
    stop = threading.Event()
    config = AgentConfig(poll=PollSchedule(interval_min=0.1, interval_max=2.0), concurrency=2,
                         lease_seconds=2, shutdown_grace=2.0)

    def handler(event: Event) -> None:
        handled.append(event.event_id)
        if event.payload["n"] == 0:
            threading.Event().wait(2.5)  # outlives the lease: signed heartbeats keep it

    agent_runner = Agent(AsyncClient(server.base, token, signing_key=key), LocalState(tmp_path / "s.db"), config)
    thread = threading.Thread(target=lambda: agent_runner.run_sync(handler, stop=stop), daemon=True)
    thread.start()
    try:
        check = server.token(agent + "_reader", tenant=tenant)  # poll needs no signature
        del check
        wait_until("every event is acknowledged under signatures", 30,
                   lambda: server.all_in_state(token, ids, "acked"))
    finally:
        stop.set()
        thread.join(timeout=20)
    assert sorted(handled) == sorted(ids), "each handled once"
    assert all(e.delivery_attempts == 1 for e in server.events(token).values())
