//! The storage conformance suite: one exercise per promise of the store, run unchanged against
//! every backend, each in a fresh database ([`Harness`]) that is dropped with it. A case is
//! written once with [`case!`] and thereby registered: it expands to one test per backend
//! (`<file>::<case>::sqlite`, `::mysql`, and `::galera` for the cases that matter where one
//! server becomes several), so a case cannot be left out of a hand-kept list. A behaviour
//! change starts by adding a case to the subsystem's file.
//!
//! MariaDB's URL comes from `AGENT_INBOX_TEST_MYSQL_URL`; the Galera cases run on the cluster
//! `AGENT_INBOX_TEST_GALERA_URLS` names (`scripts/galera.sh start` prints it; `scripts/test.sh`
//! starts the cluster and sets it) and pass, saying so, when it is not set.

/// Defines a case, `async fn name(h: &Harness) { ... }`, and one `#[tokio::test]` per backend
/// that runs it in a fresh database. `galera async fn` also runs it on a Galera cluster.
macro_rules! case {
    ($(#[$meta:meta])* galera async fn $name:ident($h:ident: &Harness) $body:block) => {
        $(#[$meta])*
        async fn $name($h: &inbox_conformance::Harness) $body

        mod $name {
            backend_test!($name, sqlite, Sqlite);
            backend_test!($name, mysql, MySql);

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn galera() {
                if inbox_conformance::galera_urls().is_none() {
                    eprintln!(
                        "{} is not set: no Galera cluster to run on (scripts/galera.sh start)",
                        inbox_conformance::GALERA_URLS_ENV
                    );
                    return;
                }
                let harness = inbox_conformance::Harness::new(inbox_conformance::Backend::Galera).await;
                super::$name(&harness).await;
            }
        }
    };
    ($(#[$meta:meta])* async fn $name:ident($h:ident: &Harness) $body:block) => {
        $(#[$meta])*
        async fn $name($h: &inbox_conformance::Harness) $body

        mod $name {
            backend_test!($name, sqlite, Sqlite);
            backend_test!($name, mysql, MySql);
        }
    };
}

/// One backend's test of the case named by the enclosing module.
macro_rules! backend_test {
    ($case:ident, $test:ident, $backend:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $test() {
            let harness = inbox_conformance::Harness::new(inbox_conformance::Backend::$backend).await;
            super::$case(&harness).await;
        }
    };
}

mod a2a;
mod batches;
mod callbacks;
mod engine;
mod inbox;
mod pools;
mod rooms;
mod secrets;
mod sessions;
mod signals;
mod signatures;
mod tokens;
