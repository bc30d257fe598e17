//! The event state machine: worked examples, then properties over random operation sequences.

use inbox_core::{
    AckResult, AckState, DeadLetterReason, EventLifecycle, LeaseToken, LeaseTokenHash, RefusalReason,
    Transition, UnixMillis,
};
use proptest::prelude::*;

fn token(n: u8) -> LeaseTokenHash {
    LeaseToken::from_random([n; 16]).hash()
}

fn fresh(max_attempts: u32) -> EventLifecycle {
    EventLifecycle::published(UnixMillis(1_000), Some(UnixMillis(1_000_000)), max_attempts)
}

fn claim(e: &EventLifecycle, t: u8, now: i64) -> EventLifecycle {
    e.apply(Transition::Claim { token_hash: token(t), now: UnixMillis(now), lease_ms: 100 }).unwrap().next
}

#[test]
fn claim_then_ack_is_idempotent_for_the_same_token_only() {
    let claimed = claim(&fresh(3), 1, 1_000);
    assert_eq!(claimed.state, AckState::Claimed);
    assert_eq!(claimed.delivery_attempts, 1);
    let ack = |e: &EventLifecycle, t| {
        e.apply(Transition::Acknowledge {
            token_hash: token(t),
            now: UnixMillis(1_050),
            result: AckResult::Completed,
        })
    };
    assert_eq!(ack(&claimed, 2).unwrap_err(), RefusalReason::LeaseMismatch);
    let acked = ack(&claimed, 1).unwrap();
    assert!(acked.changed);
    assert_eq!(acked.next.state, AckState::Acked);
    let again = ack(&acked.next, 1).unwrap();
    assert!(!again.changed, "a repeated ack changes nothing");
    assert_eq!(ack(&acked.next, 2).unwrap_err(), RefusalReason::AlreadyAcked);
}

#[test]
fn a_failed_result_parks_the_event() {
    let claimed = claim(&fresh(3), 1, 1_000);
    let failed = claimed
        .apply(Transition::Acknowledge {
            token_hash: token(1),
            now: UnixMillis(1_001),
            result: AckResult::Failed,
        })
        .unwrap()
        .next;
    assert_eq!(
        (failed.state, failed.dead_letter_reason),
        (AckState::DeadLetter, DeadLetterReason::HandlerFailed)
    );
}

#[test]
fn release_schedules_a_retry_and_spent_attempts_park_the_event() {
    let claimed = claim(&fresh(2), 1, 1_000);
    let released = claimed
        .apply(Transition::Release { token_hash: token(1), now: UnixMillis(1_010), retry_after_ms: 60_000 })
        .unwrap()
        .next;
    assert_eq!(released.state, AckState::Available);
    assert_eq!(released.display_state(UnixMillis(1_010)).as_str(), "retry_scheduled");
    assert_eq!(
        released.claimable_at(UnixMillis(2_000)),
        Err(RefusalReason::RetryScheduled(UnixMillis(61_010)))
    );
    let second = claim(&released, 2, 61_010);
    let expired =
        second.apply(Transition::LeaseExpired { now: UnixMillis(61_110), backoff_ms: 5 }).unwrap().next;
    assert_eq!(
        (expired.state, expired.dead_letter_reason),
        (AckState::DeadLetter, DeadLetterReason::MaxAttemptsExceeded)
    );
    let requeued =
        expired.apply(Transition::Requeue { now: UnixMillis(61_200), max_attempts: 2 }).unwrap().next;
    assert_eq!(
        (requeued.state, requeued.delivery_attempts, requeued.max_attempts),
        (AckState::Available, 2, 4)
    );
}

#[test]
fn late_calls_after_lease_expiry_get_lease_expired() {
    let claimed = claim(&fresh(5), 1, 1_000);
    assert_eq!(
        claimed.apply(Transition::LeaseExpired { now: UnixMillis(1_050), backoff_ms: 0 }).unwrap_err(),
        RefusalReason::LeaseStillLive
    );
    let heartbeat = Transition::Heartbeat {
        token_hash: token(1),
        now: UnixMillis(1_100),
        extend_ms: 100,
        lease_ms_max: 1_000,
    };
    assert_eq!(
        claimed.apply(heartbeat).unwrap_err(),
        RefusalReason::LeaseExpired,
        "a dead lease is not revived"
    );
    let back =
        claimed.apply(Transition::LeaseExpired { now: UnixMillis(1_100), backoff_ms: 500 }).unwrap().next;
    assert_eq!(back.next_retry_at, Some(UnixMillis(1_600)));
    let ack = Transition::Acknowledge {
        token_hash: token(1),
        now: UnixMillis(1_200),
        result: AckResult::Completed,
    };
    assert_eq!(back.apply(ack).unwrap_err(), RefusalReason::LeaseExpired);
    let taken = claim(&back, 2, 1_600);
    assert_eq!(taken.apply(ack).unwrap_err(), RefusalReason::LeaseMismatch);
}

#[test]
fn heartbeat_extends_up_to_the_maximum_lease() {
    let claimed = claim(&fresh(5), 1, 1_000);
    let beat = claimed
        .apply(Transition::Heartbeat {
            token_hash: token(1),
            now: UnixMillis(1_050),
            extend_ms: 10_000,
            lease_ms_max: 500,
        })
        .unwrap()
        .next;
    assert_eq!(beat.lease.unwrap().until, UnixMillis(1_550));
}

#[test]
fn expiry_applies_to_unclaimed_events_and_to_leases_that_end_past_it() {
    let e = EventLifecycle::published(UnixMillis(0), Some(UnixMillis(100)), 5);
    assert_eq!(e.claimable_at(UnixMillis(100)), Err(RefusalReason::PastExpiry));
    assert_eq!(e.apply(Transition::Expire { now: UnixMillis(100) }).unwrap().next.state, AckState::Expired);
    let claimed = claim(&e, 1, 50);
    let ended = claimed.apply(Transition::LeaseExpired { now: UnixMillis(150), backoff_ms: 0 }).unwrap().next;
    assert_eq!(ended.state, AckState::Expired);
}

#[test]
fn an_agent_quarantines_what_it_holds_and_may_repeat_it() {
    let claimed = claim(&fresh(3), 1, 1_000);
    let ack = |e: &EventLifecycle, t, result| {
        e.apply(Transition::Acknowledge { token_hash: token(t), now: UnixMillis(1_050), result })
    };
    assert_eq!(ack(&claimed, 2, AckResult::Quarantined).unwrap_err(), RefusalReason::LeaseMismatch);
    let set_aside = ack(&claimed, 1, AckResult::Quarantined).unwrap();
    assert!(set_aside.changed);
    assert_eq!(
        (set_aside.next.state, set_aside.next.dead_letter_reason),
        (AckState::Quarantined, DeadLetterReason::Anomaly)
    );
    let again = ack(&set_aside.next, 1, AckResult::Quarantined).unwrap();
    assert!(!again.changed, "a repeated quarantine changes nothing");
    assert_eq!(
        ack(&set_aside.next, 1, AckResult::Completed).unwrap_err(),
        RefusalReason::LeaseExpired,
        "a quarantined event cannot then be completed"
    );
    assert_eq!(
        set_aside.next.claimable_at(UnixMillis(2_000)),
        Err(RefusalReason::NotClaimable("quarantined"))
    );
}

#[test]
fn an_operator_pulls_a_claimed_event_and_its_lease_ends() {
    let claimed = claim(&fresh(3), 1, 1_000);
    let pulled = claimed.apply(Transition::Quarantine { now: UnixMillis(1_020) }).unwrap();
    assert!(pulled.changed);
    assert_eq!(pulled.next.state, AckState::Quarantined);
    assert_eq!(pulled.next.lease.unwrap().until, UnixMillis(1_020), "the lease ends at the pull");
    let repeat = pulled.next.apply(Transition::Quarantine { now: UnixMillis(1_030) }).unwrap();
    assert!(!repeat.changed, "quarantine is idempotent");
    for result in [AckResult::Completed, AckResult::Failed] {
        let late = Transition::Acknowledge { token_hash: token(1), now: UnixMillis(1_040), result };
        assert_eq!(pulled.next.apply(late).unwrap_err(), RefusalReason::LeaseExpired);
    }
    let beat = Transition::Heartbeat {
        token_hash: token(1),
        now: UnixMillis(1_040),
        extend_ms: 100,
        lease_ms_max: 1_000,
    };
    assert_eq!(pulled.next.apply(beat).unwrap_err(), RefusalReason::LeaseExpired);
    for finished in [AckState::Acked, AckState::Expired, AckState::DeadLetter] {
        let done = EventLifecycle { state: finished, ..fresh(3) };
        assert_eq!(
            done.apply(Transition::Quarantine { now: UnixMillis(1_050) }).unwrap_err(),
            RefusalReason::Terminal(finished.as_str())
        );
    }
}

#[test]
fn release_from_quarantine_gives_a_fresh_budget_and_repeats_harmlessly() {
    let spent = claim(&fresh(1), 1, 1_000);
    let pulled = spent.apply(Transition::Quarantine { now: UnixMillis(1_010) }).unwrap().next;
    let release = Transition::ReleaseQuarantine { now: UnixMillis(1_100), max_attempts: 2 };
    let released = pulled.apply(release).unwrap();
    assert!(released.changed);
    assert_eq!(
        (released.next.state, released.next.dead_letter_reason, released.next.max_attempts),
        (AckState::Available, DeadLetterReason::None, 3)
    );
    assert_eq!(released.next.claimable_at(UnixMillis(1_100)), Ok(()));
    let again = released.next.apply(release).unwrap();
    assert!(!again.changed, "releasing a released event changes nothing");
    let taken = claim(&released.next, 2, 1_100);
    assert_eq!(taken.apply(release).unwrap_err(), RefusalReason::NotQuarantined("claimed"));
    let dead = EventLifecycle { state: AckState::DeadLetter, ..fresh(3) };
    assert_eq!(dead.apply(release).unwrap_err(), RefusalReason::NotQuarantined("dead_letter"));
}

#[derive(Debug, Clone)]
enum Op {
    Claim(u8, u64),
    Ack(u8, AckResult),
    Release(u8, u64),
    Heartbeat(u8, u64),
    LeaseExpired(u64),
    Expire,
    Quarantine,
    Requeue(u32),
    ReleaseQuarantine(u32),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 1u64..500).prop_map(|(t, l)| Op::Claim(t, l)),
        2 => (0u8..3, prop_oneof![Just(AckResult::Completed), Just(AckResult::Failed), Just(AckResult::Quarantined)])
            .prop_map(|(t, result)| Op::Ack(t, result)),
        2 => (0u8..3, 0u64..300).prop_map(|(t, r)| Op::Release(t, r)),
        2 => (0u8..3, 0u64..500).prop_map(|(t, e)| Op::Heartbeat(t, e)),
        2 => (0u64..300).prop_map(Op::LeaseExpired),
        1 => Just(Op::Expire),
        1 => Just(Op::Quarantine),
        1 => (1u32..4).prop_map(Op::Requeue),
        1 => (1u32..4).prop_map(Op::ReleaseQuarantine),
        3 => (0u64..400).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_operation_sequences_keep_the_invariants(
        max_attempts in 1u32..5,
        expires_after in prop::option::of(200u64..5_000),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut now = UnixMillis(10_000);
        let mut event = EventLifecycle::published(now, expires_after.map(|ms| now.plus_ms(ms)), max_attempts);
        // The token that holds the lease, per the model: set by a claim, cleared when it ends.
        let mut holder: Option<u8> = None;

        for op in ops {
            let (transition, actor) = match op {
                Op::Advance(ms) => { now = now.plus_ms(ms); continue; }
                Op::Claim(t, lease_ms) => (Transition::Claim { token_hash: token(t), now, lease_ms }, Some(t)),
                Op::Ack(t, result) => (Transition::Acknowledge { token_hash: token(t), now, result }, Some(t)),
                Op::Release(t, retry_after_ms) => (Transition::Release { token_hash: token(t), now, retry_after_ms }, Some(t)),
                Op::Heartbeat(t, extend_ms) => (Transition::Heartbeat { token_hash: token(t), now, extend_ms, lease_ms_max: 400 }, Some(t)),
                Op::LeaseExpired(backoff_ms) => (Transition::LeaseExpired { now, backoff_ms }, None),
                Op::Expire => (Transition::Expire { now }, None),
                Op::Quarantine => (Transition::Quarantine { now }, None),
                Op::Requeue(budget) => (Transition::Requeue { now, max_attempts: budget }, None),
                Op::ReleaseQuarantine(budget) => (Transition::ReleaseQuarantine { now, max_attempts: budget }, None),
            };
            let operator_sends_back =
                matches!(transition, Transition::Requeue { .. } | Transition::ReleaseQuarantine { .. });
            let before = event.clone();
            let Ok(applied) = before.apply(transition) else { continue };
            let after = applied.next;

            prop_assert!(after.delivery_attempts >= before.delivery_attempts, "attempts decreased");
            prop_assert!(after.delivery_attempts <= after.max_attempts, "attempts above the budget");
            if before.state.is_terminal() && !operator_sends_back {
                prop_assert!(!applied.changed && after == before, "left terminal state {:?} by {:?}", before.state, transition);
            }
            if matches!(transition, Transition::Requeue { .. }) {
                prop_assert!(before.state.is_parked());
            }
            if matches!(transition, Transition::ReleaseQuarantine { .. }) {
                prop_assert!(matches!(before.state, AckState::Quarantined | AckState::Available));
                prop_assert_eq!(applied.changed, before.state == AckState::Quarantined, "only a quarantined event changes");
            }
            if after.state == AckState::Quarantined {
                prop_assert_eq!(after.dead_letter_reason, DeadLetterReason::Anomaly);
                prop_assert!(after.claimable_at(now).is_err(), "a quarantined event is never claimable");
                if before.state == AckState::Quarantined {
                    prop_assert!(!applied.changed, "quarantining again changed the event");
                }
            }
            if operator_sends_back && applied.changed {
                prop_assert_eq!(after.state, AckState::Available);
                prop_assert!(after.max_attempts > after.delivery_attempts, "sent back without attempts left");
            }
            if applied.changed {
                if let Some(t) = actor.filter(|_| !matches!(transition, Transition::Claim { .. })) {
                    prop_assert_eq!(holder, Some(t), "token {} changed an event it does not hold", t);
                }
                if matches!(transition, Transition::Claim { .. }) {
                    prop_assert_eq!(holder, None, "claimed while another token held the lease");
                }
            }
            prop_assert_eq!(after.state == AckState::Claimed, after.lease.is_some() && holder_after(&after).is_some());

            holder = match after.state {
                AckState::Claimed => actor.or(holder),
                _ => None,
            };
            event = after;
        }
    }
}

fn holder_after(e: &EventLifecycle) -> Option<LeaseTokenHash> {
    (e.state == AckState::Claimed).then(|| e.lease.map(|l| l.token_hash)).flatten()
}
