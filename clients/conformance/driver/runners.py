"""The runners under test, and one of them running: a conformance agent (see ../README.md) as a
child process that leads a session of its own, so that it (and for `listen`, the command it runs)
can be killed as a whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
AGENTS = REPO / "clients" / "conformance" / "agents"


def command(runner: str) -> list[str]:
    """How to start `runner`'s conformance agent."""
    if runner == "rust":
        return [str(REPO / "target" / "debug" / "examples" / "conformance_agent")]
    if runner == "listen":
        return ["bash", str(AGENTS / "listen_agent.sh")]
    if runner == "node":
        return ["node", str(AGENTS / "node_agent.mjs")]
    if runner == "python":
        # The driver runs in the virtualenv that holds the Python SDK.
        return [sys.executable, str(AGENTS / "python_agent.py")]
    raise ValueError(f"no runner {runner!r}")


RUNNERS = ["rust", "listen", "node", "python"]


class AgentProcess:
    """One runner's agent, restarted when it dies of SIGKILL if asked (a crash the scenario
    causes is followed by a restart, as a process supervisor would)."""

    def __init__(self, runner: str, env: dict[str, str], stderr: Path, restart_on_kill: bool) -> None:
        self.runner = runner
        self.env = env
        self.stderr_path = stderr
        self.restart_on_kill = restart_on_kill
        #: Times this agent died of SIGKILL.
        self.kills = 0
        self._lock = threading.Lock()
        self._stopping = False
        self.process = self._spawn()
        if restart_on_kill:
            threading.Thread(target=self._supervise, daemon=True).start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.stderr_path, "ab") as stderr:
            return subprocess.Popen(
                command(self.runner), env={**os.environ, **self.env}, stdin=subprocess.DEVNULL,
                stdout=stderr, stderr=stderr, start_new_session=True,
            )

    def _supervise(self) -> None:
        while True:
            process = self.process
            code = process.wait()
            with self._lock:
                if self._stopping or code != -signal.SIGKILL:
                    return
                self.kills += 1
                self.process = self._spawn()

    def kill(self) -> None:
        """SIGKILL the agent's whole process group (the supervisor, if any, restarts it)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        """The documented stop: SIGTERM to the runner itself."""
        with self._lock:
            self._stopping = True
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        with self._lock:
            self._stopping = True
        self.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""
