//! Hand-offs: an acknowledgement with follow-up publishes commits both only while its lease
//! holds, and a retried hand-off finds its first publishes.

use inbox_conformance::vocabulary::{
    ack_of, assert_invalid, claim_next, event, inbox_of, poll, publish_to, refusal,
};
use inbox_core::{AckState, RefusalReason};
use inbox_store::Field;
use inbox_store::{ClaimedEvent, HandOff, Refusal, handoff_key};

fn hand_off(claimed: &ClaimedEvent, tenant: &str, agent: &str, to: &[&str]) -> HandOff {
    HandOff {
        inbox: inbox_of(tenant, agent),
        session_id: None,
        event_id: claimed.event.event_id,
        lease_token: claimed.lease_token.clone(),
        follow_ups: to.iter().map(|r| event(tenant, &[r], "{\"step\":2}")).collect(),
    }
}

async fn events_of(
    h: &inbox_conformance::Harness,
    tenant: &str,
    agent: &str,
) -> Vec<inbox_store::EventRecord> {
    h.store.inbox().poll_after_cursor(&poll(&inbox_of(tenant, agent), 0, 100)).await.unwrap().events
}

case! {
    /// The acknowledgement and every follow-up commit together; a retry answers the first
    /// publishes (deduplicated by the acknowledged event), never second ones.
    async fn a_hand_off_acks_and_publishes_once(h: &Harness) {
        let a = inbox_of("t1", "alpha");
        publish_to(h, "t1", "alpha", "{\"step\":1}").await;
        let claimed = h.store.inbox().claim_next(&claim_next(&a, 1)).await.unwrap().remove(0);
        let handoff = hand_off(&claimed, "t1", "alpha", &["beta", "gamma"]);
        let receipt = h.store.inbox().hand_off(&handoff).await.unwrap().unwrap();
        assert_eq!(receipt.ack.state, AckState::Acked);
        assert_eq!(receipt.follow_ups.len(), 2);
        assert!(receipt.follow_ups.iter().flat_map(|r| &r.deliveries).all(|d| !d.deduplicated));
        let stored = h.store.inbox().event(&a, claimed.event.event_id).await.unwrap().unwrap();
        assert_eq!(stored.state(), AckState::Acked);
        let at_beta = events_of(h, "t1", "beta").await;
        assert_eq!(at_beta.len(), 1);
        assert_eq!(at_beta[0].deduplication_key, Some(handoff_key(claimed.event.event_id, 0)));
        assert_eq!(events_of(h, "t1", "gamma").await.len(), 1);

        let again = h.store.inbox().hand_off(&handoff).await.unwrap().unwrap();
        assert_eq!(again.ack.state, AckState::Acked);
        for (first, retry) in receipt.follow_ups.iter().zip(&again.follow_ups) {
            assert_eq!(first.deliveries[0].event_id, retry.deliveries[0].event_id);
            assert!(retry.deliveries[0].deduplicated);
        }
        assert_eq!(events_of(h, "t1", "beta").await.len(), 1, "a retry publishes nothing new");
    }
}

case! {
    /// A lease that ran out, or that another worker holds now, refuses the acknowledgement and
    /// the follow-ups alike; the holder of the live lease hands off.
    async fn a_stale_lease_commits_neither_the_ack_nor_the_follow_ups(h: &Harness) {
        let a = inbox_of("t1", "alpha");
        publish_to(h, "t1", "alpha", "{}").await;
        let first = h.store.inbox().claim_next(&claim_next(&a, 1)).await.unwrap().remove(0);
        h.clock.advance_ms(61_000);
        let late = h.store.inbox().hand_off(&hand_off(&first, "t1", "alpha", &["beta"])).await.unwrap();
        assert_eq!(refusal(&late), Refusal::Refused(RefusalReason::LeaseExpired));
        assert!(events_of(h, "t1", "beta").await.is_empty());

        h.store.inbox().scavenge(100).await.unwrap();
        h.clock.advance_ms(600_000);
        let second = h.store.inbox().claim_next(&claim_next(&a, 1)).await.unwrap().remove(0);
        assert_eq!(second.event.event_id, first.event.event_id);
        let stale = h.store.inbox().hand_off(&hand_off(&first, "t1", "alpha", &["beta"])).await.unwrap();
        assert_eq!(refusal(&stale), Refusal::Refused(RefusalReason::LeaseMismatch));
        assert!(events_of(h, "t1", "beta").await.is_empty(), "a stale lease published nothing");
        let stored = h.store.inbox().event(&a, first.event.event_id).await.unwrap().unwrap();
        assert_eq!(stored.state(), AckState::Claimed, "nor acknowledged anything");

        h.store.inbox().hand_off(&hand_off(&second, "t1", "alpha", &["beta"])).await.unwrap().unwrap();
        assert_eq!(events_of(h, "t1", "beta").await.len(), 1);
    }
}

case! {
    /// An event acknowledged without follow-ups has no lease left to hand off under.
    async fn a_hand_off_after_a_plain_ack_is_refused(h: &Harness) {
        let a = inbox_of("t1", "alpha");
        publish_to(h, "t1", "alpha", "{}").await;
        let claimed = h.store.inbox().claim_next(&claim_next(&a, 1)).await.unwrap().remove(0);
        h.store.inbox().acknowledge(&ack_of(&a, &claimed)).await.unwrap().remove(0).unwrap();
        let late = h.store.inbox().hand_off(&hand_off(&claimed, "t1", "alpha", &["beta"])).await.unwrap();
        assert_eq!(refusal(&late), Refusal::Refused(RefusalReason::Terminal("acked")));
        assert!(events_of(h, "t1", "beta").await.is_empty());
    }
}

case! {
    /// Follow-ups stay in the acknowledging tenant, carry no key of their own, and are bounded.
    async fn a_hand_off_checks_its_follow_ups(h: &Harness) {
        let a = inbox_of("t1", "alpha");
        publish_to(h, "t1", "alpha", "{}").await;
        let claimed = h.store.inbox().claim_next(&claim_next(&a, 1)).await.unwrap().remove(0);
        let mut other_tenant = hand_off(&claimed, "t1", "alpha", &["beta"]);
        other_tenant.follow_ups[0] = event("t2", &["beta"], "{}");
        assert_invalid(h.store.inbox().hand_off(&other_tenant).await, Field::Tenant);
        let mut keyed = hand_off(&claimed, "t1", "alpha", &["beta"]);
        keyed.follow_ups[0].deduplication_key = Some(inbox_core::DeduplicationKey::new("mine").unwrap());
        assert_invalid(h.store.inbox().hand_off(&keyed).await, Field::DeduplicationKey);
        assert_invalid(h.store.inbox().hand_off(&hand_off(&claimed, "t1", "alpha", &[])).await, Field::FollowUps);
        let many = vec!["beta"; inbox_store::FOLLOW_UPS_MAX + 1];
        assert_invalid(h.store.inbox().hand_off(&hand_off(&claimed, "t1", "alpha", &many)).await, Field::FollowUps);
        let stored = h.store.inbox().event(&a, claimed.event.event_id).await.unwrap().unwrap();
        assert_eq!(stored.state(), AckState::Claimed, "a refused hand-off acknowledges nothing");
    }
}
