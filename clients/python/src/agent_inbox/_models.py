"""The wire types of the agent-facing API, with the service's field names (openapi.json).

They are generated from that document into ``_openapi.py`` (``scripts/generate-wire-types.sh``,
whose ``--check`` the tests run, so the committed file is always what the document gives);
this module names the ones the SDK uses and adds what a schema cannot say: the answer's
``ETag`` on ``HeadResponse``.

Every field is a keyword argument (the generator orders fields by the schema, not by meaning).
Requests leave optional fields at ``None`` (left out of the body); answers ignore fields this
version does not know. ``Literal`` fields name the values the service sends today; a value it
adds later is still decoded as it came. A field named like a Python keyword has a trailing
underscore (``AckEntry.class_`` is ``class`` on the wire). Sequence numbers are ``int``; times
are RFC 3339 strings as sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from . import _openapi
from ._openapi import (
    AckEntry,
    AcknowledgeRequest,
    AcknowledgeResponse,
    AckOutcome,
    AgentKeyRequest,
    AgentKeyResponse,
    AgentKeysResponse,
    Claim,
    ClaimRequest,
    ClaimResponse,
    Correlation,
    DeliveryView,
    EventEnvelope,
    HeartbeatEntry,
    HeartbeatOutcome,
    HeartbeatRequest,
    HeartbeatResponse,
    ItemError,
    PayloadRef,
    PollRequest,
    PollResponse,
    PublishRequest,
    PublishResponse,
    RecipientView,
    RefreshRequest,
    RejectedEvent,
    ReleaseRequest,
    ReleaseResponse,
    ResyncResponse,
    SessionHeartbeatRequest,
    SessionHeartbeatResponse,
    StreamTicketRequest,
    StreamTicketResponse,
    SubscribeRequest,
    SubscribeResponse,
    TenantPolicyRequest,
    TenantPolicyResponse,
    TokenResponse,
)

__all__ = [
    "AckEntry", "AcknowledgeRequest", "AcknowledgeResponse", "AckOutcome", "AgentKeyRequest", "AgentKeyResponse",
    "AgentKeysResponse", "Claim", "ClaimRequest", "ClaimResponse", "Correlation", "DeliveryView", "EventEnvelope",
    "HeadResponse", "HeartbeatEntry", "HeartbeatOutcome", "HeartbeatRequest", "HeartbeatResponse", "ItemError",
    "PayloadRef", "PollRequest", "PollResponse", "PublishRequest", "PublishResponse", "RecipientView",
    "RefreshRequest", "RejectedEvent", "ReleaseRequest", "ReleaseResponse", "ResyncResponse",
    "SessionHeartbeatRequest", "SessionHeartbeatResponse", "StreamTicketRequest", "StreamTicketResponse",
    "SubscribeRequest", "SubscribeResponse", "TenantPolicyRequest", "TenantPolicyResponse", "TokenResponse",
    "QuarantineClass",
]

#: ``AckEntry.class_``'s values, named for the SDK's signatures (a test checks they are the
#: generated field's): why an event was set aside, the label operators see.
QuarantineClass: TypeAlias = Literal["prompt_injection", "malformed_payload", "bad_signature", "policy", "other"]


@dataclass(kw_only=True)
class HeadResponse(_openapi.HeadResponse):
    #: The answer's ``ETag`` (a header, not a field): pass it to ``head_if_changed`` to get
    #: ``None`` while nothing moved.
    etag: str | None = field(default=None, metadata={"wire": False})
