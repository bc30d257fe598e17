//! `serve` and `migrate`.

use anyhow::Context as _;
use inbox_server::Config;

use crate::cli::ServeArgs;

pub fn load_config(args: &ServeArgs) -> anyhow::Result<Config> {
    Ok(Config::load(args.config.as_deref(), std::env::vars(), args.overrides())?)
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_INBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal, never in a log file or a journal.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    let config = load_config(&args)?;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let same_database = match (&args.config, &args.database_url) {
        (Some(file), _) => format!(" --config {}", file.display()),
        (None, Some(url)) => format!(" --database-url {url}"),
        (None, None) => String::new(),
    };
    eprintln!(
        "agent-inbox listening on {}://{} (database {})\n\
         an agent token:     agent-inbox token issue --tenant demo --subject agent_alpha{same_database}\n\
         a publisher token:  agent-inbox token issue --tenant demo --subject my_app --kind publisher{same_database}",
        if config.tls_cert.is_some() { "https" } else { "http" },
        listener.local_addr()?,
        config.database_url,
    );
    inbox_server::run(config, listener, shutdown_signal()).await?;
    Ok(())
}

pub async fn migrate(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    let config = load_config(&args)?;
    let store = inbox_server::connect_store(&config).await?;
    let ran = store.migrate().await?;
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
