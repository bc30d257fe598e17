//! The engine: the start-up check (and engines that break it, simulated by a rewriting forwarder), and idempotent migrations.

use inbox_conformance::proxy::{Forwarder, Rewrite};
use inbox_conformance::{Backend, Harness};
use inbox_store::{ConnectOptions, Dialect, SqlStore, StoreConfig, StoreError};

case! {
    /// Running migrations again changes nothing.
    galera async fn migrations_are_idempotent(h: &Harness) {
        assert_eq!(h.store.migrate().await.unwrap(), 0);
        assert!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_migrations", &[]).await >= 1);
        h.store.ping().await.unwrap();
    }
}

case! {
    /// The engine check passes on every supported backend and names what it found; on Galera the
    /// store reads with `wsrep_sync_wait`.
    galera async fn engine_check_proves_skip_locked_and_read_committed(h: &Harness) {
        let report = h.store.check_engine().await.expect("a supported engine passes the check");
        assert!(report.locks_checked, "two probe connections reached one server");
        let engine = h.store.engine();
        match h.backend {
            Backend::Sqlite => assert_eq!(engine.product, inbox_store::Product::Sqlite),
            Backend::MySql => assert!(!engine.galera, "{engine}"),
            Backend::Galera => {
                assert!(engine.galera, "{engine} is detected as a Galera member");
                assert!(engine.to_string().contains("Galera"), "{engine}");
                let sync_wait = h.scalar("SELECT CAST(@@wsrep_sync_wait AS SIGNED) AS n", &[]).await;
                assert_eq!(sync_wait, i64::from(inbox_store::GALERA_SYNC_WAIT));
            }
        }
        // Nothing is left behind in the probe table.
        if h.store.dialect() == Dialect::MySql {
            assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_engine_probe", &[]).await, 0);
        }
    }
}

// An engine that breaks what claims rest on is refused at start. Such an engine is simulated by
// a forwarder in front of the real MariaDB that rewrites the SQL on its way (the clause
// dropped, or another isolation level asked for), as a MySQL-compatible engine that accepts
// and ignores it would behave; the same server reached directly passes.

async fn check_through(h: &Harness, rewrite: Rewrite) -> Result<(), StoreError> {
    let forwarder = Forwarder::rewriting(h.server_addr(), rewrite).await;
    let store =
        SqlStore::connect(&ConnectOptions::new(h.url_through(forwarder.addr)), StoreConfig::default())
            .await
            .expect("the store connects through the forwarder");
    let checked = store.check_engine().await.map(drop);
    store.close().await;
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_locked_that_does_not_skip_is_refused() {
    let h = Harness::new(Backend::MySql).await;
    h.store.check_engine().await.expect("the real server passes");
    let refused = check_through(&h, Rewrite { from: " FOR UPDATE SKIP LOCKED", to: "" }).await;
    match refused {
        Err(StoreError::EngineRefused { engine, property }) => {
            assert!(engine.starts_with("MariaDB ") || engine.starts_with("MySQL "), "{engine}");
            assert!(property.contains("SKIP LOCKED"), "{property}");
            let sentence = StoreError::EngineRefused { engine, property }.to_string();
            assert!(sentence.contains("cannot run agent-inbox"), "{sentence}");
        }
        other => panic!("an engine whose SKIP LOCKED does not skip must be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_ignores_read_committed_is_refused() {
    let h = Harness::new(Backend::MySql).await;
    let refused =
        check_through(&h, Rewrite { from: "LEVEL READ COMMITTED", to: "LEVEL REPEATABLE READ" }).await;
    match refused {
        Err(StoreError::EngineRefused { property, .. }) => {
            assert!(property.contains("READ COMMITTED"), "{property}")
        }
        other => panic!("an engine that keeps REPEATABLE READ must be refused, got {other:?}"),
    }
}

case! {
    /// After migrating, the planner reads the claim statement through the claim index, in claim
    /// order (MySQL/MariaDB; SQLite has nothing to check).
    galera async fn the_claim_statement_is_planned_through_the_claim_index(h: &Harness) {
        match h.store.check_claim_plan().await.expect("a migrated schema passes") {
            inbox_store::ClaimPlanCheck::NotApplicable => assert_eq!(h.backend, Backend::Sqlite),
            inbox_store::ClaimPlanCheck::UsesClaimIndex(plan) => {
                assert_ne!(h.backend, Backend::Sqlite);
                assert_eq!(plan.key.as_deref(), Some(inbox_store::CLAIM_INDEX), "{plan:?}");
                assert!(!plan.filesort, "{plan:?}");
            }
            inbox_store::ClaimPlanCheck::Warning(plan, sentence) => panic!("{sentence}: {plan:?}"),
        }
    }
}

/// A schema whose claim statement cannot use the claim index is refused after migrating; the
/// forwarder hides the index from the planner as a schema that lost it would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_statement_that_cannot_use_the_claim_index_is_refused() {
    let h = Harness::new(Backend::MySql).await;
    let forwarder = Forwarder::rewriting(
        h.server_addr(),
        Rewrite {
            from: "FROM agent_inbox WHERE",
            to: "FROM agent_inbox IGNORE INDEX (ix_agent_inbox_claim) WHERE",
        },
    )
    .await;
    let store =
        SqlStore::connect(&ConnectOptions::new(h.url_through(forwarder.addr)), StoreConfig::default())
            .await
            .expect("the store connects through the forwarder");
    let refused = store.check_claim_plan().await;
    store.close().await;
    match refused {
        Err(err @ StoreError::ClaimIndexUnusable(_)) => {
            let sentence = err.to_string();
            assert!(sentence.contains("ix_agent_inbox_claim"), "{sentence}");
            assert!(sentence.contains("read the whole inbox"), "{sentence}");
        }
        other => panic!("a claim statement without its index must be refused, got {other:?}"),
    }
}
