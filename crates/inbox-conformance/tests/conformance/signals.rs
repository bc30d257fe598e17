//! The outbox signals every node's notifier reads: visible only after commit.

use inbox_conformance::vocabulary::{agent, event, publish_to, tenant};
use inbox_core::InboxSeq;
use inbox_store::Dialect;

case! {
    /// A signal row becomes readable only when its publish commits, a rolled-back publish leaves
    /// none, a skipped id can be asked for again, and old rows are deleted.
    galera async fn signals_appear_only_after_commit(h: &Harness) {
        let start = h.store.signals().start_id(h.store.now().minus_ms(10_000)).await.unwrap();
        assert_eq!(start, 0, "an empty table starts at 0");
        let publish = event("t1", &["alpha", "beta"], "{}");
        let read_all = || async { h.store.signals().after(0, 100).await.unwrap() };
        match h.store.dialect() {
            Dialect::MySql => {
                use sqlx::Connection as _;
                let mut conn = sqlx::MySqlConnection::connect(&h.url).await.unwrap();
                for commit in [false, true] {
                    let mut tx = conn.begin().await.unwrap();
                    h.store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
                    assert!(read_all().await.is_empty(), "nothing is readable before commit");
                    if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
                }
            }
            Dialect::Sqlite => {
                use sqlx::Connection as _;
                let mut conn = sqlx::SqliteConnection::connect(&h.url).await.unwrap();
                for commit in [false, true] {
                    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.unwrap();
                    h.store.inbox().publish_in(&mut *tx, &publish).await.unwrap();
                    assert!(read_all().await.is_empty(), "nothing is readable before commit");
                    if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
                }
            }
        }
        let signals = read_all().await;
        assert_eq!(signals.len(), 1, "only the committed publish signals: {signals:?}");
        let signal = &signals[0];
        assert_eq!(signal.tenant_id, tenant("t1"));
        assert_eq!(signal.heads, vec![(agent("alpha"), InboxSeq(1)), (agent("beta"), InboxSeq(1))]);
        publish_to(h, "t1", "alpha", "{}").await;
        let after = h.store.signals().after(signal.outbox_id, 100).await.unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].heads, vec![(agent("alpha"), InboxSeq(2))]);
        let again = h.store.signals().by_ids(&[after[0].outbox_id, after[0].outbox_id + 1_000]).await.unwrap();
        assert_eq!(again, after, "ids that exist are returned, others are not");
        assert_eq!(
            h.store.signals().start_id(h.store.now().minus_ms(10_000)).await.unwrap(),
            signal.outbox_id - 1,
            "a starting notifier re-reads recent signals"
        );
        h.clock.advance_ms(60_000);
        assert_eq!(
            h.store.signals().start_id(h.store.now().minus_ms(10_000)).await.unwrap(),
            after[0].outbox_id,
            "and starts after old ones"
        );
        assert_eq!(h.store.signals().delete_before(h.store.now(), 1).await.unwrap(), 1, "bounded");
        assert_eq!(h.store.signals().delete_before(h.store.now(), 100).await.unwrap(), 1);
        assert!(read_all().await.is_empty());
    }
}
