"""The published Claude Code CLI (`@anthropic-ai/claude-code`, the version pinned in
claude-code/package.json, installed by scripts/test-mcp.sh) accepts the configuration line the
README gives: `claude mcp add` writes it, `claude mcp get` reads it back, and `claude mcp list`,
which starts each configured server and connects to it, connects to `agent-inbox mcp
--claude-channel` logged in to a real service. All of it offline, with HOME a temporary
directory and no claude.ai login (which a channel session itself needs, so none runs here)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, REPO, clean_env, login

README = REPO / "README.md"
CLI_SECONDS = 60


def readme_line(prefix: str) -> list[str]:
    """The README's one `prefix` command line (it may give it more than once, the same each time)."""
    lines = {line.strip() for line in README.read_text().splitlines() if line.strip().startswith(prefix)}
    assert len(lines) == 1, f"README.md should give one `{prefix}` line, not {sorted(lines)}"
    return shlex.split(lines.pop())


def claude_cli() -> str:
    path = os.environ.get("CLAUDE_CODE_BIN")
    if not path or not Path(path).exists():
        pytest.skip(
            "the published @anthropic-ai/claude-code is not installed (scripts/test-mcp.sh installs it into "
            "target/claude-code with npm unless AGENT_INBOX_TEST_CLAUDE_CODE=0, or npm or the network is missing)"
        )
    return path


def test_claude_code_accepts_the_readmes_configuration(server, tmp_path, agent_id):
    cli = claude_cli()
    command = readme_line("claude mcp add ")
    assert command[-3:] == ["agent-inbox", "mcp", "--claude-channel"], command
    bin_dir, project, claude_home, inbox_home = (tmp_path / name for name in ("bin", "project", "claude", "inbox"))
    for directory in (bin_dir, project, claude_home, inbox_home):
        directory.mkdir()
    (bin_dir / "agent-inbox").symlink_to(BIN)  # on the PATH, as `cargo install` puts it
    login(server, inbox_home, agent_id)
    env = clean_env(inbox_home, HOME=str(claude_home), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")

    def claude(*args: str) -> str:
        done = subprocess.run([cli, *args], cwd=project, env=env, capture_output=True, text=True,
                              timeout=CLI_SECONDS, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"claude {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    version = claude("--version")
    added = claude(*command[1:])
    assert "agent-inbox" in added, added
    config = json.loads((claude_home / ".claude.json").read_text())["mcpServers"]["agent-inbox"]
    assert (config["type"], config["command"], config["args"]) == ("stdio", "agent-inbox", ["mcp", "--claude-channel"])
    got = claude("mcp", "get", "agent-inbox")
    assert "Command: agent-inbox" in got and "Args: mcp --claude-channel" in got, got
    listed = claude("mcp", "list")
    # Its health check starts the server and connects to it (a check mark, then Connected).
    assert re.search(r"^agent-inbox: agent-inbox mcp --claude-channel - \S+ Connected$", listed, re.M), f"{version}: {listed}"
