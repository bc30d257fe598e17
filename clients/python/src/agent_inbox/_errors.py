"""The SDK's exceptions, named in the agent's terms, and which of them are worth retrying."""

from __future__ import annotations

import email.utils
import re
import time
from typing import Any


class InboxError(Exception):
    """Base of every error this package raises."""

    @property
    def transient(self) -> bool:
        """Whether repeating the same request later may succeed."""
        return False


class Unreachable(InboxError):
    """The service could not be reached, or the connection broke before an answer."""

    @property
    def transient(self) -> bool:
        return True


class ProtocolError(InboxError):
    """The service answered with something that is not the expected JSON."""

    @property
    def transient(self) -> bool:
        return True


class ProblemError(InboxError):
    """The service answered with an RFC 9457 problem document (``application/problem+json``).

    ``code`` is the stable machine-readable code (``cursor_reset_required``, ``lease_mismatch``,
    ...); ``retry_after`` is in seconds when the answer carried ``Retry-After``.
    """

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        title: str = "",
        retry_after: float | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"the service refused the request: {status} {code} ({detail})")
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title
        self.retry_after = retry_after
        self.extensions: dict[str, Any] = extensions or {}

    @property
    def transient(self) -> bool:
        return self.status >= 500 or self.status in (408, 429)

    @property
    def lease_lost(self) -> bool:
        """The lease this request used no longer holds the event."""
        return self.code in ("lease_mismatch", "lease_expired", "event_terminal", "already_acked")


class CredentialsError(InboxError):
    """No usable credentials: the refresh token was spent or revoked, or none is stored."""


class LocalStateError(InboxError):
    """The local state file (cursor and processed events) failed."""


class ConfigError(InboxError, ValueError):
    """A configuration or argument that cannot work."""


class ResyncFailed(InboxError):
    """The resync callback failed permanently after a cursor reset; the agent stops rather
    than skip data silently."""


class SessionSuperseded(InboxError):
    """The tenant allows one active session per agent and a newer session of this agent took
    over. Running handlers were let finish; the agent stopped."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id} was superseded: another process or device started as this agent, "
            "and the tenant allows one active session per agent"
        )
        self.session_id = session_id


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as whole seconds from ``now`` (RFC 9110 §10.2.3): delay-seconds, or an
    HTTP date in the IMF-fixdate form servers send, a fraction rounded up (never sooner than
    asked) and a past date as 0; anything else (a negative or fractional number, another date
    format) is no answer."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    if not _IMF_FIXDATE.fullmatch(value):
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    ahead_ms = round(when.timestamp() * 1000) - round((time.time() if now is None else now) * 1000)
    return float(max(0, -(-ahead_ms // 1000)))


_IMF_FIXDATE = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
    r"\d{2}:\d{2}:\d{2} GMT",
    re.ASCII,
)
