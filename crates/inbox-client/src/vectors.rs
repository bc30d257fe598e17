//! The runners' shared decision vectors (`clients/conformance/vectors/decisions.json`) replayed
//! against this crate's pure rules. The TypeScript and Python unit suites replay the same file,
//! so the three runners decide alike by construction rather than by three sets of tests kept in
//! step by hand. A rule the file has and this table lacks fails, as does a rule this table
//! replays that the file lacks or excepts for Rust.

use std::collections::HashSet;
use std::time::Duration;

use inbox_api::{EventEnvelope, Problem};
use inbox_core::EventId;
use serde_json::{Value, json};

use crate::cursor::Scan;
use crate::error::ClientError;
use crate::schedule::{
    Backoff, ClaimableAt, ClockJump, ClockSample, CycleFound, LongPollWait, PollSchedule, TransportPolicy,
    clock_jump, heartbeat_delay, heartbeat_retry_delay, honour_retry_after, next_cycle_after,
    parse_retry_after, refresh_due, retry_after_seconds,
};
use crate::work::{fit_reason, quarantine_reason};

const VECTORS: &str = include_str!("../../../clients/conformance/vectors/decisions.json");
const RUNNER: &str = "rust";
const RUNNERS: [&str; 3] = ["rust", "typescript", "python"];

type Replay = fn(&Value) -> Value;

/// Every rule this runner has, by its name in the file.
const RULES: &[(&str, Replay)] = &[
    ("poll.next_nominal", |i| {
        ms(schedule(i).next_nominal(opt_duration(&i["previous_ms"]), flag(&i["found_work"])))
    }),
    ("poll.jittered", |i| ms(schedule(i).jittered(duration(&i["nominal_ms"]), number(&i["jitter"])))),
    ("poll.next_cycle", poll_next_cycle),
    ("claimable_at", claimable_at),
    ("backoff.delay", |i| ms(backoff(&i["backoff"]).delay(attempt(&i["attempt"]), number(&i["jitter"])))),
    ("outage.probe_delay", |i| {
        let delay = Backoff::OUTAGE.delay(attempt(&i["attempt"]), number(&i["jitter"]));
        ms(honour_retry_after(delay, opt_seconds(&i["retry_after_seconds"])))
    }),
    ("retry_after.parse", |i| {
        json!(i["header"].as_str().and_then(|h| parse_retry_after(h, integer(&i["now_ms"]))))
    }),
    ("retry_after.honour", |i| {
        ms(honour_retry_after(duration(&i["delay_ms"]), opt_seconds(&i["retry_after_seconds"])))
    }),
    ("release.retry_after_seconds", |i| {
        // A Duration cannot be negative: a negative delay reaches the rule as none.
        let after = Duration::try_from_secs_f64(number(&i["after_seconds"])).unwrap_or(Duration::ZERO);
        json!(retry_after_seconds(after))
    }),
    ("reason.fit", |i| json!(fit_reason(text(&i["reason"])))),
    ("reason.quarantine", |i| json!(quarantine_reason(text(&i["reason"])))),
    ("cursor.scan", cursor_scan),
    ("heartbeat.delay", |i| ms(heartbeat_delay(duration(&i["lease_ms"])))),
    ("heartbeat.retry_delay", |i| ms(heartbeat_retry_delay(duration(&i["lease_ms"])))),
    ("token.refresh_due", |i| json!(refresh_due(duration(&i["age_ms"]), duration(&i["lifetime_ms"])))),
    ("long_poll.wait", long_poll_wait),
    ("transport.stream_failed", |i| {
        json!(TransportPolicy::default().stream_failed(duration(&i["lived_ms"])))
    }),
    ("transport.should_fall_back", |i| {
        json!(TransportPolicy::default().should_fall_back(attempt(&i["consecutive_failures"])))
    }),
    ("transport.should_upgrade", |i| {
        json!(TransportPolicy::default().should_upgrade(duration(&i["on_fallback_for_ms"])))
    }),
    ("clock.wall_drift", |i| {
        let (previous, now) = (sample(&i["previous"]), sample(&i["now"]));
        // Expecting exactly the monotonic time that passed isolates the wall clock's rule.
        let expected = now.monotonic.saturating_sub(previous.monotonic);
        match clock_jump(previous, now, expected, duration(&i["tolerance_ms"])) {
            Some(ClockJump::Wall { drift_ms }) => json!(drift_ms),
            _ => Value::Null,
        }
    }),
    ("clock.stall", |i| {
        match clock_jump(
            sample(&i["previous"]),
            sample(&i["now"]),
            duration(&i["expected_ms"]),
            duration(&i["tolerance_ms"]),
        ) {
            Some(ClockJump::Stall { late }) => ms(late),
            _ => Value::Null,
        }
    }),
    ("problem.transient", |i| {
        let status = u16::try_from(integer(&i["status"])).expect("a status");
        let refused =
            ClientError::Refused { problem: Box::new(Problem::new(status, "refused", "refused", "")) };
        json!(refused.is_transient())
    }),
];

#[test]
fn every_vector_of_every_rule_is_replayed() {
    let file: Value = serde_json::from_str(VECTORS).expect("decisions.json is JSON");
    let rules = file["rules"].as_object().expect("decisions.json has rules");
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (name, rule) in rules {
        let except = rule.get("except").and_then(Value::as_object);
        let excepted: Vec<&String> = except.map(|e| e.keys().collect()).unwrap_or_default();
        if let Some(unknown) = excepted.iter().find(|runner| !RUNNERS.contains(&runner.as_str())) {
            failures.push(format!("{name}: `except` names {unknown}, which is no runner"));
        }
        if RUNNERS.iter().all(|runner| excepted.iter().any(|e| e == runner)) {
            failures.push(format!("{name}: no runner replays it"));
        }
        let vectors = rule["vectors"].as_array().map(Vec::as_slice).unwrap_or_default();
        if vectors.is_empty() || vectors.iter().any(|v| !v["why"].is_string()) {
            failures.push(format!("{name}: every rule needs vectors, each with a `why`"));
        }
        let replay = RULES.iter().find(|(known, _)| known == name).map(|(_, replay)| replay);
        let excepted_here = excepted.iter().any(|runner| *runner == RUNNER);
        let replay = match (replay, excepted_here) {
            (Some(replay), false) => replay,
            (None, true) => continue,
            (None, false) => {
                failures.push(format!(
                    "{name}: a rule this runner does not replay (add it to RULES, or say why in `except`)"
                ));
                continue;
            }
            (Some(_), true) => {
                failures.push(format!("{name}: `except` says Rust has no such rule, yet RULES replays it"));
                continue;
            }
        };
        for vector in vectors {
            let got = replay(&vector["in"]);
            if !same(&got, &vector["out"]) {
                failures.push(format!("{name} ({}): got {got}, want {}", vector["why"], vector["out"]));
            }
            replayed += 1;
        }
    }
    for (name, _) in RULES {
        if !rules.contains_key(*name) {
            failures.push(format!("{name}: replayed here, but decisions.json has no such rule"));
        }
    }
    assert!(failures.is_empty(), "{} of the decision vectors fail:\n{}", failures.len(), failures.join("\n"));
    assert!(replayed > 0);
}

fn poll_next_cycle(i: &Value) -> Value {
    let found = CycleFound {
        claimed: usize::try_from(integer(&i["claimed"])).expect("a count"),
        more: flag(&i["more"]),
        until_change: opt_duration(&i["until_change_ms"]),
    };
    let (wait, nominal) = next_cycle_after(
        &schedule(i),
        opt_duration(&i["nominal_ms"]),
        found,
        flag(&i["connected"]),
        duration(&i["slack_ms"]),
        number(&i["jitter"]),
    );
    json!({ "wait_ms": ms(wait), "nominal_ms": nominal.map(ms) })
}

fn claimable_at(i: &Value) -> Value {
    let mut claimable = ClaimableAt::default();
    let mut answers = Vec::new();
    for step in steps(i) {
        if let Some(at) = step.get("note") {
            claimable.note(integer(at));
        } else if let Some(scan) = step.get("scanned") {
            claimable.scanned(integer(&scan["started_ms"]), scan["next_change_ms"].as_i64());
        } else if let Some(now) = step.get("until") {
            answers.push(claimable.until(integer(now)).map(ms));
        } else {
            panic!("claimable_at: unknown step {step}");
        }
    }
    json!(answers)
}

fn cursor_scan(i: &Value) -> Value {
    let held: HashSet<EventId> =
        i["held_seqs"].as_array().expect("held_seqs").iter().map(|seq| event_id(integer(seq))).collect();
    let mut scan = Scan::new(unsigned(&i["cursor"]));
    for page in i["pages"].as_array().expect("pages") {
        let events: Vec<EventEnvelope> =
            page["events"].as_array().expect("events").iter().map(envelope).collect();
        scan.add_page(
            &events,
            unsigned(&page["next_cursor"]),
            unsigned(&page["head_seq"]),
            integer(&i["now_ms"]),
            &held,
        );
    }
    json!({
        "cursor": scan.cursor,
        "blocked": scan.blocked,
        "claimable": scan.claimable,
        "next_change_ms": scan.next_change_ms,
        "head_seq": scan.head_seq,
        "seen_through": scan.seen_through,
    })
}

/// An available event of its `inbox_seq`, with what the vector names instead.
fn envelope(differs: &Value) -> EventEnvelope {
    let seq = integer(&differs["inbox_seq"]);
    let mut event = json!({
        "event_id": format!("00000000-0000-0000-0000-{seq:012x}"),
        "tenant_id": "t",
        "recipient_kind": "agent",
        "recipient_id": "a",
        "event_type": "task",
        "priority": "normal",
        "availability_at_utc": "2020-01-01T00:00:00.000Z",
        "delivery_attempts": 0,
        "dead_letter_state": "none",
        "correlation": {},
        "created_at_utc": "2020-01-01T00:00:00.000Z",
        "ack_state": "available",
    });
    for (key, value) in differs.as_object().expect("an event") {
        event[key] = value.clone();
    }
    serde_json::from_value(event).expect("an envelope")
}

fn event_id(seq: i64) -> EventId {
    serde_json::from_value(json!(format!("00000000-0000-0000-0000-{seq:012x}"))).expect("an event id")
}

fn long_poll_wait(i: &Value) -> Value {
    let state = |wait: &LongPollWait| json!({ "wait_seconds": wait.wait_seconds, "max_seconds": wait.max_seconds, "ceiling_seconds": wait.ceiling_seconds });
    let small = |value: &Value| u32::try_from(integer(value)).expect("seconds");
    let mut wait = match i.get("state") {
        Some(start) => LongPollWait {
            wait_seconds: small(&start["wait_seconds"]),
            max_seconds: small(&start["max_seconds"]),
            ceiling_seconds: start["ceiling_seconds"].as_i64().map(|c| u32::try_from(c).expect("seconds")),
        },
        None => LongPollWait::new(small(&i["max_seconds"])),
    };
    let mut states = vec![state(&wait)];
    for step in steps(i) {
        match (step.as_str(), step.get("cut_ms")) {
            (Some("answer"), _) => wait.on_answer(),
            (Some("refused"), _) => wait.on_refused(),
            (None, Some(elapsed)) => wait.on_cut(duration(elapsed)),
            _ => panic!("long_poll.wait: unknown step {step}"),
        }
        states.push(state(&wait));
    }
    json!(states)
}

/// Numbers compare to within a microsecond: the runners count in nanoseconds, milliseconds
/// and float seconds.
fn same(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Number(a), Value::Number(b)) => (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() <= 0.001,
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(key, a)| b.get(key).is_some_and(|b| same(a, b)))
        }
        _ => got == want,
    }
}

fn schedule(i: &Value) -> PollSchedule {
    match i.get("schedule") {
        Some(s) => PollSchedule {
            interval_min: duration(&s["interval_min_ms"]),
            interval_max: duration(&s["interval_max_ms"]),
            growth: number(&s["growth"]),
            jitter_fraction: number(&s["jitter_fraction"]),
        },
        None => PollSchedule::default(),
    }
}

fn backoff(b: &Value) -> Backoff {
    Backoff { base: duration(&b["base_ms"]), max: duration(&b["max_ms"]) }
}

fn sample(s: &Value) -> ClockSample {
    ClockSample { monotonic: duration(&s["monotonic_ms"]), wall_ms: integer(&s["wall_ms"]) }
}

fn steps(i: &Value) -> &[Value] {
    i["steps"].as_array().expect("steps")
}

fn ms(duration: Duration) -> Value {
    json!(duration.as_secs_f64() * 1000.0)
}

fn duration(value: &Value) -> Duration {
    Duration::from_secs_f64(number(value) / 1000.0)
}

fn opt_duration(value: &Value) -> Option<Duration> {
    (!value.is_null()).then(|| duration(value))
}

fn opt_seconds(value: &Value) -> Option<Duration> {
    (!value.is_null()).then(|| Duration::from_secs(unsigned(value)))
}

fn attempt(value: &Value) -> u32 {
    u32::try_from(integer(value)).expect("an attempt")
}

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or_else(|| panic!("a number, not {value}"))
}

fn integer(value: &Value) -> i64 {
    value.as_i64().unwrap_or_else(|| panic!("an integer, not {value}"))
}

fn unsigned(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("a non-negative integer, not {value}"))
}

fn flag(value: &Value) -> bool {
    value.as_bool().unwrap_or_else(|| panic!("a boolean, not {value}"))
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("a string, not {value}"))
}
