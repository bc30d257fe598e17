//! Batched publishes: per-recipient order without gaps, deduplication within and across batches, a refused batch mate failing alone.

use inbox_store::Field;
use std::collections::{BTreeMap, HashSet};

use inbox_conformance::vocabulary::{event, futures_join, inbox_of, poll};
use inbox_core::{DeduplicationKey, EventId, InboxSeq};
use inbox_store::{Publish, StoreError};

fn keyed(recipients: &[&str], key: &str) -> Publish {
    let mut publish = event("t1", recipients, "{}");
    publish.deduplication_key = Some(DeduplicationKey::new(key).unwrap());
    publish
}

case! {
    /// Concurrent batches (and single publishes) on two nodes: every recipient's sequence is
    /// 1..=n with no gap or repeat, its head is n, and within a batch a recipient's publishes take
    /// sequences in batch order.
    async fn batched_publishes_keep_per_recipient_order_without_gaps(h: &Harness) {
        const TASKS: usize = 6;
        const ROUNDS: usize = 25;
        let names = ["b0", "b1", "b2", "b3", "b4"];
        let second = h.second_node().await;
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = if t % 2 == 0 { h.store.clone() } else { second.clone() };
            tasks.push(tokio::spawn(async move {
                for n in 0..ROUNDS {
                    let size = 1 + (t + n) % 5;
                    let batch: Vec<Publish> = (0..size)
                        .map(|i| {
                            let mut chosen: Vec<&str> = names.to_vec();
                            chosen.rotate_left((t + n + i) % names.len());
                            chosen.truncate(1 + (t + i) % 3);
                            event("t1", &chosen, &format!("{{\"t\":{t},\"n\":{n},\"i\":{i}}}"))
                        })
                        .collect();
                    let answers = store.inbox().publish_batch(&batch).await;
                    assert_eq!(answers.len(), batch.len());
                    let mut last: BTreeMap<String, InboxSeq> = BTreeMap::new();
                    for (publish, answer) in batch.iter().zip(answers) {
                        let receipt = answer.expect("a batched publish");
                        assert_eq!(receipt.deliveries.len(), publish.recipients.len());
                        assert!(receipt.outbox_id.is_some(), "a fresh publish has its signal");
                        for d in &receipt.deliveries {
                            let previous = last.insert(d.recipient.id.as_str().to_owned(), d.inbox_seq);
                            assert!(previous.is_none_or(|p| p < d.inbox_seq), "batch order is sequence order");
                        }
                    }
                }
            }));
        }
        futures_join(tasks).await;
        for name in names {
            let rows = h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
            let max =
                h.scalar("SELECT MAX(inbox_seq) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
            assert!(rows > 0);
            assert_eq!(rows, max, "{name}: sequence has gaps or repeats");
            assert_eq!(h.store.inbox().head(&inbox_of("t1", name)).await.unwrap().head_seq, InboxSeq(max as u64));
            let page = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", name), 0, 500)).await.unwrap();
            let seqs: Vec<u64> = page.events.iter().map(|e| e.inbox_seq.get()).collect();
            assert_eq!(seqs, (1..=max as u64).collect::<Vec<_>>(), "{name}: readable in order");
        }
    }
}

case! {
    /// Two publishes of one key in a batch get one event per recipient, the second marked
    /// deduplicated; a later batch with the key gets the same events; a recipient the key has not
    /// reached yet gets a row of its own.
    async fn batched_publishes_deduplicate_within_and_across_batches(h: &Harness) {
        let first = h
            .store
            .inbox()
            .publish_batch(&[keyed(&["x", "y"], "k1"), keyed(&["x", "z"], "k1"), event("t1", &["x"], "{}")])
            .await;
        let [a, b, c] = <[_; 3]>::try_from(first).unwrap().map(|r: Result<_, StoreError>| r.unwrap());
        let id = |receipt: &inbox_store::PublishReceipt, who: &str| {
            let d = receipt.deliveries.iter().find(|d| d.recipient.id.as_str() == who).unwrap();
            (d.event_id, d.inbox_seq, d.deduplicated)
        };
        let (ax, ax_seq, ax_dup) = id(&a, "x");
        assert!(!ax_dup && ax_seq == InboxSeq(1));
        assert_eq!(id(&b, "x"), (ax, ax_seq, true), "the batch-mate with the same key gets the same event");
        let (bz, _, bz_dup) = id(&b, "z");
        assert!(!bz_dup, "a recipient the key had not reached gets its own row");
        assert_eq!(id(&c, "x").1, InboxSeq(2), "an unkeyed batch-mate takes the next sequence");

        let later = h.store.inbox().publish_batch(&[keyed(&["y", "z"], "k1"), keyed(&["y"], "k2")]).await;
        let [d, e] = <[_; 2]>::try_from(later).unwrap().map(|r: Result<_, StoreError>| r.unwrap());
        assert_eq!(id(&d, "y"), (id(&a, "y").0, InboxSeq(1), true), "across batches too");
        assert_eq!(id(&d, "z"), (bz, InboxSeq(1), true));
        assert!(d.outbox_id.is_none(), "nothing new, no signal");
        assert_eq!(id(&e, "y").1, InboxSeq(2));

        let rows = h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE deduplication_key = ?", &["k1"]).await;
        assert_eq!(rows, 3, "one row per recipient for k1: x, y and z");
        let ids: HashSet<EventId> = [ax, id(&a, "y").0, bz].into();
        assert_eq!(ids.len(), 3);
    }
}

case! {
    /// A publish that fails its own checks, or that the database refuses, fails alone: its
    /// batch-mates commit, and nothing of it is written.
    async fn a_batch_mate_refused_by_the_database_fails_alone(h: &Harness) {
        // A trigger stands in for anything the database may refuse in one row.
        let trigger = match h.store.dialect() {
            inbox_store::Dialect::MySql => {
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON agent_inbox FOR EACH ROW \
                 BEGIN IF NEW.event_type = 'poison' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison'; END IF; END"
            }
            inbox_store::Dialect::Sqlite => {
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON agent_inbox FOR EACH ROW \
                 WHEN NEW.event_type = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END"
            }
        };
        h.execute_raw(trigger).await;
        let mut poison = event("t1", &["p1", "p2"], "{\"poison\":true}");
        poison.event_type = inbox_core::EventType::new("poison").unwrap();
        let mut empty = event("t1", &["p1"], "{}");
        empty.recipients.clear();
        let answers = h
            .store
            .inbox()
            .publish_batch(&[
                event("t1", &["p1"], "{\"n\":1}"),
                poison,
                empty,
                event("t1", &["p1", "p2"], "{\"n\":2}"),
            ])
            .await;
        let [ok1, refused, invalid, ok2] = <[_; 4]>::try_from(answers).unwrap();
        assert!(matches!(refused, Err(StoreError::Database(_))), "{refused:?}");
        assert!(matches!(invalid, Err(StoreError::Invalid { field: Field::Recipients, .. })), "{invalid:?}");
        let (ok1, ok2) = (ok1.unwrap(), ok2.unwrap());
        assert_eq!(ok1.deliveries[0].inbox_seq, InboxSeq(1));
        assert_eq!(ok2.deliveries.iter().map(|d| d.inbox_seq.get()).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE event_type = ?", &["poison"]).await, 0);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox", &[]).await, 3);
    }
}

case! {
    /// Batches of fan-outs in every order, on two nodes, over the same recipients: all commit.
    async fn batched_fan_outs_sharing_recipients_never_deadlock(h: &Harness) {
        const TASKS: usize = 6;
        const ROUNDS: usize = 15;
        let names = ["f0", "f1", "f2", "f3", "f4", "f5"];
        let second = h.second_node().await;
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = if t % 2 == 0 { h.store.clone() } else { second.clone() };
            tasks.push(tokio::spawn(async move {
                for n in 0..ROUNDS {
                    let batch: Vec<Publish> = (0..4)
                        .map(|i| {
                            let mut chosen: Vec<&str> = names.to_vec();
                            chosen.rotate_left((t * 3 + n + i) % names.len());
                            chosen.truncate(2 + (t + n + i) % 4);
                            if (t + i) % 2 == 1 {
                                chosen.reverse();
                            }
                            event("t1", &chosen, "{}")
                        })
                        .collect();
                    for answer in store.inbox().publish_batch(&batch).await {
                        answer.expect("no batch fails, none deadlocks for good");
                    }
                }
            }));
        }
        futures_join(tasks).await;
        for name in names {
            let rows = h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
            let max =
                h.scalar("SELECT MAX(inbox_seq) AS n FROM agent_inbox WHERE recipient_id = ?", &[name]).await;
            assert_eq!(rows, max, "{name}: sequence has gaps or repeats");
        }
    }
}
