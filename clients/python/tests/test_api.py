"""The whole agent-facing API through the sync ``Client`` and the async ``AsyncClient``,
against the real service on SQLite and MariaDB."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from agent_inbox import (
    AckEntry,
    AcknowledgeRequest,
    AsyncClient,
    ClaimRequest,
    Client,
    Credentials,
    CredentialsError,
    HeartbeatEntry,
    HeartbeatRequest,
    MemoryTokenStore,
    PollRequest,
    ProblemError,
    PublishRequest,
    ReleaseRequest,
    SessionHeartbeatRequest,
    StreamTicketRequest,
    SubscribeRequest,
)
from conftest import Server, unique, wait_until


def test_subscribe_poll_claim_heartbeat_acknowledge_sync(server: Server) -> None:
    agent = unique("api")
    token = server.token(agent)
    ids = server.publish(agent, 3)
    with Client(server.base, token) as client:
        session = client.subscribe(SubscribeRequest(device_id="laptop", wants_claims=True))
        assert session.recipient.recipient_id == agent
        assert session.current_head_seq == 3
        assert session.sse_url and session.session_id in session.sse_url
        beat = client.session_heartbeat(session.session_id, SessionHeartbeatRequest(last_seen_seq=1))
        assert beat.session_id == session.session_id

        page = client.poll(PollRequest(after_seq=0, limit=2))
        assert [e.event_id for e in page.events] == ids[:2]
        assert page.more_available and page.next_cursor == 2 and page.head_seq == 3
        assert page.events[0].payload == {"n": 0}

        claimed = client.claim(ClaimRequest(session_id=session.session_id, limit=2, lease_seconds=30))
        assert [c.event_id for c in claimed.claims] == ids[:2]
        first, second = claimed.claims
        assert first.ack_state == "claimed" and first.lease_token

        extended = client.heartbeat(
            HeartbeatRequest(leases=[HeartbeatEntry(event_id=first.event_id, lease_token=first.lease_token, extend_by_seconds=60)])
        )
        assert extended.leases[0].error is None
        assert extended.leases[0].visibility_lease_until_utc
        lost = client.heartbeat(HeartbeatRequest(leases=[HeartbeatEntry(event_id=first.event_id, lease_token=second.lease_token, extend_by_seconds=60)]))
        assert lost.leases[0].error is not None

        ack = AcknowledgeRequest(acks=[AckEntry(event_id=first.event_id, lease_token=first.lease_token, result="completed")])
        assert client.acknowledge(ack).results[0].ack_state == "acked"
        assert client.acknowledge(ack).results[0].error is None, "repeating an ack is harmless"
        wrong = client.acknowledge(AcknowledgeRequest(acks=[AckEntry(event_id=second.event_id, lease_token=first.lease_token)]))
        assert wrong.results[0].error is not None and wrong.results[0].error.code

        # Dead-letter one: acknowledge as failed.
        client.acknowledge(AcknowledgeRequest(acks=[AckEntry(event_id=second.event_id, lease_token=second.lease_token, result="failed")]))
        events = server.events(token)
        assert events[ids[0]].ack_state == "acked"
        assert events[second.event_id].ack_state == "dead_letter"
        assert events[ids[2]].ack_state == "available"


def test_claim_by_ids_release_with_retry_after_and_problems_sync(server: Server) -> None:
    agent = unique("api")
    token = server.token(agent)
    ids = server.publish(agent, 2)
    with Client(server.base, token) as client:
        claimed = client.claim(ClaimRequest(event_ids=[ids[1], "0190aaaa-0000-7000-8000-000000000000"]))
        assert [c.event_id for c in claimed.claims] == [ids[1]]
        assert claimed.rejected is not None and len(claimed.rejected) == 1 and claimed.rejected[0].error.code
        claim = claimed.claims[0]
        released = client.release(ReleaseRequest(event_id=claim.event_id, lease_token=claim.lease_token, retry_after_seconds=60, reason="busy"))
        assert released.ack_state in ("available", "retry_scheduled") and released.next_retry_at_utc
        # Released for a minute: not claimable now; the other one is.
        again = client.claim(ClaimRequest(limit=10))
        assert [c.event_id for c in again.claims] == [ids[0]]
        assert client.release(ReleaseRequest(event_id=claim.event_id, lease_token=claim.lease_token, retry_after_seconds=60)).event_id, "repeats are harmless"
        with pytest.raises(ProblemError) as refused:
            client.release(ReleaseRequest(event_id=ids[0], lease_token=claim.lease_token, retry_after_seconds=0))
        assert refused.value.status == 409 and refused.value.lease_lost, refused.value.code
        with pytest.raises(ProblemError) as bad:
            client.claim(ClaimRequest(limit=0))
        assert bad.value.status == 400 and bad.value.code and bad.value.detail
    with Client(server.base, "not-a-token") as client, pytest.raises(ProblemError) as unauthorized:
        client.head()
    assert unauthorized.value.status == 401


def test_head_etag_long_poll_and_stream_ticket_sync(server: Server) -> None:
    agent = unique("api")
    token = server.token(agent)
    with Client(server.base, token) as client:
        head = client.head()
        assert head.head_seq == 0 and head.recipient_id == agent and head.etag
        assert client.head_if_changed(head.etag) is None, "304 while nothing changed"
        server.publish(agent, 1)
        moved = client.head_if_changed(head.etag)
        assert moved is not None and moved.head_seq == 1 and moved.etag != head.etag

        # A long poll returns when an event arrives, not after its whole wait.
        timer = threading.Timer(0.5, lambda: server.publish(agent, 1))
        timer.start()
        started = time.monotonic()
        page = client.poll(PollRequest(after_seq=1, wait_seconds=10))
        assert time.monotonic() - started < 8
        assert page.head_seq == 2 and len(page.events) == 1
        timer.join()

        ticket = client.stream_ticket(StreamTicketRequest(ttl_seconds=30))
        assert ticket.ticket and "ticket=" in ticket.sse_url and ticket.expires_in <= 30
    # The ticket opens a stream without a bearer token, once.
    url = ticket.sse_url if ticket.sse_url.startswith("http") else server.base + ticket.sse_url
    with httpx.stream("GET", url, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
    with httpx.stream("GET", url, timeout=10) as again:
        assert again.status_code == 401, "a ticket works once"


def test_refresh_tokens_rotate_and_a_spent_one_is_refused(server: Server) -> None:
    agent = unique("api")
    access, refresh = server.token(agent, refresh=True).splitlines()
    with Client(server.base, access) as client:
        first = client.refresh(refresh)
        assert first.refresh_token and first.refresh_token != refresh and first.expires_in > 0
        with pytest.raises(ProblemError) as reused:
            client.refresh(refresh)
        assert reused.value.status == 401 and reused.value.code in ("refresh_token_reused", "invalid_refresh_token")
    # Refreshing credentials buy their own access token and keep the rotated refresh token.
    access, refresh = server.token(agent + "_b", refresh=True).splitlines()
    store = MemoryTokenStore(refresh)
    with Client(server.base, Credentials.refreshing(store)) as client:
        assert client.head().recipient_id == agent + "_b"
        assert store.load() != refresh, "the refresh token was rotated and stored"
    spent = Credentials.refreshing(refresh)
    with Client(server.base, spent) as client, pytest.raises(ProblemError):
        client.head()
    with pytest.raises(CredentialsError):
        Credentials.refreshing(MemoryTokenStore("")).refresh_token()


def test_publish_is_idempotent_by_deduplication_key(server: Server) -> None:
    agent = unique("api")
    with Client(server.base, server.publisher) as publisher:
        request = PublishRequest(recipients=[agent, agent + "_2"], event_type="t", deduplication_key="k1", payload={"a": 1})
        first = publisher.publish(request)
        second = publisher.publish(request)
        assert [d.event_id for d in first.deliveries] == [d.event_id for d in second.deliveries]
        assert second.deliveries[0].deduplicated and not first.deliveries[0].deduplicated


def test_the_async_client_does_the_same_work(server: Server) -> None:
    agent = unique("api")
    token = server.token(agent)
    ids = server.publish(agent, 3)

    async def scenario() -> None:
        async with AsyncClient(server.base, token) as client:
            session = await client.subscribe()
            head = await client.head()
            assert head.head_seq == 3 and head.etag
            assert await client.head_if_changed(head.etag) is None
            page = await client.poll(PollRequest(after_seq=0))
            assert [e.event_id for e in page.events] == ids
            claimed = await client.claim(ClaimRequest(session_id=session.session_id, limit=3))
            beats = await client.heartbeat(
                HeartbeatRequest(leases=[HeartbeatEntry(event_id=c.event_id, lease_token=c.lease_token, extend_by_seconds=30) for c in claimed.claims])
            )
            assert all(b.error is None for b in beats.leases)
            released = await client.release(
                ReleaseRequest(event_id=claimed.claims[2].event_id, lease_token=claimed.claims[2].lease_token, retry_after_seconds=0)
            )
            assert released.ack_state in ("available", "retry_scheduled")
            acks = await client.acknowledge(
                AcknowledgeRequest(acks=[AckEntry(event_id=c.event_id, lease_token=c.lease_token) for c in claimed.claims[:2]])
            )
            assert [r.ack_state for r in acks.results] == ["acked", "acked"]
            snapshot = await client.resync_page(0, 1)
            assert snapshot.head_seq == 3 and [e.event_id for e in snapshot.open_events] == [ids[2]]
            # The SSE stream hints at a publish.
            seen: list[str] = []
            opened = asyncio.Event()

            async def listen() -> None:
                async for event in client.sse(session.sse_url or "/v1/streams/sse", 3, 30, opened.set):
                    seen.append(event.event)
                    if event.event == "inbox.updated":
                        return

            listening = asyncio.ensure_future(listen())
            await asyncio.wait_for(opened.wait(), 10)
            await asyncio.to_thread(server.publish, agent, 1)
            await asyncio.wait_for(listening, 10)
            assert "inbox.updated" in seen
            with pytest.raises(ProblemError) as bad:
                await client.poll(PollRequest(after_seq=0, limit=100_000))
            assert bad.value.status == 400

    asyncio.run(scenario())


def test_rate_limits_are_retried_after_retry_after(tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("limited")
    limited = Server("sqlite", directory, env={
        "AGENT_INBOX_AGENT_REQUESTS_PER_SECOND": "1", "AGENT_INBOX_AGENT_REQUESTS_BURST": "1",
    })
    try:
        token = limited.token("limited_agent")
        seen: list[ProblemError] = []
        with Client(limited.base, token) as client:
            from agent_inbox import RetryPolicy

            client.retry = RetryPolicy(attempts_max=1)
            client.head()
            with pytest.raises(ProblemError) as refused:
                client.head()
            seen.append(refused.value)
            assert refused.value.status == 429 and refused.value.retry_after is not None
            client.retry = RetryPolicy(attempts_max=5)
            assert wait_until("a rate-limited call goes through after Retry-After", 30, lambda: client.head())
    finally:
        limited.stop()


def test_processes_sharing_a_refresh_token_file_never_spend_one_twice(server: Server, tmp_path: Path) -> None:
    """Several clients (as separate processes would) share one FileTokenStore: the file lock
    and the re-read under it mean each refresh spends the current token once, so the service
    never sees a reuse (which would revoke the whole family)."""
    from concurrent.futures import ThreadPoolExecutor

    from agent_inbox import FileTokenStore

    agent = unique("shared_refresh")
    _, refresh = server.token(agent, refresh=True).splitlines()
    path = tmp_path / "shared.refresh-token"
    FileTokenStore(path).save(refresh)

    def one_client(_: int) -> str:
        with Client(server.base, Credentials.refreshing(FileTokenStore(path))) as client:
            return client.head().recipient_id

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one_client, range(8))) == [agent] * 8
    with Client(server.base, Credentials.refreshing(FileTokenStore(path))) as client:
        assert client.head().recipient_id == agent, "the family is still alive"
