//! `keys rotate` and `keys list`: rotation of the keys the service signs access tokens with,
//! straight in the database every node reads. `keys new-secrets-key` and `keys rewrap`: the
//! key file that seals the database's secrets, and moving every secret under a new one.
//!
//! Token keys: Running nodes pick the new key up on their
//! next reload (`signing_keys_reload_interval`, 30 s) or as soon as a token names it; it
//! starts signing after a short activation delay, once every node has had time to load it,
//! and tokens signed with the older keys stay valid through the overlap, and not a moment
//! longer (nodes re-read keys held longer than the shortest overlap, 1 s, before trusting them).

use std::time::Duration;

use anyhow::bail;
use inbox_api::time::format_utc;
use inbox_store::{SecretsKeys, TokenAlgorithm};

use crate::cli::{DatabaseArgs, KeysCommand, RewrapArgs, RotateArgs};
use crate::serve::{load_database_config, with_store};

/// How long a new key waits before it signs: longer than a node's key reload on an unknown
/// key id is throttled (5 s), shorter than any sensible overlap.
const ACTIVATION_DELAY: Duration = Duration::from_secs(10);

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Rotate(args) => rotate(args).await,
        KeysCommand::List(args) => list(args).await,
        KeysCommand::NewSecretsKey => new_secrets_key(),
        KeysCommand::Rewrap(args) => rewrap(args).await,
    }
}

fn new_secrets_key() -> anyhow::Result<()> {
    let keys = SecretsKeys::generate();
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        eprintln!(
            "redirect this to a file: agent-inbox keys new-secrets-key > secrets.key (then chmod 600 it)"
        );
    }
    print!("{}", *keys.to_file_text());
    Ok(())
}

/// Seals every secret under the new file's first key, opening with the configured key file's
/// keys and the new ones.
async fn rewrap(args: RewrapArgs) -> anyhow::Result<()> {
    let config = load_database_config(&args.database)?;
    let new = inbox_server::secrets_key::read(&args.new_secrets_key_file).map_err(anyhow::Error::msg)?;
    let target = new.first().id().to_owned();
    let (before, resealed) = with_store(&config, async |store| {
        store.migrate().await?;
        let current = inbox_server::prepare_secrets(store, &config).await?;
        let before = store.secrets().census().await?;
        store.secrets().use_keys(current.keys.and(&new));
        let resealed = store.secrets().rewrap(&target).await.map_err(|err| {
            anyhow::anyhow!(
                "{err} (the key files: {} and {})",
                describe(&current),
                args.new_secrets_key_file.display()
            )
        })?;
        Ok((before, resealed))
    })
    .await?;
    let old: Vec<String> = before.by_key.into_keys().flatten().filter(|id| *id != target).collect();
    println!(
        "resealed {resealed} secret(s) under key {target}; new secrets are sealed with it on every node"
    );
    if old.is_empty() {
        println!("no secret is sealed under another key");
    } else {
        println!(
            "nodes may now drop key(s) {} from their key files (a file without a key still in use is refused)",
            old.join(", ")
        );
    }
    Ok(())
}

fn describe(loaded: &inbox_server::secrets_key::LoadedKeys) -> String {
    loaded.file.as_deref().map_or_else(|| "(in memory)".to_owned(), |f| f.display().to_string())
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
    let algorithm = match &args.algorithm {
        Some(name) => TokenAlgorithm::parse(name)
            .ok_or_else(|| anyhow::anyhow!("--algorithm must be HS256 or EdDSA"))?,
        None => config.tokens.algorithm(),
    };
    let (key, retired, now) = with_store(&config, async |store| {
        store.migrate().await?;
        inbox_server::prepare_secrets(store, &config).await?;
        let (key, retired) = store
            .tokens()
            .rotate_signing_keys(overlap.as_millis() as u64, ACTIVATION_DELAY.as_millis() as u64, algorithm)
            .await?;
        Ok((key, retired, store.now()))
    })
    .await?;
    let activates = key.activates_at.map_or_else(|| "now".to_owned(), |t| format_utc(t.get()));
    println!("new {} signing key {} (signs from {activates})", key.algorithm.as_str(), key.key_id);
    println!(
        "{retired} older key(s) retire at {}",
        format_utc(now.plus_ms(overlap.as_millis() as u64).get())
    );
    Ok(())
}

async fn list(args: DatabaseArgs) -> anyhow::Result<()> {
    let config = load_database_config(&args)?;
    let (now, keys) = with_store(&config, async |store| {
        store.migrate().await?;
        inbox_server::prepare_secrets(store, &config).await?;
        Ok((store.now(), store.tokens().access_signing_keys(config.tokens.algorithm()).await?))
    })
    .await?;
    let mut signer_found = false;
    for key in keys {
        let signs = !signer_found && key.signs_at(now);
        signer_found |= signs;
        let state = if signs { "signing" } else { "verifying" };
        let retires = key.retires_at.map_or_else(|| "-".to_owned(), |t| format_utc(t.get()));
        println!(
            "{}\t{}\t{state}\tcreated {}\tretires {retires}",
            key.key_id,
            key.algorithm.as_str(),
            format_utc(key.created_at.get())
        );
    }
    Ok(())
}
