//! `serve` and `migrate`, and how every operator command reaches its database (`with_store`).

use std::time::Duration;

use anyhow::Context as _;
use inbox_server::Config;
use inbox_store::SqlStore;

use crate::cli::{DatabaseArgs, ServeArgs};

pub fn load_config(args: &ServeArgs) -> anyhow::Result<Config> {
    for warning in inbox_server::config::unknown_environment(std::env::vars()) {
        tracing::warn!("{warning}");
    }
    Ok(Config::load(args.config.as_deref(), std::env::vars(), args.overrides())?)
}

/// The configuration of an operator command (`migrate`, `token`, `keys`). Run in the wrong
/// directory, the default SQLite path names a database that does not exist, and creating it
/// would make new signing keys whose tokens the running server refuses: so a missing default
/// database is refused with where it was looked for, unless `--create-database` says so.
pub fn load_database_config(args: &DatabaseArgs) -> anyhow::Result<Config> {
    for warning in inbox_server::config::unknown_environment(std::env::vars()) {
        eprintln!("warning: {warning}");
    }
    let config = Config::load(args.config.as_deref(), std::env::vars(), args.overrides())?;
    let defaulted = config.database.url == Config::default().database.url;
    if let Some(path) = sqlite_path(&config.database.url).filter(|_| defaulted && !args.create_database)
        && !path.exists()
    {
        let here = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| ".".into());
        let looked_at = std::path::absolute(&path).unwrap_or(path);
        anyhow::bail!(
            "no database at {} (the default sqlite://./data/agent-inbox.db, relative to {here}); run this \
             in the directory where `agent-inbox serve` runs, or name the server's database with \
             --database-url, --config or AGENT_INBOX_DATABASE_URL; --create-database creates a new, \
             empty one (only a server on that database accepts its tokens)",
            looked_at.display()
        );
    }
    Ok(config)
}

/// How long an operator command waits for its store to close (connections handed back, the
/// MySQL server told, SQLite's log checkpointed) before it returns anyway: a connection whose
/// server stopped answering cannot hold the command up.
const STORE_CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Connects to the configured database, runs `work` on it and closes the store whatever came
/// of it, so an operator command leaves nothing of the store running when it returns.
pub async fn with_store<T>(
    config: &Config,
    work: impl AsyncFnOnce(&SqlStore) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let store = inbox_server::connect_store(config).await?;
    let result = work(&store).await;
    if tokio::time::timeout(STORE_CLOSE_WAIT, store.close()).await.is_err() {
        eprintln!("warning: the database connections did not close within {}s", STORE_CLOSE_WAIT.as_secs());
    }
    result
}

/// The file of a `sqlite://` URL; none for other databases and in-memory SQLite.
fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    (!path.is_empty() && !path.contains(":memory:")).then(|| std::path::PathBuf::from(path))
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let _log = inbox_server::logging::init(args.log_json, "info");
    let config = load_config(&args)?;
    crate::open_files::raise_for(&config);
    let listener = tokio::net::TcpListener::bind(&config.http.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.http.listen))?;
    let banner = banner(&args, &config, listener.local_addr()?);
    let (ready, is_ready) = tokio::sync::oneshot::channel();
    // Told only once the database is reached and migrated: the token commands need it too.
    tokio::spawn(async move {
        if is_ready.await.is_ok() {
            eprintln!("{banner}");
        }
    });
    inbox_server::run_and_tell(config, listener, shutdown_signal(), ready).await?;
    Ok(())
}

/// Where the service listens and how to get tokens for it; never a password. Printed once it
/// serves (tests and scripts wait for its first line).
fn banner(args: &ServeArgs, config: &inbox_server::Config, addr: std::net::SocketAddr) -> String {
    let database = inbox_server::config::redact_database_url(&config.database.url);
    let same_database = match (&args.config, args.flag("database_url")) {
        (Some(file), _) => format!(" --config {}", file.display()),
        (None, Some(url)) if inbox_server::config::database_password(url).is_some() => {
            " --database-url \"$AGENT_INBOX_DATABASE_URL\"".to_owned()
        }
        (None, Some(url)) => format!(" --database-url {url}"),
        (None, None) => String::new(),
    };
    let password_note = if same_database.contains("$AGENT_INBOX_DATABASE_URL") {
        "\n(set AGENT_INBOX_DATABASE_URL to the database URL with its password first; it is not printed)"
    } else {
        ""
    };
    let scheme = if config.tls.cert.is_some() { "https" } else { "http" };
    format!(
        "agent-inbox listening on {scheme}://{addr} (database {database})\n\
         an agent token:     agent-inbox token issue --tenant demo --subject agent_alpha{same_database}\n\
         a publisher token:  agent-inbox token issue --tenant demo --subject my_app --kind publisher{same_database}{password_note}"
    )
}

pub async fn migrate(args: DatabaseArgs) -> anyhow::Result<()> {
    let _log = inbox_server::logging::init(false, "info");
    let config = load_database_config(&args)?;
    let ran = with_store(&config, async |store| Ok(store.migrate().await?)).await?;
    println!("applied {ran} migration(s)");
    Ok(())
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
