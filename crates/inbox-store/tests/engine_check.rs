//! The engine check at start refuses engines that break what claims rest on. Such an engine is
//! simulated by a forwarder in front of the real MariaDB that rewrites the SQL on its way (the
//! clause dropped, or another isolation level asked for), as a MySQL-compatible engine that
//! accepts and ignores it would behave; the same server reached directly passes.

use inbox_store::conformance::proxy::{Forwarder, Rewrite};
use inbox_store::conformance::{Backend, Harness};
use inbox_store::{ConnectOptions, SqlStore, StoreConfig, StoreError};

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
