"""Access tokens for requests: a fixed one, or short-lived ones bought with a rotating refresh
token. Each refresh token works once, so the new one is made durable *before* the new access
token is used, and refreshes are serialized across threads and processes sharing a store
(two spending the same refresh token would make the service revoke the whole family)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Protocol

from ._errors import CredentialsError
from ._models import TokenResponse
from ._schedule import refresh_due


class TokenStore(Protocol):
    """Where the current refresh token lives between refreshes."""

    def load(self) -> str | None: ...

    def save(self, refresh_token: str) -> None: ...

    def try_lock(self) -> bool:
        """Takes the cross-process refresh lock without blocking; ``False`` when held."""
        ...

    def unlock(self) -> None: ...


class MemoryTokenStore:
    """A refresh token kept in this process only (tests, short-lived tools)."""

    def __init__(self, refresh_token: str) -> None:
        self._token: str | None = refresh_token
        self._lock = threading.Lock()

    def load(self) -> str | None:
        return self._token

    def save(self, refresh_token: str) -> None:
        self._token = refresh_token

    def try_lock(self) -> bool:
        return self._lock.acquire(blocking=False)

    def unlock(self) -> None:
        self._lock.release()


class FileTokenStore:
    """A refresh token in a 0600 file, replaced atomically; ``<path>.lock`` (``flock``)
    serializes refreshes of processes sharing it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    def load(self) -> str | None:
        try:
            return self.path.read_text().strip() or None
        except FileNotFoundError:
            return None

    def save(self, refresh_token: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, refresh_token.encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)

    def try_lock(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None


class Credentials:
    """A fixed access token, or refreshing ones. Shared by a client's calls; ``repr`` hides
    every token."""

    def __init__(self, access_token: str | None, store: TokenStore | None) -> None:
        self._fixed = access_token
        self._store = store
        self._current: tuple[str, float, float] | None = None  # token, obtained, lifetime
        self._thread_lock = threading.Lock()

    @classmethod
    def access_token(cls, token: str) -> Credentials:
        """Never refreshed: the agent stops when it expires."""
        return cls(token, None)

    @classmethod
    def refreshing(cls, store: TokenStore | str) -> Credentials:
        """Access tokens bought with the refresh token in ``store`` (or a refresh token kept in
        memory), rotated on every refresh."""
        return cls(None, MemoryTokenStore(store) if isinstance(store, str) else store)

    @property
    def refreshes(self) -> bool:
        return self._store is not None

    def __repr__(self) -> str:
        return "Credentials(<refreshing>)" if self._store else "Credentials(<access token>)"

    def cached(self) -> str | None:
        """The token for the next request, unless a refresh is due first."""
        if self._fixed is not None:
            return self._fixed
        current = self._current
        if current and not refresh_due(time.monotonic() - current[1], current[2]):
            return current[0]
        return None

    def try_lock(self) -> bool:
        if not self._thread_lock.acquire(blocking=False):
            return False
        assert self._store is not None
        if self._store.try_lock():
            return True
        self._thread_lock.release()
        return False

    def unlock(self) -> None:
        assert self._store is not None
        self._store.unlock()
        self._thread_lock.release()

    def refresh_token(self) -> str:
        """The stored refresh token; read under the lock (another process may have rotated it)."""
        assert self._store is not None
        token = self._store.load()
        if not token:
            raise CredentialsError("no refresh token is stored; log in again with a new one")
        return token

    def accept(self, tokens: TokenResponse, obtained: float) -> str:
        """Stores the rotated refresh token, then adopts the new access token."""
        assert self._store is not None
        if not tokens.refresh_token:
            raise CredentialsError("the refresh answer carried no new refresh token")
        self._store.save(tokens.refresh_token)
        self._current = (tokens.access_token, obtained, float(tokens.expires_in))
        return tokens.access_token

    def invalidate(self, used: str) -> bool:
        """The service refused ``used``: forget it. Whether a retry can help."""
        if self._store is None:
            return False
        if self._current and self._current[0] == used:
            self._current = None
        return True
