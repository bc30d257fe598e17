"""Generated from openapi.json by scripts/generate-wire-types.sh (datamodel-codegen,
dataclasses, keyword-only): do not edit. _models.py names the types the SDK uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias


@dataclass(kw_only=True)
class AckOneRequest:
    """
    Seed 000's single-event ack body (`POST .../inbox/{event_id}/ack`).
    """

    lease_token: str
    class_: Literal['prompt_injection', 'malformed_payload', 'bad_signature', 'policy', 'other'] | None = (
        None
    )
    reason: str | None = None
    result: Literal['completed', 'failed', 'quarantined'] | None = None
    """
    `completed` (default), `failed` or `quarantined` (with `reason`); `reason` and `class`
    as in [`AckEntry`].
    """


@dataclass(kw_only=True)
class AdminAgentKeyView:
    """
    An agent's request-signing key, without its material.
    """

    agent_id: str
    algorithm: Literal['ed25519', 'hmac-sha256']
    created_at_utc: str
    key_id: str
    retired_at_utc: str | None = None
    """
    When it stopped (or stops) verifying.
    """


@dataclass(kw_only=True)
class AdminAgentKeysResponse:
    """
    `GET /v1/admin/agent-keys`: every agent key of the tenant, retired ones included.
    """

    keys: list[AdminAgentKeyView]


@dataclass(kw_only=True)
class AdminSessionView:
    """
    One agent session: a device or process that subscribed.
    """

    agent_id: str
    auth_subject: str
    """
    The token subject that opened it.
    """
    connected_at_utc: str
    last_heartbeat_at_utc: str
    last_seen_seq: int
    session_id: str
    status: str
    """
    `active`, `gone` (stopped heartbeating) or `superseded`.
    """
    transport: str
    """
    The transport it last used: `sse`, `websocket`, `long-poll` or `poll`.
    """
    device_id: str | None = None
    superseded_at_utc: str | None = None
    superseded_by_session_id: str | None = None


@dataclass(kw_only=True)
class AdminSessionsResponse:
    """
    `GET /v1/admin/sessions`: newest first.
    """

    sessions: list[AdminSessionView]


@dataclass(kw_only=True)
class AgentCapabilities:
    extendedAgentCard: bool
    pushNotifications: bool
    streaming: bool


@dataclass(kw_only=True)
class AgentInterface:
    """
    Where and how an agent is reached.
    """

    protocolBinding: str
    protocolVersion: str
    url: str


@dataclass(kw_only=True)
class AgentKeyRequest:
    """
    `POST /v1/agent-keys`: register an ed25519 public key, or ask for an hmac-sha256 secret.
    """

    algorithm: Literal['ed25519', 'hmac-sha256']
    key_id: str | None = None
    """
    The `keyid` signatures will name; unique in the tenant. Generated when absent.
    """
    public_key: str | None = None
    """
    ed25519 only: the 32-byte public key, or its RFC 8410 SubjectPublicKeyInfo DER; a
    small-order (weak) key is refused.
    """


@dataclass(kw_only=True)
class AgentKeyResponse:
    """
    A registered key.
    """

    agent_id: str
    algorithm: Literal['ed25519', 'hmac-sha256']
    created_at_utc: str
    key_id: str
    public_key: str | None = None
    """
    ed25519: the public key as registered.
    """
    retires_at_utc: str | None = None
    secret: str | None = None
    """
    hmac-sha256: the shared secret, in this response only; store it now.
    """


@dataclass(kw_only=True)
class AgentKeysResponse:
    keys: list[AgentKeyResponse]
    signatures_required: bool | None = None
    """
    Whether the agent's tenant requires signed claim, acknowledge, release and heartbeat
    calls, so an agent can tell at login that it needs a key.
    """


@dataclass(kw_only=True)
class AgentProvider:
    organization: str
    url: str


@dataclass(kw_only=True)
class AgentSkill:
    description: str
    id: str
    name: str
    tags: list[str]
    examples: list[str] | None = None


@dataclass(kw_only=True)
class CallbackAttemptView:
    """
    One entry of a registration's delivery log.
    """

    attempt: int
    created_at_utc: str
    delivery_id: str
    duration_ms: int
    kind: str
    """
    `challenge` or `hint`.
    """
    outcome: str
    """
    `delivered`, `failed`, `abandoned`, `verified` or `verification_failed`.
    """
    error: str | None = None
    head_seq: int | None = None
    http_status: int | None = None


@dataclass(kw_only=True)
class CallbackAttemptsResponse:
    attempts: list[CallbackAttemptView]


@dataclass(kw_only=True)
class CallbackRegistrationRequest:
    """
    `POST /v1/callback-registrations` (and seed 000's `POST /api/v1/agents/{agent_id}/callbacks`).
    """

    callback_url: str
    """
    `https://...` (plain http only to loopback, under the development setting).
    """
    auth_mode: Literal['hmac-sha256'] | None = None
    """
    Only `hmac-sha256`.
    """
    delivery_scope: list[Literal['signal_only']] | None = None
    """
    Only `["signal_only"]`: deliveries carry the thin hint, never event data.
    """
    max_rate_per_minute: int | None = None
    """
    At most this many deliveries per minute; heads in between coalesce. Default 60.
    """
    recipient_id: str | None = None
    """
    The agent whose inbox the callback hints at: the token's agent (an admin token may
    name any agent of its tenant).
    """
    replay_window_seconds: int | None = None
    """
    How long the receiver should remember nonces (informational; signatures last 300 s).
    """
    secret: str | None = None
    """
    The shared secret (at least 32 bytes). When given, the challenge is sent at once;
    when absent, a secret is generated and returned, and the challenge waits for
    `POST /v1/callback-registrations/{id}/verify`.
    """
    secret_id: str | None = None
    """
    The key id deliveries name in `MATM-Key-Id` and `keyid`; generated when absent.
    """
    tenant_id: str | None = None
    """
    Must be the token's tenant when given.
    """


@dataclass(kw_only=True)
class CallbackRegistrationResponse:
    """
    A registration as the tenant sees it. `status` is `pending_verification` or `active`; an
    active registration may also be disabled (`disabled_at_utc`).
    """

    auth_mode: str
    callback_url: str
    created_at_utc: str
    delivered_head_seq: int
    max_rate_per_minute: int
    recipient_id: str
    registration_id: str
    replay_window_seconds: int
    secret_id: str
    status: str
    tenant_id: str
    challenge_delivery_id: str | None = None
    """
    The challenge sent by this request, if any, and when it expired.
    """
    disabled_at_utc: str | None = None
    """
    Set when deliveries failed past the server's bound: nothing is delivered until an
    operator re-enables the registration (`POST /v1/admin/callbacks/{id}/enable`); the
    agent still finds its events by polling.
    """
    disabled_reason: str | None = None
    """
    Why it was disabled: the failures in a row, for how long, and the last error.
    """
    expires_at_utc: str | None = None
    last_error: str | None = None
    """
    Why the last challenge or delivery failed.
    """
    previous_secret_id: str | None = None
    """
    During a rotation overlap: the key still signing beside the current one.
    """
    previous_secret_retires_at_utc: str | None = None
    secret: str | None = None
    """
    Only when the service generated the secret, in this response only.
    """
    verified_at_utc: str | None = None


@dataclass(kw_only=True)
class CallbackRegistrationsResponse:
    registrations: list[CallbackRegistrationResponse]


EventId: TypeAlias = str


@dataclass(kw_only=True)
class ClaimRequest:
    """
    `POST /v1/inbox/claim`: name `event_ids` to claim those, or leave them out to claim the
    next `limit` claimable events (most urgent first, then oldest).
    """

    event_ids: list[EventId] | None = None
    lease_seconds: int | None = None
    """
    Lease length; default and maximum are the server's settings.
    """
    limit: int | None = None
    """
    Claim-next batch size; default 10.
    """
    recipient_id: str | None = None
    session_id: str | None = None
    """
    The session (from subscribe) claiming. Required when the tenant's policy is
    single-active-session: a session other than the agent's newest is refused with 409
    `session_superseded`, a missing one with 409 `session_required`.
    """
    tenant_id: str | None = None


@dataclass(kw_only=True)
class Correlation:
    """
    Ids of the domain objects an event concerns.
    """

    assignment_id: str | None = None
    company_id: str | None = None
    meeting_room_id: str | None = None
    memory_update_id: str | None = None
    message_id: str | None = None
    project_id: str | None = None
    routing_decision_id: str | None = None
    workspace_id: str | None = None


Member: TypeAlias = str


@dataclass(kw_only=True)
class CreateRoomRequest:
    room_id: str
    members: list[Member] | None = None
    name: str | None = None


@dataclass(kw_only=True)
class DeliveryView:
    deduplicated: bool
    """
    The deduplication key matched an earlier event, which is returned instead.
    """
    event_id: str
    inbox_seq: int
    recipient_id: str
    recipient_kind: str


@dataclass(kw_only=True)
class HeadResponse:
    """
    `GET /v1/inbox/head`
    """

    head_seq: int
    oldest_available_seq: int
    """
    Cursors below `oldest_available_seq - 1` must resync first.
    """
    recipient_id: str
    recipient_kind: str
    tenant_id: str


@dataclass(kw_only=True)
class HeartbeatEntry:
    event_id: str
    extend_by_seconds: int
    """
    At most the server's `lease_max`.
    """
    lease_token: str


@dataclass(kw_only=True)
class HeartbeatRequest:
    """
    `POST /v1/inbox/heartbeat`
    """

    leases: list[HeartbeatEntry]
    recipient_id: str | None = None
    session_id: str | None = None
    tenant_id: str | None = None


@dataclass(kw_only=True)
class HistoryEntryView:
    """
    One transition of an event, as recorded when it happened.
    """

    action: str
    """
    `claimed`, `acknowledged`, `released`, `lease_expired`, `dead_lettered`,
    `quarantined`, `requeued`, `released_from_quarantine` or `expired`.
    """
    actor: str
    """
    `agent`, `operator:<subject>` or `scavenger`.
    """
    at_utc: str
    attempt: int
    """
    `delivery_attempts` after the transition.
    """
    state: Literal['available', 'claimed', 'acked', 'dead_letter', 'quarantined', 'expired']
    """
    The event's `ack_state` after the transition.
    """
    class_: Literal['prompt_injection', 'malformed_payload', 'bad_signature', 'policy', 'other'] | None = (
        None
    )
    """
    The quarantine class, on a `quarantined` entry.
    """
    reason: str | None = None
    session_id: str | None = None


@dataclass(kw_only=True)
class InboxStatsView:
    claimed: int
    depth: int
    """
    Events not yet acknowledged or parked: available, retry-scheduled and claimed.
    """
    head_seq: int
    parked: int
    recipient_id: str
    recipient_kind: str
    last_seen_at_utc: str | None = None
    """
    The newest sign of life of any of the agent's sessions.
    """
    oldest_unacked_age_seconds: int | None = None
    online_sessions: int | None = None
    """
    Sessions of this agent neither gone nor superseded.
    """
    retry_scheduled: int | None = None
    """
    Available events waiting out a retry delay (part of `depth`).
    """


@dataclass(kw_only=True)
class ItemError:
    """
    The error for one item of a batch (claim by ids, acknowledge, heartbeat).
    """

    code: str
    detail: str


@dataclass(kw_only=True)
class ItemResult:
    event_id: str
    ok: bool
    error: ItemError | None = None


@dataclass(kw_only=True)
class ItemResults:
    """
    One outcome per named event, in the order named.
    """

    results: list[ItemResult]


@dataclass(kw_only=True)
class JsonRpcError:
    """
    A JSON-RPC error: its `data` holds `google.rpc.ErrorInfo` (reason, domain `a2a-protocol.org`)
    and, for refused params, `google.rpc.BadRequest` naming each field.
    """

    code: int
    message: str
    data: list[dict[str, Any]] | None = None


@dataclass(kw_only=True)
class JsonRpcRequest:
    """
    A JSON-RPC 2.0 request to an agent's A2A endpoint.
    """

    id: dict[str, Any]
    """
    A string, a number or null; echoed in the answer.
    """
    jsonrpc: str
    """
    Exactly `"2.0"`.
    """
    method: str
    """
    `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`,
    `SubscribeToTask`, `CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
    `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig` or
    `GetExtendedAgentCard`.
    """
    params: dict[str, Any]
    """
    The method's params (`SendMessageRequest`, `GetTaskRequest`, ...).
    """


@dataclass(kw_only=True)
class JsonRpcResponse:
    """
    A JSON-RPC 2.0 answer: `result`, or `error` (A2A's codes: -32001 task not found, -32002
    not cancelable, -32003 push notifications not supported, -32004 unsupported operation,
    -32005 content type not supported, -32009 version not supported; -32700, -32600, -32601,
    -32602 and -32603 as JSON-RPC defines them). Errors answer HTTP 200, as the binding says.
    """

    id: dict[str, Any]
    jsonrpc: str
    error: JsonRpcError | None = None
    result: dict[str, Any] | None = None


@dataclass(kw_only=True)
class MinuteActivityView:
    acked: int
    """
    Events acknowledged in this minute.
    """
    depth: int
    """
    Unacknowledged events at the end of this minute, reconstructed from today's depth and
    the counts of the later minutes (an estimate: dead-lettered, expired and purged
    events are not subtracted minute by minute).
    """
    minute_start_utc: str
    published: int
    """
    Events published to the tenant's inboxes in this minute.
    """


@dataclass(kw_only=True)
class ParkedEventsRequest:
    """
    Requeue or purge parked events of one recipient, or release quarantined ones
    (`POST /v1/admin/quarantine/release`).
    """

    event_ids: list[EventId]
    recipient_id: str


@dataclass(kw_only=True)
class Part:
    """
    One piece of a message or artifact: exactly one of `text`, `raw` (base64), `url` or `data`.
    """

    data: dict[str, Any] | None = None
    """
    Any JSON value.
    """
    filename: str | None = None
    mediaType: str | None = None
    metadata: dict[str, Any] | None = None
    raw: str | None = None
    """
    Bytes, base64 (standard or URL-safe alphabet).
    """
    text: str | None = None
    url: str | None = None


@dataclass(kw_only=True)
class PayloadRef:
    """
    Where the data of an event lives when it is not inline.
    """

    id: str
    kind: str


@dataclass(kw_only=True)
class PollRequest:
    """
    `POST /v1/inbox/poll-after-cursor`
    """

    after_seq: int | None = None
    """
    Events with a larger `inbox_seq` are returned; 0 starts at the beginning.
    """
    include_claimable_only: bool | None = None
    """
    Only events a claim could take now.
    """
    limit: int | None = None
    """
    Default 100.
    """
    recipient_id: str | None = None
    tenant_id: str | None = None
    wait_seconds: int | None = None
    """
    Long poll: wait up to this many seconds for an event past the cursor (at most the
    server's `long_poll_wait_max`).
    """


@dataclass(kw_only=True)
class PostMessageRequest:
    body: Any
    """
    The message: any JSON, at most the payload limit.
    """
    deduplication_key: str | None = None
    """
    Idempotent posting: the same key returns the first message instead of a second.
    """
    priority: Literal['urgent', 'high', 'normal', 'low'] | None = None
    """
    `normal` when absent.
    """


@dataclass(kw_only=True)
class PostMessageResponse:
    deduplicated: bool
    """
    The first post with this deduplication key is returned instead of a new one.
    """
    deliveries: list[DeliveryView]
    message_id: str
    room_id: str


@dataclass(kw_only=True)
class Problem:
    """
    An RFC 9457 problem. `code` is stable and meant for programs; `detail` is a sentence for a
    person, saying what to do next. Extra members (such as `oldest_available_seq`) ride along.
    """

    code: str
    detail: str
    status: int
    title: str
    type: str
    """
    A URI naming the problem type: `urn:agent-inbox:problem:<code>`.
    """
    instance: str | None = None


@dataclass(kw_only=True)
class PublicKey:
    """
    One Ed25519 public key (RFC 8037): `kty` `OKP`, `crv` `Ed25519`, `alg` `EdDSA`, `use` `sig`.
    """

    alg: str
    crv: str
    kid: str
    """
    The `kid` header of the tokens this key signs.
    """
    kty: str
    use: str
    x: str
    """
    The public key, base64url without padding.
    """


@dataclass(kw_only=True)
class PublicKeySet:
    """
    The service's public token-signing keys as an RFC 7517 JWK set (`/.well-known/jwks.json`):
    the Ed25519 keys of EdDSA access tokens, for services that verify tokens without a secret.
    Empty while the service signs with HS256 only.
    """

    keys: list[PublicKey]


Recipient: TypeAlias = str


@dataclass(kw_only=True)
class PublishRequest:
    event_type: str
    recipients: list[Recipient]
    """
    Agent ids; every one gets its own inbox row and sequence number, or none does.
    """
    available_at_utc: str | None = None
    """
    Delayed delivery: not claimable before this time. Also accepted as
    `availability_at_utc`, the name every event answers with (seed 001's).
    """
    correlation: Correlation | None = None
    deduplication_key: str | None = None
    """
    Publishing the same key again returns the existing event instead of a second one.
    """
    expires_at_utc: str | None = None
    fairness_key: str | None = None
    """
    The source this event is fair to (a room, a project, a person). Used only when the
    tenant's policy turns `fair_claims` on, where it defaults to the publishing token's
    subject: within one priority, claims then interleave keys, quiet ones first, so one
    key's backlog cannot hold another key's events back. Ignored otherwise.
    """
    max_attempts: int | None = None
    """
    Delivery attempts before dead-lettering.
    """
    payload: dict[str, Any] | None = None
    """
    Inline JSON payload (at most the server's payload limit).
    """
    payload_ref: PayloadRef | None = None
    priority: Literal['urgent', 'high', 'normal', 'low'] | None = None
    """
    `normal` when absent.
    """
    tenant_id: str | None = None
    """
    Must equal the token's tenant when present.
    """


@dataclass(kw_only=True)
class PublishResponse:
    deliveries: list[DeliveryView]


@dataclass(kw_only=True)
class QuarantineRequest:
    """
    `POST /v1/admin/quarantine`: set available or claimed events aside for a person. A claimed
    event's lease ends: its holder's later acknowledge or heartbeat is refused. Quarantining a
    quarantined event again is accepted and changes nothing.
    """

    event_ids: list[EventId]
    reason: str
    """
    Why, on one line: kept on the event and in its history.
    """
    recipient_id: str
    class_: Literal['prompt_injection', 'malformed_payload', 'bad_signature', 'policy', 'other'] | None = (
        None
    )
    """
    `other` when absent.
    """


@dataclass(kw_only=True)
class QuotaRefusalView:
    detail: str
    """
    The sentence the publisher got.
    """
    limit: str
    """
    `pending_events` or `stored_bytes`.
    """
    refused_at_utc: str


@dataclass(kw_only=True)
class QuotaRefusalsResponse:
    """
    `GET /v1/admin/quota-refusals`: this node's refusals of the tenant's publishes by its
    quotas since the node started (each node counts its own), and the latest ones.
    """

    pending_events_refused: int
    """
    Publishes refused with 429 `tenant_pending_limit`.
    """
    recent: list[QuotaRefusalView]
    """
    The latest refusals, newest first (at most 20).
    """
    stored_bytes_refused: int
    """
    Publishes refused with 507 `tenant_storage_limit`.
    """


@dataclass(kw_only=True)
class RecipientView:
    recipient_id: str
    recipient_kind: str
    tenant_id: str


@dataclass(kw_only=True)
class RefreshRequest:
    refresh_token: str


@dataclass(kw_only=True)
class RejectedEvent:
    error: ItemError
    event_id: str


@dataclass(kw_only=True)
class ReleaseOneRequest:
    """
    Seed 000's single-event release body (`POST .../inbox/{event_id}/release`).
    """

    lease_token: str
    reason: str | None = None
    retry_after_seconds: int | None = None


@dataclass(kw_only=True)
class ReleaseRequest:
    """
    `POST /v1/inbox/release`
    """

    event_id: str
    lease_token: str
    reason: str | None = None
    recipient_id: str | None = None
    retry_after_seconds: int | None = None
    """
    Not claimable again before this many seconds.
    """
    tenant_id: str | None = None


@dataclass(kw_only=True)
class ReleaseResponse:
    ack_state: Literal['available', 'claimed', 'acked', 'dead_letter', 'quarantined', 'expired']
    event_id: str
    next_retry_at_utc: str | None = None


@dataclass(kw_only=True)
class RoomMembersRequest:
    members: list[Member]


@dataclass(kw_only=True)
class RoomView:
    created_at_utc: str
    members: list[str]
    room_id: str
    name: str | None = None


@dataclass(kw_only=True)
class RotateCallbackSecretRequest:
    """
    `POST /v1/callback-registrations/{id}/rotate`: a new secret; the old one keeps signing
    beside it for the overlap.
    """

    overlap_seconds: int | None = None
    """
    How long the old secret keeps signing: default 24 h.
    """
    secret: str | None = None
    """
    Generated (and returned once) when absent.
    """
    secret_id: str | None = None


@dataclass(kw_only=True)
class SessionHeartbeatRequest:
    """
    `POST /v1/agent-sessions/{session_id}/heartbeat` (the body is optional).
    """

    last_seen_seq: int | None = None
    """
    The highest sequence the agent has processed; never moves the recorded value back.
    """


@dataclass(kw_only=True)
class SessionHeartbeatResponse:
    gone_after_utc: str
    """
    A session silent past this time is marked gone.
    """
    heartbeat_interval_seconds: int
    session_id: str
    status: str


@dataclass(kw_only=True)
class StreamCookieRequest:
    """
    `POST /v1/streams/cookie` (the body is optional): the ticket's fields, with a cookie's
    longer bounds, so the document states each credential's own.
    """

    session_id: str | None = None
    """
    The agent session the stream will serve; it is touched while the stream is open.
    """
    ttl_seconds: int | None = None
    """
    How long the cookie stays valid: 1 s to the access token lifetime, which is also the
    default.
    """


@dataclass(kw_only=True)
class StreamCookieResponse:
    """
    The answer to `POST /v1/streams/cookie`; the credential itself is only in the
    `Set-Cookie` header (HttpOnly), never in the body.
    """

    expires_at_utc: str
    expires_in: int
    sse_url: str
    websocket_url: str


@dataclass(kw_only=True)
class StreamSignal:
    """
    Seed 001's thin signal: the `data` of an SSE `inbox.updated` event, and a WebSocket text
    message. Duplicates and reordering are harmless: act on the highest `head_seq` seen.
    """

    delivery_id: str
    """
    Unique per message, for tracing a hint through logs.
    """
    head_seq: int
    recipient_id: str
    sent_at_utc: str
    signal_type: str
    """
    `inbox.updated`, `heartbeat` (WebSocket only), or `session.superseded`: the last message
    of a stream whose session a newer subscribe of the same agent superseded (the tenant's
    single-active-session policy); the stream then closes. Stop taking work, or subscribe
    again to take over.
    """
    tenant_id: str
    approximate_unacked: int | None = None
    """
    On `inbox.updated`: how many of the inbox's events were not yet acknowledged or parked
    (available, scheduled or claimed) when the hint was written, counted up to 10,000. A
    hint for a glance (a badge, a log line), not for deciding what to fetch; absent when it
    could not be counted at that moment.
    """


@dataclass(kw_only=True)
class StreamTicketRequest:
    """
    `POST /v1/streams/tickets` (the body is optional).
    """

    session_id: str | None = None
    """
    The agent session the stream will serve; it is touched while the stream is open.
    """
    ttl_seconds: int | None = None
    """
    How long the ticket stays valid: 1 s to the server's `stream_ticket_ttl` (60 s by
    default), which is also the default.
    """


@dataclass(kw_only=True)
class StreamTicketResponse:
    """
    A single-use stream ticket: put it in the stream URL as `?ticket=` within `expires_in`
    seconds. It works once, on any node.
    """

    expires_at_utc: str
    expires_in: int
    sse_url: str
    """
    Ready-made URLs carrying the ticket (use one of them, once).
    """
    ticket: str
    websocket_url: str


@dataclass(kw_only=True)
class SubscribeRequest:
    agent_id: str | None = None
    device_id: str | None = None
    last_seen_seq: int | None = None
    supported_transports: list[Literal['sse', 'websocket', 'long-poll', 'poll']] | None = (
        None
    )
    """
    Any of `sse`, `websocket`, `long-poll`, `poll`; empty means all. The server
    recommends the first of sse, websocket, long-poll, poll the client supports.
    """
    tenant_id: str | None = None
    wants_claims: bool | None = None


@dataclass(kw_only=True)
class SubscribeResponse:
    current_head_seq: int
    heartbeat_interval_seconds: int
    lease_default_seconds: int
    poll_after_cursor_url: str
    recipient: RecipientView
    recommended_transport: Literal['sse', 'websocket', 'long-poll', 'poll']
    retention_days: int
    session_id: str
    sse_url: str | None = None
    """
    Relative to this server; carries the session id. Authenticate with the bearer header,
    a `?ticket=` from `POST /v1/streams/tickets`, or the stream cookie.
    """
    websocket_url: str | None = None
    """
    Absolute (`ws://` or `wss://`, from the request's Host) when the Host header is
    usable, otherwise relative.
    """


@dataclass(kw_only=True)
class TenantPolicyRequest:
    """
    `POST /v1/admin/tenant-policy`: settings left out keep their current value.
    """

    fair_claims: bool | None = None
    """
    Fair claims (off by default): within one priority, a claim interleaves the sources of
    an inbox's events (each publish's `fairness_key`, by default its publisher), quiet
    sources first, instead of taking them oldest first; no source waits without bound.
    Turning it on affects events published from then on; earlier ones are claimed first,
    oldest first.
    """
    pending_events_max: int | None = None
    """
    The most events of the tenant not yet acknowledged or parked (0: no limit). A publish
    past it is refused with 429 `tenant_pending_limit` and `Retry-After`; nothing stored
    changes. Counted per node, at most a second old.
    """
    signatures_required: bool | None = None
    """
    Claim, acknowledge, release and heartbeat must carry a valid signature.
    """
    single_active_session: bool | None = None
    """
    Seed 001's single-active-session policy (off by default): an agent's newest subscribe
    supersedes its earlier sessions, and only the newest session may claim or open a
    stream (others get 409 `session_superseded`). Acknowledge, release and heartbeat of
    leases already held keep working, so a superseded process can finish its work.
    """
    stored_bytes_max: int | None = None
    """
    The most inline payload bytes those events may hold (0: no limit). A publish past it is
    refused with 507 `tenant_storage_limit` and `Retry-After`.
    """


@dataclass(kw_only=True)
class TenantPolicyResponse:
    fair_claims: bool
    pending_events_max: int
    signatures_required: bool
    single_active_session: bool
    stored_bytes_max: int
    tenant_id: str


@dataclass(kw_only=True)
class TokenResponse:
    access_token: str
    expires_in: int
    scope: str
    token_type: str
    """
    Always `Bearer`.
    """
    refresh_expires_in: int | None = None
    refresh_token: str | None = None


@dataclass(kw_only=True)
class AckOutcome:
    """
    One ack's outcome: `ack_state` when it was accepted (repeats included), `error` when not.
    """

    event_id: str
    ack_state: Literal['available', 'claimed', 'acked', 'dead_letter', 'quarantined', 'expired'] | None = (
        None
    )
    error: ItemError | None = None
    follow_ups: list[PublishResponse] | None = None
    """
    A hand-off's publishes, one per follow-up in request order (on a retry the first ones,
    marked `deduplicated`); absent for a plain acknowledgement or a refused one.
    """


@dataclass(kw_only=True)
class AcknowledgeResponse:
    results: list[AckOutcome]


@dataclass(kw_only=True)
class ActivityResponse:
    """
    `GET /v1/admin/activity?minutes=`: one entry per minute, oldest first, the current minute
    last.
    """

    minutes: list[MinuteActivityView]


@dataclass(kw_only=True)
class AdminCallbackView(CallbackRegistrationResponse):
    """
    A registration with its delivery state: what an operator checks when hints stop arriving.
    """

    consecutive_failures: int
    """
    Failed deliveries in a row across heads since the last success, and when the first of
    them failed: what the disabling bound counts.
    """
    failed_attempts: int
    """
    Failed attempts in a row for the current head.
    """
    next_attempt_at_utc: str
    """
    When the next delivery may be sent (the rate limit or a retry's backoff).
    """
    recent_deliveries: list[CallbackAttemptView]
    """
    The last deliveries and challenges, newest first (at most 10).
    """
    failing_since_utc: str | None = None


@dataclass(kw_only=True)
class AdminCallbacksResponse:
    """
    `GET /v1/admin/callbacks`: every registration of the tenant.
    """

    registrations: list[AdminCallbackView]


@dataclass(kw_only=True)
class AgentCard:
    """
    An agent's public card (`/a2a/{tenant}/{agent}/.well-known/agent-card.json`).
    """

    capabilities: AgentCapabilities
    defaultInputModes: list[str]
    defaultOutputModes: list[str]
    description: str
    name: str
    securityRequirements: list[dict[str, Any]]
    """
    Each `{"schemes": {name: {"list": [scopes]}}}`.
    """
    securitySchemes: dict[str, Any]
    """
    By name: the schemes `securityRequirements` refer to (ProtoJSON of `SecurityScheme`,
    such as `{"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}`).
    """
    skills: list[AgentSkill]
    supportedInterfaces: list[AgentInterface]
    version: str
    documentationUrl: str | None = None
    provider: AgentProvider | None = None


@dataclass(kw_only=True)
class Artifact:
    """
    What a task produced.
    """

    artifactId: str | None = None
    """
    Given by the server when the agent leaves it out.
    """
    description: str | None = None
    extensions: list[str] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    parts: list[Part] | None = None


@dataclass(kw_only=True)
class EventEnvelope:
    """
    An event as agents see it: seed 001's envelope, with the payload when there is one.
    """

    ack_state: Literal['available', 'retry_scheduled', 'claimed', 'acked', 'dead_letter', 'quarantined', 'expired']
    """
    `retry_scheduled` is an `available` event waiting for its retry time.
    """
    availability_at_utc: str
    correlation: Correlation
    created_at_utc: str
    dead_letter_state: Literal['none', 'max_attempts_exceeded', 'handler_failed', 'anomaly']
    """
    Why the event is parked (`none` while it is not).
    """
    delivery_attempts: int
    event_id: str
    event_type: str
    inbox_seq: int
    priority: Literal['urgent', 'high', 'normal', 'low']
    recipient_id: str
    recipient_kind: str
    tenant_id: str
    deduplication_key: str | None = None
    expires_at_utc: str | None = None
    next_retry_at_utc: str | None = None
    payload: dict[str, Any] | None = None
    """
    Inline JSON payload; cleared once the event is acknowledged.
    """
    payload_ref: PayloadRef | None = None
    visibility_lease_until_utc: str | None = None


@dataclass(kw_only=True)
class HeartbeatOutcome:
    event_id: str
    error: ItemError | None = None
    visibility_lease_until_utc: str | None = None


@dataclass(kw_only=True)
class HeartbeatResponse:
    leases: list[HeartbeatOutcome]


@dataclass(kw_only=True)
class InboxStatsResponse:
    inboxes: list[InboxStatsView]


@dataclass(kw_only=True)
class Message:
    """
    A message between a client and an agent.
    """

    role: Literal['ROLE_USER', 'ROLE_AGENT']
    contextId: str | None = None
    extensions: list[str] | None = None
    messageId: str | None = None
    metadata: dict[str, Any] | None = None
    parts: list[Part] | None = None
    referenceTaskIds: list[str] | None = None
    taskId: str | None = None


@dataclass(kw_only=True)
class PollResponse:
    events: list[EventEnvelope]
    head_seq: int
    more_available: bool
    next_cursor: int
    """
    Send as `after_seq` next time.
    """
    nudged: bool | None = None
    """
    A long poll ended because events behind the cursor went back to the inbox (an
    operator's requeue or release from quarantine): claim, since no poll after the cursor
    shows them. Only ever present as `true`.
    """


@dataclass(kw_only=True)
class ResyncResponse:
    """
    `GET /v1/inbox/resync`: what to rebuild from after `cursor_reset_required`. Open events come
    in pages: while `more_available`, ask again with `?after_seq=` the last open event's
    `inbox_seq`, and keep the first page's `resume_after_seq`.
    """

    head_seq: int
    more_available: bool
    oldest_available_seq: int
    open_events: list[EventEnvelope]
    """
    Every event not yet acknowledged or parked (available, scheduled or claimed).
    """
    resume_after_seq: int
    """
    Continue polling after this cursor once rebuilt: every older event that still needs
    handling is in `open_events`.
    """


@dataclass(kw_only=True)
class Seed000Signal(StreamSignal):
    """
    The `data:` of seed 000's SSE route (`event: inbox_updated`): the thin signal with seed
    000's `cursor_hint` (the head) beside it.
    """

    cursor_hint: int


@dataclass(kw_only=True)
class A2aReport:
    """
    What an agent's acknowledgement reports for the A2A task of the event it acknowledges
    (`acks[i].a2a`, only for an `a2a.message` event): committed with the acknowledgement, in its
    transaction and only while its lease holds. With `result: completed` the task completes (or,
    with `state`, waits for the client); `failed` fails it; `quarantined` rejects it. An
    acknowledgement without it still ends the task, without a result.
    """

    artifacts: list[Artifact] | None = None
    """
    What the task produced, added to its artifacts in order (at most 16 per report; each
    `artifactId` given by the server when left out).
    """
    message: Message | None = None
    state: Literal['completed', 'input_required', 'auth_required'] | None = None
    """
    With `result: completed`: `completed` (the default), or `input_required` /
    `auth_required` to ask the client for more (its next message with this task's id comes
    as a new event).
    """


@dataclass(kw_only=True)
class AckEntry:
    event_id: str
    lease_token: str
    a2a: A2aReport | None = None
    class_: Literal['prompt_injection', 'malformed_payload', 'bad_signature', 'policy', 'other'] | None = (
        None
    )
    """
    The kind of anomaly, for operators and metrics: `prompt_injection`,
    `malformed_payload`, `bad_signature`, `policy` or `other` (the default). Only with
    `result: quarantined`.
    """
    follow_ups: list[PublishRequest] | None = None
    """
    A hand-off: publishes (each the body of `POST /v1/events`) committed in the
    same transaction as this acknowledgement, and only while its lease holds; a stale lease
    refuses both. Each gets the deduplication key `handoff:{event_id}:{index}`, so a
    retried request answers the first publishes. Only with `result: completed`; needs the
    `events.handoff` (or `events.publish`) scope; recipients are agents of the token's
    tenant.
    """
    reason: str | None = None
    """
    Why, on one line. Required with `result: quarantined`; with `failed` it is kept as the
    dead letter's reason; refused with `completed`.
    """
    result: Literal['completed', 'failed', 'quarantined'] | None = None
    """
    `completed` (default), `failed` (park the event as a dead letter for an operator) or
    `quarantined` (set it aside for a person, never retried: a payload that looks like a
    prompt injection, a bad signature; `reason` is then required).
    """


@dataclass(kw_only=True)
class AcknowledgeRequest:
    """
    `POST /v1/inbox/acknowledge`
    """

    acks: list[AckEntry]
    recipient_id: str | None = None
    session_id: str | None = None
    tenant_id: str | None = None


@dataclass(kw_only=True)
class AdminEventView(EventEnvelope):
    """
    An event as operators see it: the agent's envelope and what an operator needs beside it.
    """

    reason: str | None = None
    """
    Why it was last released, dead-lettered or quarantined, when a reason was given.
    """
    session_id: str | None = None
    """
    The session that holds (or last held) the event's lease, when the claim named one.
    """
    terminal_at_utc: str | None = None
    """
    When the event entered its terminal state (acked, dead letter, quarantined, expired).
    """


@dataclass(kw_only=True)
class AdminEventsResponse:
    """
    `GET /v1/admin/inboxes/{recipient_id}/events`: in `inbox_seq` order, oldest or newest
    first; page on with `after_seq` (oldest first) or `before_seq` (newest first) set to the
    last event's `inbox_seq`.
    """

    events: list[AdminEventView]


@dataclass(kw_only=True)
class AgentInboxEvent(EventEnvelope):
    """
    An event as seed 000's routes answer it: the canonical envelope with seed 000's names
    beside it, so clients written to either seed read it.
    """

    sequence_number: int
    """
    Seed 000's name for `inbox_seq`.
    """
    correlation_id: str | None = None
    """
    Seed 000's single correlation id: the most specific id of `correlation` (message,
    routing decision, memory update, assignment, meeting room, project, workspace,
    company), if any.
    """


@dataclass(kw_only=True)
class AgentInboxPage:
    """
    Seed 000's `GET /api/v1/agents/{agent_id}/inbox` answer.
    """

    events: list[AgentInboxEvent]
    has_more: bool
    head_seq: int
    next_cursor: int


@dataclass(kw_only=True)
class Claim:
    ack_state: Literal['available', 'claimed', 'acked', 'dead_letter', 'quarantined', 'expired']
    event: EventEnvelope
    event_id: str
    lease_token: str
    """
    Shown once: keep it to acknowledge, release or heartbeat this event.
    """
    visibility_lease_until_utc: str


@dataclass(kw_only=True)
class ClaimResponse:
    claims: list[Claim]
    rejected: list[RejectedEvent] | None = None
    """
    Named events that could not be claimed, each with its reason.
    """


@dataclass(kw_only=True)
class ParkedEventsResponse:
    """
    `GET /v1/admin/parked`.
    """

    events: list[AdminEventView]


@dataclass(kw_only=True)
class AdminEventDetail:
    """
    `GET /v1/admin/inboxes/{recipient_id}/events/{event_id}`.
    """

    archived: bool
    """
    The event has left the live table for the archive (retention): it is kept for the
    record and can no longer change.
    """
    event: AdminEventView
    history: list[HistoryEntryView]
    """
    Every recorded transition, oldest first (empty when the server records no history).
    """
