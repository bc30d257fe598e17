"""The runners' shared decision vectors (``clients/conformance/vectors/decisions.json``) replayed
against this SDK's pure rules. The Rust and TypeScript unit suites replay the same file, so the
three runners decide alike by construction. A rule the file has and ``RULES`` lacks fails, as
does a rule ``RULES`` replays that the file lacks or excepts for Python. The file counts in
milliseconds; this SDK in seconds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_inbox._contract import fit_reason, quarantine_reason
from agent_inbox._cursor import Scan
from agent_inbox._errors import ProblemError, parse_retry_after
from agent_inbox._models import EventEnvelope
from agent_inbox._schedule import (
    OUTAGE_BACKOFF,
    Backoff,
    ClaimableAt,
    LongPollWait,
    PollSchedule,
    TransportPolicy,
    heartbeat_delay,
    heartbeat_retry_delay,
    honour_retry_after,
    next_cycle_after,
    outage_delay,
    refresh_due,
    retry_after_seconds,
    wall_clock_drift,
)
from agent_inbox._wire import decode

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors" / "decisions.json"
RUNNER = "python"
RUNNERS = ("rust", "typescript", "python")

Json = Any


def seconds(ms: Json) -> Any:
    return None if ms is None else ms / 1000


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def schedule(i: Json) -> PollSchedule:
    s = i.get("schedule")
    if s is None:
        return PollSchedule()
    return PollSchedule(s["interval_min_ms"] / 1000, s["interval_max_ms"] / 1000, s["growth"], s["jitter_fraction"])


def next_cycle(i: Json) -> Json:
    wait, nominal = next_cycle_after(
        schedule(i), seconds(i["nominal_ms"]), i["claimed"], i["more"], seconds(i["until_change_ms"]),
        i["connected"], i["slack_ms"] / 1000, i["jitter"],
    )
    return {"wait_ms": ms(wait), "nominal_ms": ms(nominal)}


def claimable_at(i: Json) -> Json:
    claimable = ClaimableAt()
    answers = []
    for step in i["steps"]:
        if "note" in step:
            claimable.note(step["note"])
        elif "scanned" in step:
            claimable.scanned(step["scanned"]["started_ms"], step["scanned"]["next_change_ms"])
        elif "until" in step:
            answers.append(claimable.until(step["until"]))
        else:
            raise AssertionError(f"claimable_at: unknown step {step}")
    return answers


def event_id(seq: int) -> str:
    return f"00000000-0000-0000-0000-{seq:012x}"


def envelope(differs: Json) -> EventEnvelope:
    """An available event of its ``inbox_seq``, with what the vector names instead."""
    event = {
        "event_id": event_id(differs["inbox_seq"]), "tenant_id": "t", "recipient_kind": "agent",
        "recipient_id": "a", "event_type": "task", "priority": "normal",
        "availability_at_utc": "2020-01-01T00:00:00.000Z", "delivery_attempts": 0,
        "dead_letter_state": "none", "correlation": {}, "created_at_utc": "2020-01-01T00:00:00.000Z",
        "ack_state": "available", **differs,
    }
    return decode(EventEnvelope, event)


def cursor_scan(i: Json) -> Json:
    held = {event_id(seq) for seq in i["held_seqs"]}
    scan = Scan(i["cursor"])
    for page in i["pages"]:
        scan.add_page([envelope(e) for e in page["events"]], page["next_cursor"], page["head_seq"], i["now_ms"], held)
    return {
        "cursor": scan.cursor, "blocked": scan.blocked, "claimable": scan.claimable,
        "next_change_ms": scan.next_change_ms, "head_seq": scan.head_seq, "seen_through": scan.seen_through,
    }


def long_poll_wait(i: Json) -> Json:
    start = i.get("state")
    if start is None:
        wait = LongPollWait.new(i["max_seconds"])
    else:
        wait = LongPollWait(start["wait_seconds"], start["max_seconds"], start["ceiling_seconds"])

    def state() -> Json:
        return {"wait_seconds": wait.wait_seconds, "max_seconds": wait.max_seconds, "ceiling_seconds": wait.ceiling_seconds}

    states = [state()]
    for step in i["steps"]:
        if step == "answer":
            wait.on_answer()
        elif step == "refused":
            wait.on_refused()
        elif isinstance(step, dict) and "cut_ms" in step:
            wait.on_cut(step["cut_ms"] / 1000)
        else:
            raise AssertionError(f"long_poll.wait: unknown step {step}")
        states.append(state())
    return states


def sample(s: Json) -> tuple[float, float]:
    return s["monotonic_ms"] / 1000, s["wall_ms"] / 1000


#: Every rule this runner has, by its name in the file.
RULES: dict[str, Callable[[Json], Json]] = {
    "poll.next_nominal": lambda i: ms(schedule(i).next_nominal(seconds(i["previous_ms"]), i["found_work"])),
    "poll.jittered": lambda i: ms(schedule(i).jittered(i["nominal_ms"] / 1000, i["jitter"])),
    "poll.next_cycle": next_cycle,
    "claimable_at": claimable_at,
    "backoff.delay": lambda i: ms(
        Backoff(i["backoff"]["base_ms"] / 1000, i["backoff"]["max_ms"] / 1000).delay(i["attempt"], i["jitter"])
    ),
    "outage.probe_delay": lambda i: ms(outage_delay(OUTAGE_BACKOFF, i["attempt"], i["jitter"], i["retry_after_seconds"])),
    "retry_after.parse": lambda i: parse_retry_after(i["header"], now=i["now_ms"] / 1000),
    "retry_after.honour": lambda i: ms(honour_retry_after(i["delay_ms"] / 1000, i["retry_after_seconds"])),
    "release.retry_after_seconds": lambda i: retry_after_seconds(i["after_seconds"]),
    "reason.fit": lambda i: fit_reason(i["reason"]),
    "reason.quarantine": lambda i: quarantine_reason(i["reason"]),
    "cursor.scan": cursor_scan,
    "heartbeat.delay": lambda i: ms(heartbeat_delay(i["lease_ms"] / 1000)),
    "heartbeat.retry_delay": lambda i: ms(heartbeat_retry_delay(i["lease_ms"] / 1000)),
    "token.refresh_due": lambda i: refresh_due(i["age_ms"] / 1000, i["lifetime_ms"] / 1000),
    "long_poll.wait": long_poll_wait,
    "transport.stream_failed": lambda i: TransportPolicy().stream_failed(i["lived_ms"] / 1000),
    "transport.should_fall_back": lambda i: TransportPolicy().should_fall_back(i["consecutive_failures"]),
    "transport.should_upgrade": lambda i: TransportPolicy().should_upgrade(i["on_fallback_for_ms"] / 1000),
    "clock.wall_drift": lambda i: ms(wall_clock_drift(sample(i["previous"]), sample(i["now"]), i["tolerance_ms"] / 1000)),
    "problem.transient": lambda i: ProblemError(i["status"], "refused", "").transient,
}


def same(got: Json, want: Json) -> bool:
    """Numbers compare to within a microsecond: the runners count in nanoseconds, milliseconds
    and float seconds."""
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return abs(got - want) <= 0.001
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    return bool(got == want)


def test_every_vector_of_every_rule_is_replayed() -> None:
    rules: dict[str, Json] = json.loads(VECTORS.read_text(encoding="utf-8"))["rules"]
    failures: list[str] = []
    replayed = 0
    for name, rule in rules.items():
        excepted = list(rule.get("except", {}))
        failures += [f"{name}: `except` names {r}, which is no runner" for r in excepted if r not in RUNNERS]
        if all(runner in excepted for runner in RUNNERS):
            failures.append(f"{name}: no runner replays it")
        vectors = rule.get("vectors") or []
        if not vectors or any(not isinstance(v.get("why"), str) for v in vectors):
            failures.append(f"{name}: every rule needs vectors, each with a `why`")
        replay = RULES.get(name)
        if RUNNER in excepted:
            if replay is not None:
                failures.append(f"{name}: `except` says Python has no such rule, yet RULES replays it")
            continue
        if replay is None:
            failures.append(f"{name}: a rule this runner does not replay (add it to RULES, or say why in `except`)")
            continue
        for vector in vectors:
            got = replay(vector["in"])
            if not same(got, vector["out"]):
                failures.append(f"{name} ({vector['why']}): got {got!r}, want {vector['out']!r}")
            replayed += 1
    failures += [f"{name}: replayed here, but decisions.json has no such rule" for name in RULES if name not in rules]
    assert not failures, f"{len(failures)} of the decision vectors fail:\n" + "\n".join(failures)
    assert replayed > 0
