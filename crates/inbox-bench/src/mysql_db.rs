//! The benchmark's own database on the MariaDB/MySQL server: created under a random name and
//! dropped at the end, so runs never see each other's rows and leave no tables behind.

use std::future::Future;
use std::process::ExitCode;
use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions as _, Connection as _, Executor as _};

use crate::BenchError;

/// The server URL comes from the first of these that is set.
const URL_ENVS: [&str; 2] = ["AGENT_INBOX_BENCH_MYSQL_URL", "AGENT_INBOX_TEST_MYSQL_URL"];
const URL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/test";

/// How long `DROP DATABASE` may wait for a metadata lock: a connection left in a transaction
/// by a failed run must not make the cleanup hang for MariaDB's default of a day.
const DROP_LOCK_WAIT_SECONDS: u32 = 10;

/// The server URL the benchmark connects to, from the environment or the test default.
pub fn server_url() -> String {
    URL_ENVS
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|url| !url.trim().is_empty()))
        .unwrap_or_else(|| URL_DEFAULT.to_owned())
}

/// Runs `bench` in a task of its own (so even a panic comes back here) on a fresh database, drops the database whatever happens, and
/// prints the report it returns (or the error) after `preamble`: the `main` of every benchmark
/// that runs against MariaDB.
pub async fn report_in_fresh_database<F>(
    preamble: String,
    bench: impl FnOnce(&BenchDatabase) -> F,
) -> ExitCode
where
    F: Future<Output = Result<String, BenchError>> + Send + 'static,
{
    let database = match create(&server_url()).await {
        Ok(database) => database,
        Err(err) => {
            eprintln!("inbox-bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = tokio::spawn(bench(&database)).await;
    database.drop_best_effort().await;
    match outcome {
        Ok(Ok(report)) => {
            print!("{preamble}{report}");
            ExitCode::SUCCESS
        }
        Ok(Err(err)) => {
            eprintln!("inbox-bench: {err}");
            ExitCode::FAILURE
        }
        Err(join) => {
            eprintln!("inbox-bench: the benchmark stopped abnormally: {join}");
            ExitCode::FAILURE
        }
    }
}

/// A database this run created; [`BenchDatabase::drop_best_effort`] removes it.
#[derive(Debug)]
pub struct BenchDatabase {
    server_url: String,
    pub name: String,
    /// The server URL with this database as its path, for the store and the raw pool.
    pub url: String,
}

/// Creates `agent_inbox_bench_<16 hex digits>` with the collation the store's schema expects.
pub async fn create(server_url: &str) -> Result<BenchDatabase, BenchError> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|err| format!("the operating system's random generator failed: {err}"))?;
    let name = format!("agent_inbox_bench_{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let url = with_database(server_url, &name)?;
    let mut conn = server_connection(server_url).await?;
    conn.execute(sqlx::raw_sql(&format!(
        "CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    )))
    .await
    .map_err(|err| format!("cannot create database {name} at {server_url}: {err}"))?;
    conn.close().await?;
    Ok(BenchDatabase { server_url: server_url.to_owned(), name, url })
}

impl BenchDatabase {
    /// Drops the database; a failure is reported on stderr, never raised, because it runs
    /// while another error may already be on its way out.
    pub async fn drop_best_effort(self) {
        crate::secrets::forget(&self.url);
        let dropped = async {
            let mut conn = server_connection(&self.server_url).await?;
            conn.execute(sqlx::raw_sql(&format!("SET SESSION lock_wait_timeout = {DROP_LOCK_WAIT_SECONDS}")))
                .await?;
            conn.execute(sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS `{}`", self.name))).await?;
            conn.close().await?;
            Ok::<_, BenchError>(())
        }
        .await;
        if let Err(err) = dropped {
            eprintln!("inbox-bench: could not drop database {}; drop it by hand: {err}", self.name);
        }
    }
}

async fn server_connection(server_url: &str) -> Result<MySqlConnection, BenchError> {
    let options = MySqlConnectOptions::from_str(&mysql_scheme(server_url))
        .map_err(|err| format!("{server_url:?} is not a usable MySQL URL: {err}"))?;
    let conn = options.connect().await.map_err(|err| {
        format!("cannot reach MariaDB at {server_url} (set {} to another server): {err}", URL_ENVS[0])
    })?;
    Ok(conn)
}

/// sqlx knows only `mysql://`; the store also accepts `mariadb://`.
fn mysql_scheme(url: &str) -> String {
    match url.trim().strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.trim().to_owned(),
    }
}

/// `scheme://authority/old?query` becomes `scheme://authority/database?query`.
pub fn with_database(server_url: &str, database: &str) -> Result<String, BenchError> {
    let url = server_url.trim();
    let (without_query, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let scheme_end = without_query
        .find("://")
        .map(|i| i + 3)
        .ok_or_else(|| format!("{server_url:?} is not a mysql:// URL"))?;
    let authority_end = without_query[scheme_end..].find('/').map_or(without_query.len(), |i| scheme_end + i);
    let mut out = format!("{}/{database}", &without_query[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_replaces_the_path_and_keeps_the_query() {
        let db = "agent_inbox_bench_00";
        assert_eq!(
            with_database("mysql://root@127.0.0.1:3306/test", db).ok(),
            Some("mysql://root@127.0.0.1:3306/agent_inbox_bench_00".to_owned())
        );
        assert_eq!(
            with_database("mysql://u:p@h:1", db).ok(),
            Some("mysql://u:p@h:1/agent_inbox_bench_00".to_owned())
        );
        assert_eq!(
            with_database("mariadb://h/x?ssl-mode=disabled", db).ok(),
            Some("mariadb://h/agent_inbox_bench_00?ssl-mode=disabled".to_owned())
        );
        assert!(with_database("127.0.0.1:3306", db).is_err());
    }
}
