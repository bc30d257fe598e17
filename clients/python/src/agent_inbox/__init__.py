"""agent-inbox for Python: typed calls to the agent-facing API (``Client``, ``AsyncClient``)
and an ``Agent`` runner that hears about work over SSE, long polls or adaptive polling, keeps
its cursor and processed events in a local SQLite file, heartbeats leases while handlers run,
and acknowledges, releases (``Retry``), dead-letters (``Fatal``) or quarantines
(``QuarantineError``) each event. ``wait_for_work`` blocks until work waits, asking the local
wake daemon (``agent-inbox daemon``) first."""

from ._agent import (
    Agent,
    AgentConfig,
    Event,
    Fatal,
    Handler,
    Outcome,
    Progress,
    ResyncCallback,
    Retry,
    RunSummary,
)
from ._contract import QUARANTINE_CLASSES, HandOff, QuarantineError, quarantine_reason
from ._async_client import AsyncClient
from ._client import Client
from ._core import RetryPolicy
from ._credentials import Credentials, FileTokenStore, MemoryTokenStore, TokenStore
from ._errors import (
    ConfigError,
    CredentialsError,
    InboxError,
    LocalStateError,
    ProblemError,
    ProtocolError,
    ResyncFailed,
    SessionSuperseded,
    Unreachable,
)
from ._local_daemon import (
    DaemonIdentity,
    DaemonUnavailable,
    LocalDaemon,
    wait_for_work,
    wait_for_work_async,
)
from ._local_state import LocalState
from ._models import (
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
    HeadResponse,
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
from ._schedule import OUTAGE_BACKOFF, Backoff, PollSchedule, TransportPolicy
from ._signing import SigningKey
from ._sse import SseEvent
from ._transport import TransportConfig, TransportStatus

__version__ = "0.1.0"

__all__ = [
    "AckEntry", "AckOutcome", "AcknowledgeRequest", "AcknowledgeResponse", "Agent", "AgentConfig",
    "AgentKeyRequest", "AgentKeyResponse", "AgentKeysResponse", "AsyncClient", "Backoff", "Claim",
    "ClaimRequest", "ClaimResponse", "Client", "ConfigError", "Correlation", "Credentials",
    "CredentialsError", "DaemonIdentity", "DaemonUnavailable", "DeliveryView", "Event",
    "EventEnvelope", "Fatal", "FileTokenStore", "HandOff",
    "Handler", "HeadResponse", "HeartbeatEntry", "HeartbeatOutcome", "HeartbeatRequest",
    "HeartbeatResponse", "InboxError", "ItemError", "LocalDaemon", "LocalState", "LocalStateError",
    "MemoryTokenStore", "OUTAGE_BACKOFF", "Outcome", "PayloadRef", "PollRequest", "PollResponse", "PollSchedule",
    "ProblemError", "Progress", "ProtocolError", "QUARANTINE_CLASSES", "QuarantineError", "PublishRequest", "PublishResponse",
    "RecipientView", "RejectedEvent", "ReleaseRequest", "ReleaseResponse", "ResyncCallback",
    "quarantine_reason", "ResyncFailed", "ResyncResponse", "Retry", "RetryPolicy", "RunSummary", "SessionHeartbeatRequest",
    "SessionHeartbeatResponse", "SessionSuperseded", "SigningKey", "SseEvent", "StreamTicketRequest",
    "StreamTicketResponse", "SubscribeRequest", "SubscribeResponse", "TenantPolicyRequest",
    "TenantPolicyResponse", "TokenResponse", "TokenStore", "TransportConfig", "TransportPolicy",
    "TransportStatus", "Unreachable", "__version__", "wait_for_work", "wait_for_work_async",
]
