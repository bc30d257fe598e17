//! The storage conformance suite's support: [`Harness`] (a fresh, migrated database per case
//! on SQLite, MariaDB or a Galera cluster, dropped with the harness), the forwarder that
//! simulates broken engines and spreads connections over Galera members ([`proxy`]), and the
//! [`vocabulary`] the cases are written in. The cases themselves are this crate's tests
//! (`tests/conformance/`, one file per subsystem), so none of it ships in the store.
//!
//! MariaDB's URL comes from `AGENT_INBOX_TEST_MYSQL_URL` ([`MYSQL_URL_ENV`]); a Galera cluster's
//! members from `AGENT_INBOX_TEST_GALERA_URLS` ([`GALERA_URLS_ENV`]). Time is a [`ManualClock`]:
//! cases move it instead of sleeping.

pub mod proxy;
pub mod vocabulary;

use std::sync::Arc;
use std::time::Duration;

use inbox_core::ManualClock;
use inbox_store::{ConnectOptions, SecretsKeys, SqlStore, StoreConfig};
use sqlx::{Connection as _, Executor as _, Row as _};

use crate::vocabulary::{ack_of, claim_next, inbox_of, publish_to};

/// Which database a harness runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    MySql,
    /// A MariaDB Galera cluster ([`GALERA_URLS_ENV`]): the store reaches its members through a
    /// forwarder that sends each new connection to the next member, so one store's
    /// connections sit on different members; [`Harness::second_node`] is on the second member.
    Galera,
}

/// The environment variable naming the members of a Galera cluster for tests, comma-separated
/// (`mysql://root@127.0.0.1:P1/,mysql://root@127.0.0.1:P2/,...`, as `scripts/galera.sh start`
/// prints). The Galera cases run only when it is set.
pub const GALERA_URLS_ENV: &str = "AGENT_INBOX_TEST_GALERA_URLS";

/// The Galera members' URLs, if the environment names a cluster.
pub fn galera_urls() -> Option<Vec<String>> {
    let urls: Vec<String> = std::env::var(GALERA_URLS_ENV)
        .ok()?
        .split(',')
        .map(|url| url.trim().trim_end_matches('/').to_owned())
        .filter(|url| !url.is_empty())
        .collect();
    (!urls.is_empty()).then_some(urls)
}

/// `host:port` of a `mysql://user@host:port/...` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// The environment variable naming the MariaDB/MySQL server tests use.
pub const MYSQL_URL_ENV: &str = "AGENT_INBOX_TEST_MYSQL_URL";

pub const MYSQL_URL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/test";

/// A fresh, migrated database with a store on a manual clock. Dropping it drops the database
/// (MySQL) or deletes the file (SQLite).
#[derive(Debug)]
pub struct Harness {
    pub backend: Backend,
    pub store: SqlStore,
    pub clock: Arc<ManualClock>,
    /// The URL of this harness's own database, for a second store or a host connection.
    pub url: String,
    /// The secrets key file's keys every store of this harness seals and opens secrets with.
    pub secrets_keys: SecretsKeys,
    /// The same keys as a key file (mode 0600, deleted with the harness), for servers started
    /// on this database (`secrets_key_file`).
    pub secrets_key_file: std::path::PathBuf,
    /// On Galera, the URL of this database on the second member.
    second_url: Option<String>,
    _forwarder: Option<proxy::Forwarder>,
    cleanup: Cleanup,
}

impl Harness {
    pub async fn new(backend: Backend) -> Harness {
        Self::with_config(backend, StoreConfig::default()).await
    }

    pub async fn with_config(backend: Backend, config: StoreConfig) -> Harness {
        let name = format!("agent_inbox_t_{}", hex::encode(inbox_store::random_bytes::<8>()));
        let secrets_key_file = std::env::temp_dir().join(format!("{name}.secrets-key"));
        let mut second_url = None;
        let mut forwarder = None;
        let (url, cleanup) = match backend {
            Backend::Galera => {
                let members =
                    galera_urls().unwrap_or_else(|| panic!("{GALERA_URLS_ENV} names no Galera members"));
                assert!(members.len() >= 2, "{GALERA_URLS_ENV} must name at least two members");
                let server_url = members[0].clone();
                create_database(&server_url, &name).await;
                // DDL replicates in total order, but a member applies it a moment later: wait
                // until every member has the database before spreading connections over them.
                for member in &members {
                    wait_for_database(&format!("{member}/{name}")).await;
                }
                let spread =
                    proxy::Forwarder::round_robin(members.iter().map(|m| host_port(m)).collect()).await;
                let user = members[0].split_once("://").map_or("", |(_, rest)| rest);
                let user = user.rsplit_once('@').map_or("root", |(user, _)| user);
                let url = format!("mysql://{user}@{}/{name}", spread.addr);
                second_url = Some(format!("{}/{name}", members[1]));
                forwarder = Some(spread);
                (url, Cleanup::DropDatabase { server_url, database: name })
            }
            Backend::MySql => {
                let server_url =
                    std::env::var(MYSQL_URL_ENV).unwrap_or_else(|_| MYSQL_URL_DEFAULT.to_owned());
                create_database(&server_url, &name).await;
                let base = server_url.rsplit_once('/').map_or(server_url.as_str(), |(base, _)| base);
                (
                    format!("{base}/{name}"),
                    Cleanup::DropDatabase { server_url: server_url.clone(), database: name },
                )
            }
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                (format!("sqlite://{}", path.display()), Cleanup::RemoveFile(path))
            }
        };
        let clock = Arc::new(ManualClock::new(inbox_store::system_now()));
        let store = SqlStore::connect_with_clock(&ConnectOptions::new(&url), config, clock.clone())
            .await
            .expect("connect to the test database");
        store.migrate().await.expect("migrate the test database");
        let secrets_keys = SecretsKeys::generate();
        store.secrets().prepare(secrets_keys.clone()).await.expect("load the secrets key");
        write_private(&secrets_key_file, secrets_keys.to_file_text().as_bytes());
        Harness {
            backend,
            store,
            clock,
            url,
            secrets_keys,
            secrets_key_file,
            second_url,
            _forwarder: forwarder,
            cleanup,
        }
    }

    /// A second store on the same database, as a second service node would have.
    pub async fn second_node(&self) -> SqlStore {
        let store = self.second_node_without_keys().await;
        store.secrets().prepare(self.secrets_keys.clone()).await.expect("load the secrets key");
        store
    }

    /// A second store on the same database that has loaded no secrets key yet, for cases
    /// that load keys themselves.
    pub async fn second_node_without_keys(&self) -> SqlStore {
        SqlStore::connect_with_clock(
            &ConnectOptions::new(self.second_url.as_deref().unwrap_or(&self.url)),
            self.store.config().clone(),
            self.clock.clone(),
        )
        .await
        .expect("connect a second node")
    }

    /// Runs a statement beneath the store's API (a trigger that stands in for a refusal).
    pub async fn execute_raw(&self, sql: &str) {
        match self.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("a connection");
                conn.execute(sqlx::raw_sql(sql)).await.expect(sql);
                let _ = conn.close().await;
            }
            Backend::MySql | Backend::Galera => {
                let mut conn = self.mysql_connection().await;
                conn.execute(sqlx::raw_sql(sql)).await.expect(sql);
                let _ = conn.close().await;
            }
        }
    }

    /// This harness's database reached through `addr` (`host:port`, a forwarder in front of
    /// the same server), in clear text so a forwarder can read the SQL.
    pub fn url_through(&self, addr: std::net::SocketAddr) -> String {
        let (scheme_user, _) = self.url.rsplit_once('@').expect("a MySQL URL names its user");
        let database = self.url.rsplit_once('/').map_or("", |(_, db)| db);
        format!("{scheme_user}@{addr}/{database}?ssl-mode=disabled")
    }

    /// `host:port` of this harness's database server.
    pub fn server_addr(&self) -> String {
        host_port(&self.url)
    }

    /// One integer from a query, for checks that look beneath the store's API.
    pub async fn scalar(&self, sql: &str, args: &[&str]) -> i64 {
        match self.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("a connection");
                let mut query = sqlx::query(sql);
                for arg in args {
                    query = query.bind(*arg);
                }
                let row = query.fetch_one(&mut conn).await.expect(sql);
                let _ = conn.close().await;
                row.try_get("n").expect("an integer column named n")
            }
            Backend::MySql | Backend::Galera => {
                let mut conn = self.mysql_connection().await;
                let mut query = sqlx::query(sql);
                for arg in args {
                    query = query.bind(*arg);
                }
                let row = query.fetch_one(&mut conn).await.expect(sql);
                let _ = conn.close().await;
                row.try_get("n").expect("an integer column named n")
            }
        }
    }

    /// A plain connection to this harness's MySQL database, beneath the store (on Galera it
    /// waits for causality like the store's own connections).
    async fn mysql_connection(&self) -> sqlx::MySqlConnection {
        let mut conn = sqlx::MySqlConnection::connect(&self.url).await.expect("a connection");
        if self.backend == Backend::Galera {
            let wait = format!("SET SESSION wsrep_sync_wait = {}", inbox_store::GALERA_SYNC_WAIT);
            conn.execute(sqlx::raw_sql(&wait)).await.expect("wsrep_sync_wait");
        }
        conn
    }
}

#[derive(Debug)]
enum Cleanup {
    DropDatabase { server_url: String, database: String },
    RemoveFile(std::path::PathBuf),
}

/// Writes a file only its owner can read (a key file).
pub fn write_private(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    file.write_all(bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.secrets_key_file);
        match &self.cleanup {
            Cleanup::RemoveFile(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Cleanup::DropDatabase { server_url, database } => {
                let (server_url, database) = (server_url.clone(), database.clone());
                // Drop runs inside the test's runtime; a helper thread owns a runtime of its own.
                let dropped = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                    runtime.block_on(async {
                        mysql_raw(&server_url, &format!("DROP DATABASE IF EXISTS `{database}`"))
                            .await
                            .ok()?;
                        Some(())
                    })
                })
                .join();
                if !matches!(dropped, Ok(Some(()))) {
                    eprintln!("could not drop test database {}", self.url);
                }
            }
        }
    }
}

async fn create_database(server_url: &str, name: &str) {
    mysql_raw(server_url, &format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
        .await
        .unwrap_or_else(|err| {
            panic!("cannot create a test database at {server_url} ({MYSQL_URL_ENV}): {err}")
        });
}

/// Runs text-protocol SQL on a connection of its own to a MySQL server (`mysql://` or
/// `mariadb://`).
async fn mysql_raw(url: &str, sql: &str) -> Result<(), sqlx::Error> {
    let url = url.strip_prefix("mariadb://").map_or_else(|| url.to_owned(), |rest| format!("mysql://{rest}"));
    let mut conn = sqlx::MySqlConnection::connect(&url).await?;
    conn.execute(sqlx::raw_sql(sql)).await?;
    conn.close().await
}

/// Waits (at most 30 s) until a connection to `url`'s database succeeds.
async fn wait_for_database(url: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match sqlx::MySqlConnection::connect(url).await {
            Ok(conn) => {
                let _ = conn.close().await;
                return;
            }
            Err(err) if std::time::Instant::now() >= deadline => {
                panic!("{url} never became reachable: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Publishes `n` events to each of `recipients` (tenant `t1`), acknowledges them all, moves the
/// clock past retention and lets the scavenger archive them; returns how many rows the archive
/// holds.
pub async fn archive_acknowledged(h: &Harness, recipients: &[&str], n: usize) -> i64 {
    for name in recipients {
        let inbox = inbox_of("t1", name);
        for i in 0..n {
            publish_to(h, "t1", name, &format!("{{\"n\":{i}}}")).await;
        }
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, n as u32)).await.unwrap();
        for c in &claimed {
            h.store.inbox().acknowledge(&ack_of(&inbox, c)).await.unwrap();
        }
    }
    h.clock.advance_ms(h.store.config().retention_ms + 1);
    while h.store.inbox().scavenge(500).await.unwrap().archived > 0 {}
    h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await
}
