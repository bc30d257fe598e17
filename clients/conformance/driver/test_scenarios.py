"""Every scenario, every runner: the steps in order, then the checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from real_server import Server
from steps import Run

#: Keys of a step or check that are not arguments: which runners it applies to, and why not.
SELECTORS = ("do", "only", "except", "why")


def applies(entry: dict[str, Any], runner: str) -> bool:
    return runner in entry.get("only", [runner]) and runner not in entry.get("except", [])


def test_scenario(case: tuple[str, dict[str, Any], str, str], tmp_path: Path) -> None:
    name, scenario, runner, backend = case
    if reason := scenario.get("not_applicable", {}).get(runner):
        pytest.skip(f"{runner} cannot do {name} by design: {reason}")
    (tmp_path / "server").mkdir()
    server = Server(backend, tmp_path / "server", env={
        # The service's own defaults, where the SDK tests' server shortens them.
        "AGENT_INBOX_SCAVENGE_INTERVAL": "1s",
        **{k: str(v) for k, v in scenario.get("server_env", {}).items()},
    })
    run = Run(runner, scenario, server, tmp_path)
    try:
        for step in scenario.get("steps", []):
            if applies(step, runner):
                getattr(run, "step_" + step["do"])(**{k: v for k, v in step.items() if k not in SELECTORS})
        for check in scenario.get("checks", []):
            if applies(check, runner):
                run.step_expect(**{k: v for k, v in check.items() if k not in SELECTORS})
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{run.describe()}") from None
    finally:
        run.close()
        server.stop()
        server.db.drop()
