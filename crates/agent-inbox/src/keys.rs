//! `keys rotate` and `keys list`: rotation of the keys the service signs access tokens with,
//! straight in the database every node reads. Running nodes pick the new key up on their
//! next reload (`signing_keys_reload_interval`, 30 s) or as soon as a token names it; it
//! starts signing after a short activation delay, once every node has had time to load it,
//! and tokens signed with the older keys stay valid through the overlap, and not a moment
//! longer (nodes re-read keys held longer than the shortest overlap, 1 s, before trusting them).

use std::time::Duration;

use anyhow::bail;
use inbox_api::time::format_utc;

use crate::cli::{DatabaseArgs, KeysCommand, RotateArgs};
use crate::serve::load_database_config;

/// How long a new key waits before it signs: longer than a node's key reload on an unknown
/// key id is throttled (5 s), shorter than any sensible overlap.
const ACTIVATION_DELAY: Duration = Duration::from_secs(10);

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Rotate(args) => rotate(args).await,
        KeysCommand::List(args) => list(args).await,
    }
}

async fn rotate(args: RotateArgs) -> anyhow::Result<()> {
    let overlap = crate::connect::duration("--overlap", &args.overlap)?;
    if overlap > Duration::from_secs(30 * 86_400) {
        bail!("--overlap must be at most 30d");
    }
    let config = load_database_config(&args.database)?;
    if overlap < config.tokens.access_token_ttl {
        eprintln!(
            "warning: --overlap {} is shorter than access_token_ttl {}; tokens issued just before the rotation \
             stop working early",
            humantime::format_duration(overlap),
            humantime::format_duration(config.tokens.access_token_ttl)
        );
    }
    let store = inbox_server::connect_store(&config).await?;
    store.migrate().await?;
    let (key, retired) = store
        .tokens()
        .rotate_signing_keys(overlap.as_millis() as u64, ACTIVATION_DELAY.as_millis() as u64)
        .await?;
    let activates = key.activates_at.map_or_else(|| "now".to_owned(), |t| format_utc(t.get()));
    println!("new signing key {} (signs from {activates})", key.key_id);
    println!(
        "{retired} older key(s) retire at {}",
        format_utc(store.now().plus_ms(overlap.as_millis() as u64).get())
    );
    store.close().await;
    Ok(())
}

async fn list(args: DatabaseArgs) -> anyhow::Result<()> {
    let config = load_database_config(&args)?;
    let store = inbox_server::connect_store(&config).await?;
    store.migrate().await?;
    let now = store.now();
    let mut signer_found = false;
    for key in store.tokens().access_signing_keys().await? {
        let signs = !signer_found && key.signs_at(now);
        signer_found |= signs;
        let state = if signs { "signing" } else { "verifying" };
        let retires = key.retires_at.map_or_else(|| "-".to_owned(), |t| format_utc(t.get()));
        println!("{}\t{state}\tcreated {}\tretires {retires}", key.key_id, format_utc(key.created_at.get()));
    }
    store.close().await;
    Ok(())
}
