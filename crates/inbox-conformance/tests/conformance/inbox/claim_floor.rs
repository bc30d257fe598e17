//! The claim floor (issue 27): claims start past what is settled, yet find every event that
//! comes back below it, keep priority-then-seq order across buckets, and, on MariaDB, read a
//! bounded number of index entries while an old read view holds back purge.

use inbox_conformance::vocabulary::{ack_of, claim_next, event, inbox_of, operator};
use inbox_conformance::{Backend, Harness};
use inbox_core::{AckResult, Clock, Priority, RecipientKey};
use inbox_store::{AckItem, Acknowledge, ClaimNext, ClaimedEvent, Publish, Release};
use sqlx::{Connection as _, Executor as _};

/// Publishes `n` events to `inbox`'s agent in batches of 50.
async fn publish_n(h: &Harness, inbox: &RecipientKey, n: usize) {
    let agent = inbox.recipient.id.as_str();
    let publishes: Vec<Publish> =
        (0..n).map(|i| event(inbox.tenant_id.as_str(), &[agent], &format!("{{\"n\":{i}}}"))).collect();
    for chunk in publishes.chunks(50) {
        for receipt in h.store.inbox().publish_batch(chunk).await {
            receipt.unwrap();
        }
    }
}

/// Claims up to `limit` and acknowledges every one; the seqs claimed.
async fn claim_and_ack(h: &Harness, inbox: &RecipientKey, limit: u32) -> Vec<u64> {
    let claimed = h.store.inbox().claim_next(&claim_next(inbox, limit)).await.unwrap();
    ack_all(h, inbox, &claimed).await;
    claimed.iter().map(|c| c.event.inbox_seq.get()).collect()
}

async fn ack_all(h: &Harness, inbox: &RecipientKey, claimed: &[ClaimedEvent]) {
    if claimed.is_empty() {
        return;
    }
    let items = claimed
        .iter()
        .map(|c| AckItem::new(c.event.event_id, c.lease_token.clone(), AckResult::Completed))
        .collect();
    for outcome in h
        .store
        .inbox()
        .acknowledge(&Acknowledge { inbox: inbox.clone(), session_id: None, items })
        .await
        .unwrap()
    {
        outcome.unwrap();
    }
}

case! {
    /// Events that come back below the floor are claimed again, first: one released, one
    /// whose lease ran out (after its backoff), one an operator requeued, one published for
    /// later; and an urgent event published after hundreds of others is claimed before them.
    galera async fn claims_find_events_that_come_back_below_the_floor(h: &Harness) {
        let inbox = inbox_of("floor", "alpha");
        publish_n(h, &inbox, 300).await;
        // Three held back: to release, to let lapse, to fail into dead letters.
        let held = h.store.inbox().claim_next(&ClaimNext { lease_ms: Some(5_000), ..claim_next(&inbox, 3) }).await.unwrap();
        assert_eq!(held.iter().map(|c| c.event.inbox_seq.get()).collect::<Vec<_>>(), [1, 2, 3]);
        let mut later = event("floor", &["alpha"], "{\"later\":true}");
        later.available_at = Some(h.clock.now().plus_ms(120_000));
        let delayed = h.store.inbox().publish(&later).await.unwrap().deliveries.remove(0).inbox_seq.get();
        publish_n(h, &inbox, 250).await;
        let mut seen = Vec::new();
        loop {
            let seqs = claim_and_ack(h, &inbox, 10).await;
            if seqs.is_empty() {
                break;
            }
            seen.extend(seqs);
        }
        assert_eq!(seen.len(), 547, "every ready event once: 550 published, 3 held, 1 delayed");
        assert!(!seen.contains(&delayed));
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "oldest first");

        // Released: claimable at once, below everything.
        let release = Release {
            inbox: inbox.clone(),
            event_id: held[0].event.event_id,
            lease_token: held[0].lease_token.clone(),
            retry_after_ms: 0,
            reason: None,
        };
        h.store.inbox().release(&release).await.unwrap();
        // Failed: dead-lettered, then requeued by an operator.
        let failed = inbox_conformance::vocabulary::ack_with(&inbox, held[2].event.event_id, &held[2].lease_token, AckResult::Failed);
        h.store.inbox().acknowledge(&failed).await.unwrap().pop().unwrap().unwrap();
        h.store.inbox().requeue(&inbox, &[held[2].event.event_id], &operator()).await.unwrap().pop().unwrap().unwrap();
        assert_eq!(claim_and_ack(h, &inbox, 10).await, [1, 3]);

        // Lapsed: back after the lease and the backoff.
        h.clock.advance_ms(6_000);
        h.store.inbox().scavenge(100).await.unwrap();
        h.clock.advance_ms(120_000);
        assert_eq!(claim_and_ack(h, &inbox, 10).await, [2, delayed], "the lapsed event, then the one published for later");

        // Priority before seq, across buckets.
        publish_n(h, &inbox, 200).await;
        let mut urgent = event("floor", &["alpha"], "{\"urgent\":true}");
        urgent.priority = Priority::Urgent;
        let urgent_seq = h.store.inbox().publish(&urgent).await.unwrap().deliveries.remove(0).inbox_seq.get();
        let first = claim_and_ack(h, &inbox, 2).await;
        assert_eq!(first[0], urgent_seq);
        assert_eq!(first[1], delayed + 251, "then the oldest of the normal ones");
    }
}

case! {
    /// The purge lag behind the gauges: MySQL/MariaDB report InnoDB's history list length and,
    /// with the PROCESS privilege the tests have, the oldest open transaction (one is held open
    /// here, on one server: Galera members each report their own); SQLite reports neither.
    galera async fn the_purge_lag_is_read_where_the_server_exposes_it(h: &Harness) {
        let lag = h.store.purge_lag().await.unwrap();
        if h.backend == Backend::Sqlite {
            assert_eq!(lag, inbox_store::PurgeLag::default());
            return;
        }
        assert!(lag.history_list_length.is_some(), "{lag:?}");
        if h.backend == Backend::Galera {
            // Each member has its own transactions; the store's connections reach any member.
            return;
        }
        let mut open = sqlx::MySqlConnection::connect(&h.url).await.expect("a connection");
        open.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT").await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let age = h.store.purge_lag().await.unwrap().oldest_transaction_age_seconds;
            if age.is_some_and(|a| a >= 1) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the open transaction's age never showed: {age:?}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        open.execute("COMMIT").await.unwrap();
    }
}

/// On MariaDB: one connection holds a read view while 1,500 events are published, claimed and
/// acknowledged and some leases run out and are swept; the claim statement then reads a
/// bounded number of pages. Before the floor it read every entry the view kept (about two
/// pages each: over 3,000 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_read_a_bounded_number_of_pages_while_a_read_view_is_held() {
    let h = Harness::new(Backend::MySql).await;
    let inbox = inbox_of("purge", "alpha");
    publish_n(&h, &inbox, 20).await;
    while !claim_and_ack(&h, &inbox, 10).await.is_empty() {}

    let mut view = sqlx::MySqlConnection::connect(&h.url).await.expect("a connection");
    view.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT").await.unwrap();
    view.execute("SELECT COUNT(*) FROM agent_inbox").await.unwrap();

    for round in 0..150 {
        publish_n(&h, &inbox, 10).await;
        let claimed = h
            .store
            .inbox()
            .claim_next(&ClaimNext { lease_ms: Some(1_000), ..claim_next(&inbox, 10) })
            .await
            .unwrap();
        // One in ten rounds leaves its first event to its lease.
        let lapsing = usize::from(round % 10 == 0);
        for c in &claimed[lapsing..] {
            h.store.inbox().acknowledge(&ack_of(&inbox, c)).await.unwrap().pop().unwrap().unwrap();
        }
        if round % 10 == 9 {
            h.clock.advance_ms(2_000);
            h.store.inbox().scavenge(100).await.unwrap();
            h.clock.advance_ms(600_000);
        }
    }
    while !claim_and_ack(&h, &inbox, 10).await.is_empty() {}
    let history: i64 = h
        .scalar("SELECT CAST(count AS SIGNED) AS n FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len'", &[])
        .await;
    let plan = h.store.inbox().analyze_claim(&inbox, 10).await.unwrap().expect("MariaDB analyses");
    view.execute("COMMIT").await.unwrap();
    let _ = view.close().await;

    assert_eq!(plan.key.as_deref(), Some(inbox_store::CLAIM_INDEX), "{plan:?}");
    assert!(!plan.filesort, "{plan:?}");
    let pages = plan.pages_accessed.expect("MariaDB counts the pages a statement touched");
    eprintln!("history list length {history}; the claim touched {pages} pages: {plan:?}");
    assert!(history > 1_000, "the view held purge back (history list length {history})");
    assert!(
        pages <= 600,
        "the drained inbox's claim touched {pages} pages while a read view was held: {plan:?}"
    );
}
