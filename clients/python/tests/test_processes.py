"""Agents as real processes: killed with SIGKILL and restarted (the handler runs once), and
two processes of one identity sharing the work (nothing handled twice)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from agent_inbox import LocalState
from conftest import Server, lines, unique, wait_until

WORKER = str(Path(__file__).with_name("worker.py"))


def spawn(server: Server, token: str, directory: Path, state: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, WORKER, "--base", server.base, "--token", token, "--state", str(state),
         "--dir", str(directory), *extra],
        stdout=subprocess.DEVNULL,
        stderr=open(directory / f"worker-{len(list(directory.glob('worker-*')))}.log", "wb"),
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def test_an_agent_killed_after_recording_acknowledges_the_redelivery_without_running_again(
    server: Server, tmp_path: Path
) -> None:
    agent = unique("killed")
    token = server.token(agent)
    (event_id,) = server.publish(agent)
    state_path = tmp_path / "state.db"
    first = spawn(server, token, tmp_path, state_path, "--wait-for-go")
    try:
        wait_until("the handler starts", 30, lambda: len(lines(tmp_path / "started")) == 1)
        # Freeze the service, let the handler finish: the agent records the result, then its
        # acknowledgement hangs. Kill the agent there.
        server.signal(signal.SIGSTOP)
        try:
            (tmp_path / "go").touch()
            state = LocalState(state_path)
            wait_until("the result is recorded", 30,
                       lambda: state.processed(f"pytest/{agent}", event_id) == "completed")
            state.close()
            first.kill()
            first.wait(timeout=10)
        finally:
            server.signal(signal.SIGCONT)
        assert server.events(token)[event_id].ack_state != "acked", "the acknowledgement never arrived"
        second = spawn(server, token, tmp_path, state_path)
        try:
            wait_until("the redelivered event is acknowledged", 30,
                       lambda: server.all_in_state(token, [event_id], "acked"))
            wait_until("the outcome is logged", 10, lambda: lines(tmp_path / "outcomes"))
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=15)
        assert [l.split()[0] for l in lines(tmp_path / "handled")] == [event_id], "the handler ran once"
        assert len(lines(tmp_path / "started")) == 1
        assert lines(tmp_path / "outcomes")[0].split()[1] == "deduplicated"
        assert server.events(token)[event_id].delivery_attempts == 2
    finally:
        stop(first)


def test_an_agent_killed_mid_handler_gets_the_event_again_after_its_lease(server: Server, tmp_path: Path) -> None:
    agent = unique("killed")
    token = server.token(agent)
    ids = server.publish(agent, 5)
    state_path = tmp_path / "state.db"
    first = spawn(server, token, tmp_path, state_path, "--handler-seconds", "0.3")
    try:
        wait_until("two events are handled", 30, lambda: len(lines(tmp_path / "handled")) >= 2)
        first.kill()
        first.wait(timeout=10)
    finally:
        stop(first)
    second = spawn(server, token, tmp_path, state_path, "--handler-seconds", "0.3")
    try:
        wait_until("all five are acknowledged", 60, lambda: server.all_in_state(token, ids, "acked"))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=15)
    finished = Counter(l.split()[0] for l in lines(tmp_path / "handled"))
    started = Counter(l.split()[0] for l in lines(tmp_path / "started"))
    assert set(finished) == set(ids)
    # Only an event cut off mid-handler runs again (at-least-once); a finished one never does.
    for event_id in ids:
        assert started[event_id] - finished[event_id] <= 1
    assert sum(1 for n in finished.values() if n > 1) <= 1


def test_two_processes_of_one_identity_share_the_work(server: Server, tmp_path: Path) -> None:
    agent = unique("shared")
    token = server.token(agent)
    workers = [
        spawn(server, token, tmp_path, tmp_path / f"state-{n}.db", "--handler-seconds", "0.05")
        for n in range(2)
    ]
    try:
        wait_until("both agents are connected", 30,
                   lambda: len({l.split()[2] for l in lines(tmp_path / "transport") if "True" in l}) == 2)
        ids = server.publish(agent, 40)
        wait_until("all 40 are acknowledged", 60, lambda: server.all_in_state(token, ids, "acked"))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=15)
    handled = [l.split() for l in lines(tmp_path / "handled")]
    assert sorted(event_id for event_id, _ in handled) == sorted(ids), "each event handled exactly once"
    by_process = Counter(pid for _, pid in handled)
    assert len(by_process) == 2, f"both processes took work: {by_process}"
