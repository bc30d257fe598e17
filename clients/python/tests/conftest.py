"""The real `agent-inbox serve`, one per backend (SQLite, MariaDB) for the session, and the
helpers tests share (from real_server.py): tokens from `token issue`, publishing, reading an
inbox, waiting on a condition with a deadline. Tests keep apart by using their own agent ids (and
tenants for tenant-wide policies)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from real_server import REPO, Database, Server, binary, free_port, mysql_base_url, unique, wait_until

__all__ = ["REPO", "Database", "Server", "binary", "free_port", "lines", "mysql_base_url", "unique", "wait_until"]

BACKENDS = ["sqlite", "mariadb"]


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp(f"server-{request.param}")
    started = Server(request.param, directory)
    try:
        yield started
    finally:
        started.stop()
        started.db.drop()


def lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []
