//! The inbox under concurrency: many workers, fan-outs that must not deadlock, and two nodes (on Galera, two members) at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_conformance::vocabulary::{agent, claim_next, event, futures_join, inbox_of, poll, publish_to};
use inbox_core::{AckResult, AckState, EventId, InboxSeq};
use inbox_store::{AckItem, Acknowledge, ClaimNext};

case! {
    /// Sixteen workers share one recipient and drain a 10,000-event backlog while publishers
    /// keep inserting. Every event is acknowledged exactly once, none is lost, none is held by two
    /// leases at once, and no deadlock or lock timeout reaches a caller.
    async fn sixteen_workers_drain_a_backlog_while_publishers_insert(h: &Harness) {
        const BACKLOG: usize = 10_000;
        const LIVE_PUBLISHERS: usize = 2;
        const LIVE_EACH: usize = 500;
        const WORKERS: usize = 16;
        let inbox = inbox_of("t1", "busy");
        let published = Arc::new(Mutex::new(HashSet::new()));

        // The backlog, from four concurrent publishers (they serialize on the head row).
        let mut seeders = Vec::new();
        for p in 0..4 {
            let (store, published) = (h.store.clone(), published.clone());
            seeders.push(tokio::spawn(async move {
                for n in 0..BACKLOG / 4 {
                    let receipt = store
                        .inbox()
                        .publish(&event("t1", &["busy"], &format!("{{\"p\":{p},\"n\":{n}}}")))
                        .await
                        .expect("publish");
                    published.lock().unwrap().insert(receipt.deliveries[0].event_id);
                }
            }));
        }
        for seeder in seeders {
            seeder.await.unwrap();
        }

        let holders: Arc<Mutex<HashMap<EventId, usize>>> = Arc::default();
        let acks: Arc<Mutex<HashMap<EventId, u32>>> = Arc::default();
        let publishing_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for p in 0..LIVE_PUBLISHERS {
            let (store, published, done) = (h.store.clone(), published.clone(), publishing_done.clone());
            tasks.push(tokio::spawn(async move {
                for n in 0..LIVE_EACH {
                    let receipt = store
                        .inbox()
                        .publish(&event("t1", &["busy"], &format!("{{\"live\":{p},\"n\":{n}}}")))
                        .await
                        .expect("publish");
                    published.lock().unwrap().insert(receipt.deliveries[0].event_id);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        let total = BACKLOG + LIVE_PUBLISHERS * LIVE_EACH;
        for worker in 0..WORKERS {
            let (store, inbox, holders, acks, done) =
                (h.store.clone(), inbox.clone(), holders.clone(), acks.clone(), publishing_done.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let claimed = store.inbox().claim_next(&claim_next(&inbox, 10)).await.expect("claim");
                    if claimed.is_empty() {
                        let finished = done.load(std::sync::atomic::Ordering::SeqCst) == LIVE_PUBLISHERS;
                        if finished && acks.lock().unwrap().len() >= total {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    {
                        let mut holders = holders.lock().unwrap();
                        for c in &claimed {
                            if let Some(other) = holders.insert(c.event.event_id, worker) {
                                panic!("event {} held by workers {other} and {worker} at once", c.event.event_id);
                            }
                        }
                    }
                    let items = claimed
                        .iter()
                        .map(|c| AckItem::new(c.event.event_id, c.lease_token.clone(), AckResult::Completed))
                        .collect();
                    // Release holdership before the ack commits could let a double claim hide, so
                    // the holder entry is removed only after the ack succeeded.
                    let outcomes = store
                        .inbox()
                        .acknowledge(&Acknowledge { inbox: inbox.clone(), session_id: None, items })
                        .await
                        .expect("ack");
                    let mut holders = holders.lock().unwrap();
                    let mut acks = acks.lock().unwrap();
                    for (c, outcome) in claimed.iter().zip(outcomes) {
                        assert_eq!(outcome.expect("the lease holder's ack succeeds").state, AckState::Acked);
                        holders.remove(&c.event.event_id);
                        *acks.entry(c.event.event_id).or_default() += 1;
                    }
                }
            }));
        }
        let all = futures_join(tasks);
        tokio::time::timeout(Duration::from_secs(600), all)
            .await
            .expect("the workers finished within ten minutes");

        let published = published.lock().unwrap().clone();
        let acks = acks.lock().unwrap().clone();
        assert_eq!(published.len(), total, "every publish returned a distinct event");
        assert_eq!(acks.len(), total, "every event was acknowledged");
        assert!(acks.values().all(|n| *n == 1), "no event was acknowledged under two leases");
        assert!(acks.keys().all(|id| published.contains(id)));
        let n = total.to_string();
        assert_eq!(
            h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE ack_state = 'acked'", &[]).await.to_string(),
            n
        );
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE delivery_attempts <> 1", &[]).await, 0);
        assert_eq!(h.scalar("SELECT MAX(inbox_seq) AS n FROM agent_inbox", &[]).await.to_string(), n, "no gaps");
        assert_eq!(h.scalar("SELECT COUNT(DISTINCT inbox_seq) AS n FROM agent_inbox", &[]).await.to_string(), n);
        assert_eq!(h.store.inbox().head(&inbox).await.unwrap().head_seq, InboxSeq(total as u64));
    }
}

case! {
    /// Fan-outs to overlapping recipient sets, listed in different orders, run concurrently
    /// without a deadlock reaching a caller, and every recipient's sequence stays gap-free.
    galera async fn concurrent_fan_outs_never_deadlock(h: &Harness) {
        const TASKS: usize = 8;
        const EACH: usize = 40;
        let names = ["r0", "r1", "r2", "r3", "r4", "r5"];
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = h.store.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..EACH {
                    // A different subset and order each time: canonical locking must absorb it.
                    let mut chosen: Vec<&str> = names.to_vec();
                    chosen.rotate_left((t + n) % names.len());
                    chosen.truncate(2 + (t + n) % 4);
                    if (t + n) % 2 == 0 {
                        chosen.reverse();
                    }
                    store.inbox().publish(&event("t1", &chosen, "{}")).await.expect("fan-out publish");
                }
            }));
        }
        futures_join(tasks).await;
        for name in names {
            let rows = h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
            let max =
                h.scalar("SELECT MAX(inbox_seq) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
            assert_eq!(rows, max, "{name}: sequence has gaps or repeats");
            assert_eq!(h.store.inbox().head(&inbox_of("t1", name)).await.unwrap().head_seq, InboxSeq(max as u64));
        }
    }
}

case! {
    /// Two scavengers (two nodes) on the same expired leases return each event exactly once.
    galera async fn scavengers_on_two_nodes_do_each_event_once(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for _ in 0..60 {
            publish_to(h, "t1", "alpha", "{}").await;
        }
        let mut claimed = 0;
        while claimed < 60 {
            claimed += h
                .store
                .inbox()
                .claim_next(&ClaimNext { lease_ms: Some(5_000), ..claim_next(&inbox, 20) })
                .await
                .unwrap()
                .len();
        }
        h.clock.advance_ms(5_000);
        let second = h.second_node().await;
        let (a, b) = tokio::join!(
            async {
                let mut n = 0;
                for _ in 0..10 {
                    n += h.store.inbox().scavenge(7).await.unwrap().leases_returned;
                }
                n
            },
            async {
                let mut n = 0;
                for _ in 0..10 {
                    n += second.inbox().scavenge(7).await.unwrap().leases_returned;
                }
                n
            }
        );
        assert_eq!(a + b, 60, "every lease returned once across both nodes ({a} + {b})");
        assert_eq!(
            h.scalar(
                "SELECT COUNT(*) AS n FROM agent_inbox WHERE ack_state = 'available' AND delivery_attempts = 1",
                &[]
            )
            .await,
            60
        );
    }
}

case! {
    /// Claimers on two nodes (on Galera, two members, where row locks do not reach across) never
    /// hold one event at once, every acknowledgement made right after a claim finds its lease, and
    /// every event is acknowledged exactly once. On Galera, the loser of two claims of one row fails
    /// certification at COMMIT and is retried inside the store; no lease it returned is unreal.
    galera async fn claimers_on_two_nodes_never_share_an_event(h: &Harness) {
        const EVENTS: usize = 200;
        const WORKERS_PER_NODE: usize = 4;
        let inbox = inbox_of("t1", "shared");
        for n in 0..EVENTS {
            h.store.inbox().publish(&event("t1", &["shared"], &format!("{{\"n\":{n}}}"))).await.unwrap();
        }
        let second = h.second_node().await;
        let holders: Arc<Mutex<HashMap<EventId, usize>>> = Arc::default();
        let acked: Arc<Mutex<HashMap<EventId, u32>>> = Arc::default();
        let mut tasks = Vec::new();
        for worker in 0..2 * WORKERS_PER_NODE {
            let store = if worker % 2 == 0 { h.store.clone() } else { second.clone() };
            let (inbox, holders, acked) = (inbox.clone(), holders.clone(), acked.clone());
            tasks.push(tokio::spawn(async move {
                let mut idle_rounds = 0;
                while idle_rounds < 3 {
                    let claimed = store.inbox().claim_next(&claim_next(&inbox, 5)).await.expect("claim");
                    if claimed.is_empty() {
                        idle_rounds += 1;
                        continue;
                    }
                    idle_rounds = 0;
                    for c in &claimed {
                        if let Some(other) = holders.lock().unwrap().insert(c.event.event_id, worker) {
                            panic!("event {} held by workers {other} and {worker} at once", c.event.event_id);
                        }
                    }
                    let items: Vec<AckItem> = claimed
                        .iter()
                        .map(|c| AckItem::new(c.event.event_id, c.lease_token.clone(), AckResult::Completed))
                        .collect();
                    let outcomes = store
                        .inbox()
                        .acknowledge(&Acknowledge { inbox: inbox.clone(), session_id: None, items })
                        .await
                        .expect("acknowledge");
                    for (outcome, c) in outcomes.iter().zip(&claimed) {
                        outcome.as_ref().unwrap_or_else(|e| panic!("the lease just granted was refused: {e}"));
                        holders.lock().unwrap().remove(&c.event.event_id);
                        *acked.lock().unwrap().entry(c.event.event_id).or_default() += 1;
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let acked = acked.lock().unwrap();
        assert_eq!(acked.len(), EVENTS, "every event acknowledged");
        assert!(acked.values().all(|n| *n == 1), "each event acknowledged once");
        eprintln!(
            "contention retries: {} on the first node, {} on the second",
            h.store.contention_retries(),
            second.contention_retries()
        );
    }
}

case! {
    /// Publishers on two nodes (on Galera, two members) fanning out to the same two inboxes: each
    /// inbox's sequence is dense, and both inboxes list the publishes in one order (commit order).
    galera async fn publishers_on_two_nodes_keep_sequences_dense_and_in_one_order(h: &Harness) {
        const PER_PUBLISHER: usize = 40;
        let second = h.second_node().await;
        let mut tasks = Vec::new();
        for publisher in 0..4 {
            let store = if publisher % 2 == 0 { h.store.clone() } else { second.clone() };
            tasks.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for n in 0..PER_PUBLISHER {
                    let receipt = store
                        .inbox()
                        .publish(&event("t1", &["left", "right"], &format!("{{\"p\":{publisher},\"n\":{n}}}")))
                        .await
                        .expect("publish");
                    let seq_of = |name: &str| {
                        receipt.deliveries.iter().find(|d| d.recipient == agent(name)).unwrap().inbox_seq.get()
                    };
                    seqs.push((seq_of("left"), seq_of("right")));
                }
                seqs
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            let seqs = task.await.unwrap();
            assert!(seqs.windows(2).all(|w| w[0].0 < w[1].0), "one publisher's events keep its order");
            all.extend(seqs);
        }
        all.sort();
        let total = 4 * PER_PUBLISHER as u64;
        assert_eq!(all.iter().map(|s| s.0).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>(), "left is dense");
        assert_eq!(
            all.iter().map(|s| s.1).collect::<Vec<_>>(),
            (1..=total).collect::<Vec<_>>(),
            "right is dense and in the same order as left"
        );
        // A read right after, on the other node, sees every commit.
        let page = second.inbox().poll_after_cursor(&poll(&inbox_of("t1", "right"), 0, 500)).await.unwrap();
        assert_eq!(page.events.len() as u64, total);
    }
}

case! {
    /// A caller may be dropped at any await (a server drops a request's future when its client
    /// disconnects): a publish dropped at its first, second, ... pending await in turn never
    /// leaves the store unable to write. Each step polls once more than the last and waits for
    /// the wake it asked for; which await a step reaches also depends on how fast the database
    /// answers, so the sweep runs several times. (On SQLite a publish dropped after its
    /// `BEGIN IMMEDIATE` took effect, before sqlx made the transaction that rolls back on drop,
    /// left the one writer connection inside a transaction: every later write failed with
    /// "begin_with at non-zero transaction depth", and a server behind a proxy that cut
    /// connections stopped accepting publishes and claims for good.)
    async fn a_publish_dropped_at_any_await_leaves_the_store_writable(h: &Harness) {
        const SWEEPS: usize = 5;
        const POLLS_MAX: usize = 200;
        let inbox = inbox_of("t1", "dropped");
        let mut published = 0;
        for _ in 0..SWEEPS {
            for pending_polls in 1..=POLLS_MAX {
                let dropped = event("t1", &["dropped"], "{}");
                let mut publish = Box::pin(h.store.inbox().publish(&dropped));
                let mut finished = false;
                for _ in 0..pending_polls {
                    let wake = Arc::new(Wake::default());
                    let waker = std::task::Waker::from(wake.clone());
                    if let std::task::Poll::Ready(receipt) = publish.as_mut().poll(&mut std::task::Context::from_waker(&waker)) {
                        receipt.expect("a publish polled to the end");
                        finished = true;
                        break;
                    }
                    tokio::time::timeout(Duration::from_secs(30), wake.0.notified())
                        .await
                        .expect("a pending publish is woken");
                }
                drop(publish);
                published += usize::from(finished);
                let next = event("t1", &["dropped"], "{}");
                let next = tokio::time::timeout(Duration::from_secs(30), h.store.inbox().publish(&next));
                if let Err(err) = next.await.expect("a publish after a dropped one does not hang") {
                    panic!("a publish after one dropped at pending await {pending_polls} failed: {err}");
                }
                published += 1;
                if finished {
                    break;
                }
            }
        }
        let page = h.store.inbox().poll_after_cursor(&poll(&inbox, 0, 500)).await.unwrap();
        assert!(page.events.len() >= published, "every publish that finished is there");
    }
}

/// A waker that counts as a permit: a wake is kept until awaited (`Notify::notify_one`).
#[derive(Default)]
struct Wake(tokio::sync::Notify);

impl std::task::Wake for Wake {
    fn wake(self: Arc<Self>) {
        self.0.notify_one();
    }
}
