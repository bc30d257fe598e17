"""The wire types of the agent-facing API, with the service's field names (openapi.json).

Requests leave optional fields at ``None`` (left out of the body); answers ignore fields this
version does not know. Sequence numbers are ``int``; times are RFC 3339 strings as sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Correlation:
    """Ids of the domain objects an event concerns."""

    company_id: str | None = None
    workspace_id: str | None = None
    project_id: str | None = None
    meeting_room_id: str | None = None
    message_id: str | None = None
    routing_decision_id: str | None = None
    memory_update_id: str | None = None
    assignment_id: str | None = None


@dataclass
class PayloadRef:
    """Where an event's data lives when it is not inline."""

    kind: str
    id: str


@dataclass
class EventEnvelope:
    """An event as agents see it."""

    event_id: str
    tenant_id: str
    recipient_kind: str
    recipient_id: str
    inbox_seq: int
    event_type: str
    priority: str
    availability_at_utc: str
    ack_state: str
    delivery_attempts: int
    dead_letter_state: str
    created_at_utc: str
    correlation: Correlation = field(default_factory=Correlation)
    expires_at_utc: str | None = None
    deduplication_key: str | None = None
    visibility_lease_until_utc: str | None = None
    next_retry_at_utc: str | None = None
    payload: Any = None
    payload_ref: PayloadRef | None = None


@dataclass
class RecipientView:
    tenant_id: str
    recipient_kind: str
    recipient_id: str


@dataclass
class SubscribeRequest:
    device_id: str | None = None
    supported_transports: list[str] | None = None
    last_seen_seq: int | None = None
    wants_claims: bool | None = None


@dataclass
class SubscribeResponse:
    session_id: str
    recipient: RecipientView
    current_head_seq: int
    recommended_transport: str
    poll_after_cursor_url: str
    heartbeat_interval_seconds: int
    lease_default_seconds: int
    retention_days: int
    sse_url: str | None = None
    websocket_url: str | None = None


@dataclass
class SessionHeartbeatRequest:
    last_seen_seq: int | None = None


@dataclass
class SessionHeartbeatResponse:
    session_id: str
    status: str
    heartbeat_interval_seconds: int
    gone_after_utc: str


@dataclass
class PollRequest:
    """Events after ``after_seq``; ``wait_seconds`` makes it a long poll."""

    after_seq: int = 0
    limit: int | None = None
    wait_seconds: int | None = None
    include_claimable_only: bool | None = None


@dataclass
class PollResponse:
    head_seq: int
    events: list[EventEnvelope]
    next_cursor: int
    more_available: bool
    #: A long poll ended because events behind the cursor went back to the inbox: claim.
    nudged: bool = False


@dataclass
class HeadResponse:
    tenant_id: str
    recipient_kind: str
    recipient_id: str
    head_seq: int
    oldest_available_seq: int
    #: The answer's ``ETag``: pass it to ``head_if_changed`` to get ``None`` while nothing moved.
    etag: str | None = field(default=None, metadata={"wire": False})


@dataclass
class ClaimRequest:
    """Name ``event_ids`` to claim those, or leave them out to claim the next ``limit``."""

    session_id: str | None = None
    event_ids: list[str] | None = None
    limit: int | None = None
    lease_seconds: int | None = None


@dataclass
class Claim:
    event_id: str
    lease_token: str
    visibility_lease_until_utc: str
    ack_state: str
    event: EventEnvelope


@dataclass
class ItemError:
    code: str
    detail: str


@dataclass
class RejectedEvent:
    event_id: str
    error: ItemError


@dataclass
class ClaimResponse:
    claims: list[Claim]
    rejected: list[RejectedEvent] = field(default_factory=list)


@dataclass
class AckEntry:
    event_id: str
    lease_token: str
    #: ``completed`` (default), ``failed`` (parks the event as a dead letter) or
    #: ``quarantined`` (sets it aside for a person; ``reason`` required).
    result: str | None = None
    #: With ``quarantined``: why, 1 to 200 bytes without control characters.
    reason: str | None = None
    #: With ``quarantined``: one of ``QUARANTINE_CLASSES`` (default ``other``); ``class`` on the wire.
    class_: str | None = field(default=None, metadata={"name": "class"})
    #: A hand-off: publishes committed with this acknowledgement, only while its lease holds
    #: (``completed`` only; deduplicated by the acknowledged event).
    follow_ups: list[PublishRequest] | None = None


@dataclass
class AcknowledgeRequest:
    acks: list[AckEntry]
    session_id: str | None = None


@dataclass
class AckOutcome:
    event_id: str
    ack_state: str | None = None
    error: ItemError | None = None
    #: A hand-off's publishes, one per follow-up.
    follow_ups: list[PublishResponse] | None = None


@dataclass
class AcknowledgeResponse:
    results: list[AckOutcome]


@dataclass
class ReleaseRequest:
    event_id: str
    lease_token: str
    retry_after_seconds: int = 0
    reason: str | None = None


@dataclass
class ReleaseResponse:
    event_id: str
    ack_state: str
    next_retry_at_utc: str | None = None


@dataclass
class HeartbeatEntry:
    event_id: str
    lease_token: str
    extend_by_seconds: int


@dataclass
class HeartbeatRequest:
    leases: list[HeartbeatEntry]
    session_id: str | None = None


@dataclass
class HeartbeatOutcome:
    event_id: str
    visibility_lease_until_utc: str | None = None
    error: ItemError | None = None


@dataclass
class HeartbeatResponse:
    leases: list[HeartbeatOutcome]


@dataclass
class ResyncResponse:
    """What to rebuild from after ``cursor_reset_required``."""

    head_seq: int
    oldest_available_seq: int
    resume_after_seq: int
    open_events: list[EventEnvelope]
    more_available: bool


@dataclass
class StreamTicketRequest:
    session_id: str | None = None
    ttl_seconds: int | None = None


@dataclass
class StreamTicketResponse:
    ticket: str
    expires_at_utc: str
    expires_in: int
    sse_url: str
    websocket_url: str


@dataclass
class RefreshRequest:
    refresh_token: str


@dataclass
class TokenResponse:
    access_token: str
    token_type: str
    expires_in: int
    scope: str
    refresh_token: str | None = None
    refresh_expires_in: int | None = None


@dataclass
class PublishRequest:
    recipients: list[str]
    event_type: str
    priority: str | None = None
    available_at_utc: str | None = None
    expires_at_utc: str | None = None
    deduplication_key: str | None = None
    #: The source this event is fair to, under the tenant's fair claims (default: the publisher).
    fairness_key: str | None = None
    correlation: Correlation | None = None
    payload: Any = None
    payload_ref: PayloadRef | None = None
    max_attempts: int | None = None


@dataclass
class DeliveryView:
    recipient_kind: str
    recipient_id: str
    event_id: str
    inbox_seq: int
    deduplicated: bool


@dataclass
class PublishResponse:
    deliveries: list[DeliveryView]


@dataclass
class AgentKeyRequest:
    #: ``ed25519`` (send ``public_key``) or ``hmac-sha256`` (the service returns ``secret``).
    algorithm: str
    public_key: str | None = None
    key_id: str | None = None


@dataclass
class AgentKeyResponse:
    key_id: str
    agent_id: str
    algorithm: str
    created_at_utc: str
    retires_at_utc: str | None = None
    public_key: str | None = None
    secret: str | None = None


@dataclass
class AgentKeysResponse:
    keys: list[AgentKeyResponse]
    signatures_required: bool = False


@dataclass
class TenantPolicyRequest:
    signatures_required: bool | None = None
    single_active_session: bool | None = None
    fair_claims: bool | None = None
    #: Quotas (0: no limit): events not yet acknowledged, and the inline payload bytes they hold.
    pending_events_max: int | None = None
    stored_bytes_max: int | None = None


@dataclass
class TenantPolicyResponse:
    tenant_id: str
    signatures_required: bool
    single_active_session: bool
    fair_claims: bool
    pending_events_max: int
    stored_bytes_max: int
