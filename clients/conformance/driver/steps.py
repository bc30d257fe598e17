"""What a scenario's steps and checks mean, once for every runner.

A scenario (../scenarios/*.toml) names its events (each with a handler script), then lists
`[[steps]]` the driver takes in order and `[[checks]]` that must hold at the end. Each `do` of a
step is a `step_*` method of `Run` and each `check` a `check_*` method; their docstrings are the
reference. Times in the log are Unix milliseconds; the driver's marks are taken on the same
clock. Where a step or check names a route, it is one of `sse` (an SSE or WebSocket stream),
`long-poll` (the transport's polls: `poll-after-cursor` with a wait, or its one-event probes),
`scan` (`poll-after-cursor` without a wait), or a method and path (`POST /v1/inbox/acknowledge`).
"""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proxy import Proxy
from real_server import Server, wait_until
from runners import AgentProcess

AGENT = "conformance_agent"
TENANT = "pytest"


def route_matches(route: str, request: bytes) -> bool:
    """Whether a whole request (head and body) is on `route`."""
    head, _, body = request.partition(b"\r\n\r\n")
    return line_matches(route, head.partition(b"\r\n")[0], body)


def line_matches(route: str, line: bytes, body: bytes) -> bool:
    """Whether a request, by its request line and body, is on `route`."""
    if route == "sse":
        return line.startswith((b"GET /v1/streams/sse", b"GET /v1/streams/ws"))
    if route in ("long-poll", "scan"):
        if b"/v1/inbox/poll-after-cursor" not in line:
            return False
        try:
            fields = json.loads(body or b"{}")
        except ValueError:
            fields = {}
        transport = bool(fields.get("wait_seconds")) or fields.get("limit") == 1 or b"wait_seconds=" in line
        return transport == (route == "long-poll")
    return line.startswith(route.encode() + b" ") or line.startswith(route.encode() + b"?")


@dataclass
class Run:
    """One scenario run by one runner on one backend."""

    runner: str
    scenario: dict[str, Any]
    server: Server
    directory: Path
    proxy: Proxy = field(init=False)
    agent: AgentProcess | None = None
    agents: list[AgentProcess] = field(default_factory=list)
    #: Event name → event id.
    ids: dict[str, str] = field(default_factory=dict)
    #: Mark name → Unix milliseconds.
    marks: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None

    def __post_init__(self) -> None:
        self.proxy = Proxy(self.server.port)
        self.log_path = self.directory / "events.log"
        self.token = self.server.token(AGENT, tenant=TENANT)
        self.admin = self.server.token("conformance_operator", tenant=TENANT, kind="admin")
        self.scripts = {e["name"]: e.get("script", []) for e in self.scenario.get("events", [])}
        if policy := self.scenario.get("tenant_policy"):
            self._admin_post("/v1/admin/tenant-policy", policy)

    # -- what the driver reads ---------------------------------------------------------------

    def log(self) -> list[dict[str, Any]]:
        try:
            text = self.log_path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def lines(self, what: str, name: str | None = None) -> list[dict[str, Any]]:
        event = self.ids[name] if name is not None else None
        return [e for e in self.log() if e["what"] == what and (event is None or e.get("event") == event)]

    def time_of(self, point: str) -> float:
        """`mark:NAME`, or `start:EVENT:ATTEMPT` / `end:EVENT:ATTEMPT` (attempts from 0)."""
        kind, _, rest = point.partition(":")
        if kind == "mark":
            return self.marks[rest]
        name, _, attempt = rest.rpartition(":")
        found = self.lines(kind, name)
        assert len(found) > int(attempt), f"no {kind} of {name} attempt {attempt} in the log: {found}"
        return float(found[int(attempt)]["t"])

    def event(self, name: str) -> dict[str, Any]:
        """The event as an operator sees it (the admin API): its fields and `history`."""
        answer = httpx.get(f"{self.server.base}/v1/admin/inboxes/{AGENT}/events/{self.ids[name]}",
                           headers={"authorization": f"Bearer {self.admin}"}, timeout=10)
        assert answer.status_code == 200, answer.text
        detail: dict[str, Any] = answer.json()
        return {**detail["event"], "history": detail["history"]}

    def in_state(self, names: list[str], state: str) -> bool:
        return self.server.all_in_state(self.token, [self.ids[n] for n in names], state)

    def requests(self, route: str | list[str], verdict: str | None = None, since: float = 0.0) -> int:
        """Requests the proxy saw on `route` (or any of several) with `verdict` since a Unix-ms
        time."""
        routes = [route] if isinstance(route, str) else route
        offset = time.time() - time.monotonic()
        return sum(1 for t, line, seen, body in list(self.proxy.log)
                   if (t + offset) * 1000 >= since and (verdict is None or seen == verdict)
                   and any(line_matches(r, line.encode("latin-1"), body) for r in routes))

    def _post(self, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request straight to the service (not through the proxy) that must succeed."""
        answer = httpx.post(self.server.base + path, json=body, headers={"authorization": f"Bearer {token}"},
                            timeout=10)
        assert answer.status_code == 200, f"{path}: {answer.status_code} {answer.text}"
        result: dict[str, Any] = answer.json()
        return result

    def _admin_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._post(self.admin, path, body)

    def _agent_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._post(self.token, path, body)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self.proxy.close()

    def describe(self) -> str:
        """What a failure report shows: the agent's stderr and the log."""
        stderr = "\n".join(f"--- {a.runner} agent stderr ---\n{a.stderr()}" for a in self.agents)
        offset = time.time() - time.monotonic()
        requests = "\n".join(f"{(t + offset) * 1000:.0f} {verdict} {line} {body[:120]!r}"
                             for t, line, verdict, body in list(self.proxy.log)[-40:])
        return (f"{stderr}\n--- event log ---\n" + "\n".join(json.dumps(e) for e in self.log()[-60:])
                + f"\n--- the proxy's last requests ---\n{requests}")

    # -- steps ---------------------------------------------------------------------------------

    def step_start_agent(self, env: dict[str, str] | None = None, restart_on_kill: bool = False) -> None:
        """Starts the runner's agent (with extra environment), waiting for its `ready` line. With
        `restart_on_kill`, an agent that dies of SIGKILL is started again at once."""
        merged = {
            "CONFORMANCE_BASE": self.proxy.base,
            "CONFORMANCE_TOKEN": self.token,
            "CONFORMANCE_STATE": str(self.directory / "state"),
            "CONFORMANCE_LOG": str(self.log_path),
            **{k: str(v) for k, v in self.scenario.get("agent_env", {}).items()},
            **{k: str(v) for k, v in (env or {}).items()},
        }
        ready = len(self.lines("ready"))
        self.agent = AgentProcess(self.runner, merged, self.directory / f"agent-{len(self.agents)}.stderr",
                                  restart_on_kill)
        self.agents.append(self.agent)
        wait_until("the agent's ready line", 60, lambda: len(self.lines("ready")) > ready or self.agent_exited())

    def agent_exited(self) -> bool:
        assert self.agent is not None
        code = self.agent.process.poll()
        if code is not None and code != -signal.SIGKILL:
            raise AssertionError(f"the agent exited with {code}")
        return False

    def step_wait_connected(self, route: str = "sse", timeout: float = 30) -> None:
        """Waits until the proxy has forwarded a request on `route` since the agent started."""
        since = self.lines("ready")[-1]["t"]
        wait_until(f"the agent's {route} request", timeout, lambda: self.requests(route, "forwarded", since) > 0)

    def step_publish(self, events: list[str]) -> None:
        for name in events:
            payload = {"name": name, "conformance": self.scripts[name]}
            (self.ids[name],) = self.server.publish(AGENT, payload=payload)

    def step_publish_every(self, events: list[str], every: float) -> None:
        """Publishes the events one by one, `every` seconds apart (each a hint to the agent)."""
        started = time.monotonic()
        for n, name in enumerate(events):
            time.sleep(max(started + n * every - time.monotonic(), 0.0))
            self.step_publish([name])

    def step_wait_state(self, events: list[str], state: str, timeout: float = 30) -> None:
        """Waits until every named event is in `state` (acked, dead_letter, quarantined, ...)."""
        wait_until(f"{events} {state}", timeout, lambda: self.in_state(events, state))

    def step_wait_log(self, what: str, event: str | None = None, count: int = 1, timeout: float = 30) -> None:
        """Waits until the log holds `count` lines of `what` (for `event`)."""
        wait_until(f"{count} {what} line(s) for {event}", timeout, lambda: len(self.lines(what, event)) >= count)

    def step_wait_requests(self, route: str, verdict: str, count: int = 1, timeout: float = 30) -> None:
        """Waits until the proxy has `count` requests on `route` with `verdict` since the last mark."""
        since = max(self.marks.values(), default=0.0)
        wait_until(f"{count} {verdict} {route} request(s)", timeout,
                   lambda: self.requests(route, verdict, since) >= count)

    def step_sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def step_mark(self, name: str) -> None:
        self.marks[name] = time.time() * 1000

    def step_proxy(self, refuse: list[str] | None = None, fail: list[str] | None = None, status: int = 503,
                   seconds: float | None = None) -> None:
        """Makes the proxy refuse (close the connection at the request, so it never reaches the
        service) or fail (answer `status` itself) every request on the routes, for `seconds`
        or until `proxy_clear`."""
        until = time.monotonic() + seconds if seconds is not None else math.inf

        def hit(routes: list[str] | None) -> Any:
            return lambda request: time.monotonic() < until and any(route_matches(r, request) for r in routes or [])

        if refuse:
            self.proxy.refuse = hit(refuse)
        if fail:
            matched = hit(fail)
            self.proxy.fail = lambda request: status if matched(request) else None

    def step_proxy_clear(self) -> None:
        self.proxy.refuse = None
        self.proxy.fail = None
        self.proxy.delay = None

    def step_proxy_cut(self) -> None:
        """Cuts every open connection (streams, long polls, idle keep-alives)."""
        self.proxy.cut_all()

    def step_kill_agent(self) -> None:
        assert self.agent is not None
        self.agent.kill()
        self.agent.wait(10)

    def step_stop_agent(self, timeout: float = 60) -> None:
        """SIGTERM, the documented stop; waits for the exit and keeps its code."""
        assert self.agent is not None
        self.agent.terminate()
        self.exit_code = self.agent.wait(timeout)
        self.step_mark("agent_exited")

    def step_wait_exit(self, timeout: float = 60) -> None:
        """Waits for the agent to exit on its own; keeps its code."""
        assert self.agent is not None
        self.exit_code = self.agent.wait(timeout)
        self.step_mark("agent_exited")

    def step_stop_server(self) -> None:
        self.server.stop()
        self.step_mark("server_down")

    def step_start_server(self) -> None:
        """Starts the server again on its address, marking `server_back` once it listens."""
        self.server.start()
        self.step_mark("server_back")

    def step_claim_raw(self, events: list[str], lease_seconds: int) -> None:
        """Claims the events as another process that then crashes; marks `lease_end`."""
        claimed = self._agent_post("/v1/inbox/claim", {"event_ids": [self.ids[n] for n in events],
                                                        "lease_seconds": lease_seconds})
        assert len(claimed["claims"]) == len(events), claimed
        self.step_mark("claimed")
        self.marks["lease_end"] = self.marks["claimed"] + lease_seconds * 1000

    def step_finish_raw(self, events: list[str]) -> None:
        """Claims and acknowledges the events outside the runner (another process did them)."""
        claimed = self._agent_post("/v1/inbox/claim", {"event_ids": [self.ids[n] for n in events]})
        acks = [{"event_id": c["event_id"], "lease_token": c["lease_token"], "result": "completed"}
                for c in claimed["claims"]]
        self._agent_post("/v1/inbox/acknowledge", {"acks": acks})

    def step_age_finished(self, oldest: str) -> None:
        """Moves finished events past retention (30 days, as the Rust tests move a store's
        clock); waits until the scavenger archived them and the oldest available event is
        `oldest`."""
        month_ms = 31 * 86_400_000
        self.server.db.execute(f"UPDATE agent_inbox SET terminal_at_utc = terminal_at_utc - {month_ms} "
                               f"WHERE recipient_id = '{AGENT}' AND terminal_at_utc IS NOT NULL")
        seq = self.server.events(self.token)[self.ids[oldest]].inbox_seq

        def archived() -> bool:
            with self.server.client(self.token) as client:
                return bool(client.head().oldest_available_seq == seq)

        wait_until("retention archives the finished events", 30, archived)

    def step_requeue(self, events: list[str]) -> None:
        """An operator requeues dead letters."""
        self._admin_post("/v1/admin/parked/requeue", {"recipient_id": AGENT, "event_ids": [self.ids[n] for n in events]})

    def step_release_quarantine(self, events: list[str]) -> None:
        """An operator releases quarantined events."""
        self._admin_post("/v1/admin/quarantine/release",
                         {"recipient_id": AGENT, "event_ids": [self.ids[n] for n in events]})

    def step_supersede(self) -> None:
        """Another process of the same agent subscribes (under single-active-session)."""
        self._agent_post("/v1/agent-sessions/subscribe", {})

    def step_expect(self, check: str, **arguments: Any) -> None:
        """Runs a check now, in the middle of the steps (the state right after a stop)."""
        getattr(self, "check_" + check)(**arguments)

    # -- checks --------------------------------------------------------------------------------

    def check_runs(self, event: str, starts: int, ends: int | None = None) -> None:
        """The handler started `starts` times for the event (and ended `ends` times)."""
        assert len(self.lines("start", event)) == starts, f"{event} started {len(self.lines('start', event))} times"
        if ends is not None:
            assert len(self.lines("end", event)) == ends, f"{event} ended {len(self.lines('end', event))} times"

    def check_completed_once(self, events: list[str]) -> None:
        """Each event's handler completed exactly once, and the service has it acknowledged."""
        for name in events:
            done = [e for e in self.lines("end", name) if e["outcome"] == "complete"]
            assert len(done) == 1, f"{name} completed {len(done)} times"
        assert self.in_state(events, "acked"), {n: self.server.events(self.token)[self.ids[n]].ack_state for n in events}

    def check_gap(self, start: str, end: str, at_least: float | None = None, at_most: float | None = None) -> None:
        """Seconds from `start` to `end` (see `Run.time_of`) lie within the bounds."""
        gap = (self.time_of(end) - self.time_of(start)) / 1000
        if at_least is not None:
            assert gap >= at_least, f"{end} came {gap:.3f} s after {start}: sooner than {at_least} s"
        if at_most is not None:
            assert gap <= at_most, f"{end} came {gap:.3f} s after {start}: later than {at_most} s"

    def check_operator_sees(self, event: str, **expected: Any) -> None:
        """The admin API's view of the event has these fields."""
        seen = self.event(event)
        for key, value in expected.items():
            assert seen.get(key) == value, f"{event}.{key} is {seen.get(key)!r}, expected {value!r}: {seen}"

    def check_operator_history(self, event: str, action: str, **expected: Any) -> None:
        """The event's last history entry of `action` has these fields (a quarantine's class)."""
        entries = [h for h in self.event(event)["history"] if h["action"] == action]
        assert entries, f"no {action} in the history of {event}: {self.event(event)['history']}"
        for key, value in expected.items():
            assert entries[-1].get(key) == value, f"{event}'s {action}: {key} is {entries[-1].get(key)!r}, not {value!r}"

    def check_requests(self, route: str | list[str], verdict: str | None = None, at_least: int | None = None,
                       at_most: int | None = None, since: str | None = None, until: str | None = None) -> None:
        """Counts the proxy's requests on `route` (with `verdict`) between two marks."""
        start = self.time_of(since) if since else 0.0
        count = self.requests(route, verdict, start)
        if until:
            count -= self.requests(route, verdict, self.time_of(until))
        if at_least is not None:
            assert count >= at_least, f"{count} {verdict or ''} {route} requests, expected at least {at_least}"
        if at_most is not None:
            assert count <= at_most, f"{count} {verdict or ''} {route} requests, expected at most {at_most}"

    def check_exit(self, code: int) -> None:
        assert self.exit_code == code, f"the agent exited with {self.exit_code}, expected {code}"

    def check_kills(self, count: int) -> None:
        """The agent died of SIGKILL this many times (and was restarted)."""
        assert self.agent is not None
        assert self.agent.kills == count, f"the agent was killed {self.agent.kills} times, expected {count}"

    def check_resync(self, open: list[str], resume_after: str) -> None:
        """The resync callback ran once with exactly these open events, resuming after the
        sequence of `resume_after`."""
        (resync,) = self.lines("resync")
        assert resync["open"] == [self.ids[n] for n in open], resync
        seq = self.server.events(self.token)[self.ids[resume_after]].inbox_seq
        assert resync["resume_after_seq"] == seq, resync
