//! Fair claims (`inbox/fairness.rs`): within one priority a fair claim interleaves the
//! fairness keys of an inbox's events, quiet keys first, and keeps every lease guarantee.

use inbox_conformance::vocabulary::{ack_of, ack_with, claim_next, event, inbox_of, refusal};
use inbox_core::{AckResult, FairnessKey, Priority, RecipientKey, RefusalReason};
use inbox_store::{ClaimNext, ClaimOrder, ClaimedEvent, Publish, Refusal, Release};

fn keyed(key: &str, n: usize) -> Publish {
    let mut publish = event("t1", &["alpha"], &format!("{{\"key\":\"{key}\",\"n\":{n}}}"));
    publish.fairness_key = Some(FairnessKey::new(key).unwrap());
    publish
}

fn fair(inbox: &RecipientKey, limit: u32) -> ClaimNext {
    ClaimNext { order: ClaimOrder::Fair, ..claim_next(inbox, limit) }
}

fn seqs(claimed: &[ClaimedEvent]) -> Vec<u64> {
    claimed.iter().map(|c| c.event.inbox_seq.get()).collect()
}

case! {
    /// A burst from one key does not hold back another's events: ranks alternate between two
    /// busy keys (ties in sequence order), a key that arrives later starts just past what has
    /// been served, and a batch of publishes ranks like the same publishes one by one.
    galera async fn fair_claims_interleave_keys_quiet_ones_first(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for n in 0..30 {
            h.store.inbox().publish(&keyed("room-a", n)).await.unwrap();
        }
        let quiet: Vec<Publish> = (0..3).map(|n| keyed("room-b", n)).collect();
        for answer in h.store.inbox().publish_batch(&quiet).await {
            answer.unwrap();
        }
        let first = h.store.inbox().claim_next(&fair(&inbox, 6)).await.unwrap();
        assert_eq!(seqs(&first), [1, 31, 2, 32, 3, 33], "room-b's three events within the first claim");
        let next = h.store.inbox().claim_next(&fair(&inbox, 4)).await.unwrap();
        assert_eq!(seqs(&next), [4, 5, 6, 7], "with room-b drained, room-a in order");

        // Served so far: rank 7. A newcomer's first event ranks 8, beside room-a's next one,
        // not behind room-a's 23 waiting events.
        h.store.inbox().publish(&keyed("person-c", 0)).await.unwrap();
        let after = h.store.inbox().claim_next(&fair(&inbox, 2)).await.unwrap();
        assert_eq!(seqs(&after), [8, 34]);

        // Sequence order is untouched: polling and sequence claims do not know ranks exist.
        let rest = h.store.inbox().claim_next(&claim_next(&inbox, 100)).await.unwrap();
        assert_eq!(seqs(&rest), (9..=30).collect::<Vec<_>>());
    }
}

case! {
    /// Without fair claims the same events are claimed oldest first, exactly as if they had no
    /// keys; and events published without a key (before the tenant turned fair claims on, or
    /// through the SQL procedure) are claimed first by a fair claim, oldest first.
    async fn sequence_claims_ignore_keys_and_unkeyed_events_go_first(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for n in 0..4 {
            h.store.inbox().publish(&keyed(if n < 2 { "a" } else { "b" }, n)).await.unwrap();
        }
        let in_order = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
        assert_eq!(seqs(&in_order), [1, 2]);

        h.store.inbox().publish(&event("t1", &["alpha"], "{}")).await.unwrap();
        h.store.inbox().publish(&keyed("a", 9)).await.unwrap();
        h.store.inbox().publish(&event("t1", &["alpha"], "{}")).await.unwrap();
        let claimed = h.store.inbox().claim_next(&fair(&inbox, 10)).await.unwrap();
        assert_eq!(seqs(&claimed), [5, 7, 3, 4, 6], "unranked first, then by rank");
    }
}

case! {
    /// Priority still comes first; a released event keeps its rank and goes back to the
    /// front; a stale token is refused and a held lease is never claimed twice.
    galera async fn fair_claims_keep_priority_and_every_lease_guarantee(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for n in 0..5 {
            h.store.inbox().publish(&keyed("busy", n)).await.unwrap();
        }
        let mut urgent = keyed("busy", 5);
        urgent.priority = Priority::Urgent;
        h.store.inbox().publish(&urgent).await.unwrap();

        let first = h.store.inbox().claim_next(&fair(&inbox, 2)).await.unwrap();
        assert_eq!(seqs(&first), [6, 1], "urgent first, whatever its rank");
        let release = Release {
            inbox: inbox.clone(),
            event_id: first[1].event.event_id,
            lease_token: first[1].lease_token.clone(),
            retry_after_ms: 1_000,
            reason: None,
        };
        h.store.inbox().release(&release).await.unwrap();
        h.clock.advance_ms(1_000);
        let again = h.store.inbox().claim_next(&fair(&inbox, 2)).await.unwrap();
        assert_eq!(seqs(&again), [1, 2], "a released event keeps its place");
        assert_eq!(again[0].event.lifecycle.delivery_attempts, 2);

        let stale = ack_with(&inbox, again[0].event.event_id, &first[1].lease_token, AckResult::Completed);
        let outcome = h.store.inbox().acknowledge(&stale).await.unwrap();
        assert_eq!(refusal(&outcome[0]), Refusal::Refused(RefusalReason::LeaseMismatch));
        let outcome = h.store.inbox().acknowledge(&ack_of(&inbox, &again[0])).await.unwrap();
        assert!(outcome[0].is_ok());

        let rest = h.store.inbox().claim_next(&fair(&inbox, 10)).await.unwrap();
        assert_eq!(seqs(&rest), [3, 4, 5], "held leases are skipped, never claimed twice");
        assert!(h.store.inbox().claim_next(&fair(&inbox, 10)).await.unwrap().is_empty());
    }
}

case! {
    /// Keys with nothing waiting past the served rank are forgotten as claims pass every 1,024
    /// ranks, so the key rows stay about as many as the keys with a backlog; a forgotten key
    /// that publishes again starts just past what has been served, as a new one does.
    async fn drained_keys_are_forgotten(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let mut batch: Vec<Publish> = (0..5).map(|n| keyed("brief", n)).collect();
        batch.extend((0..1_100).map(|n| keyed("long", n)));
        for chunk in batch.chunks(200) {
            for answer in h.store.inbox().publish_batch(chunk).await {
                answer.unwrap();
            }
        }
        let keys = || h.scalar("SELECT COUNT(*) AS n FROM inbox_fair_key", &[]);
        assert_eq!(keys().await, 2);
        let mut claimed = 0;
        while claimed < 1_050 {
            let taken = h.store.inbox().claim_next(&fair(&inbox, 50)).await.unwrap();
            assert!(!taken.is_empty());
            claimed += taken.len();
        }
        assert_eq!(keys().await, 1, "brief's row is gone, long's backlog keeps its own");
        h.store.inbox().publish(&keyed("brief", 9)).await.unwrap();
        let served = h.scalar("SELECT served_rank AS n FROM inbox_fair_clock", &[]).await;
        let last = h.scalar("SELECT last_rank AS n FROM inbox_fair_key WHERE fairness_key = 'brief'", &[]).await;
        assert_eq!(last, served + 1);
    }
}
