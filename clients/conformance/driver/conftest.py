"""Collects the scenarios (../scenarios/*.toml) and runs each with every runner on every backend
it names: one test per (scenario, runner, backend)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
# The real server and the fault proxy are the Python SDK's test helpers.
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))
sys.path.insert(0, str(HERE))

from runners import RUNNERS  # noqa: E402

SCENARIOS = HERE.parent / "scenarios"


def scenarios() -> list[tuple[str, dict[str, Any]]]:
    return [(path.stem, tomllib.loads(path.read_text())) for path in sorted(SCENARIOS.glob("*.toml"))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    cases = []
    for name, scenario in scenarios():
        for backend in scenario.get("backends", ["sqlite"]):
            for runner in RUNNERS:
                cases.append(pytest.param((name, scenario, runner, backend), id=f"{name}-{runner}-{backend}"))
    metafunc.parametrize("case", cases)
