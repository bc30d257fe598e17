//! `login` and `logout`: keep a service address and a rotating refresh token for the other
//! agent commands. The token is read from stdin unless given as a flag, spent at once (which
//! proves it works), and its successor stored in the OS secret store or a 0600 file.
//!
//! `login` also settles the profile's request-signing key (`--signing-key`): a key is
//! registered when the tenant requires signatures or when asked, kept in the same store as the
//! refresh token, and reused by later logins while the service still knows it. `logout`
//! retires it at the service before forgetting it, so the next login can register another.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Context as _, bail};
use inbox_client::{Api, Home, LoginReport, RequestSigningKey, Secret, SecretStoreKind};

use crate::cli::{LoginArgs, ProfileArgs};

/// What `login --signing-key` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigningKeyMode {
    /// Sign when the tenant requires it, or when the profile already has a live key.
    Auto,
    /// Sign whatever the tenant's policy.
    Generate,
    /// Sign nothing; drop the profile's key.
    None,
}

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    let preference = match args.secret_store.as_str() {
        "auto" => None,
        other => Some(SecretStoreKind::parse(other).with_context(|| {
            format!(
                "--secret-store {other:?} is not one of auto, secret-tool, keychain, credential-manager, file"
            )
        })?),
    };
    let token = match args.refresh_token.as_deref() {
        Some(token) if token != "-" => token.trim().to_owned(),
        _ => read_token_from_stdin()?,
    };
    if token.is_empty() {
        bail!("no refresh token given; pipe it in, or pass --refresh-token");
    }
    let mode = match args.signing_key.as_str() {
        "generate" => SigningKeyMode::Generate,
        "none" => SigningKeyMode::None,
        _ => SigningKeyMode::Auto,
    };
    let home = Home::from_env()?;
    let profile = &args.profile.profile;
    let report = inbox_client::login(&home, profile, &args.server, Secret::new(token), preference)
        .await
        .context("login failed")?;
    if let Some(reason) = &report.fell_back {
        eprintln!("note: the OS secret store did not work ({reason}); using a file instead");
    }
    println!(
        "logged in to {} as {} (tenant {}); the refresh token is in {}",
        report.profile.server_url, report.profile.agent_id, report.profile.tenant_id, report.stored_in
    );
    settle_signing_key(&home, profile, &report, mode).await
}

/// Makes the profile's request-signing key what `mode` asks for, and says what it did.
async fn settle_signing_key(
    home: &Home,
    profile: &str,
    report: &LoginReport,
    mode: SigningKeyMode,
) -> anyhow::Result<()> {
    let kind = report.profile.secret_store;
    let agent = &report.profile.agent_id;
    let listing = report.api.signing_keys().await.context("cannot list the agent's signing keys")?;
    let stored = home.load_signing_key(profile, kind).await?;
    if mode == SigningKeyMode::None {
        if let Some(key) = stored {
            home.delete_signing_key(profile, kind).await?;
            println!(
                "signing key {} removed from this profile (it stays registered until retired)",
                key.key_id()
            );
        }
        if listing.signatures_required {
            eprintln!(
                "warning: the tenant requires signed calls, so listen will be refused; log in again with \
                 --signing-key auto"
            );
        }
        return Ok(());
    }
    if let Some(key) = stored {
        if listing.keys.iter().any(|k| k.key_id.as_str() == key.key_id()) {
            println!(
                "calls are signed with the profile's signing key {} ({})",
                key.key_id(),
                key.algorithm()
            );
            return Ok(());
        }
        home.delete_signing_key(profile, kind).await?;
        eprintln!(
            "note: dropped the profile's signing key {}: it is not a live key of {agent}",
            key.key_id()
        );
    }
    if mode == SigningKeyMode::Auto && !listing.signatures_required {
        return Ok(());
    }
    if !listing.keys.is_empty() {
        let ids: Vec<&str> = listing.keys.iter().map(|k| k.key_id.as_str()).collect();
        bail!(
            "{agent} already has signing keys ({}) but this profile holds none of them, and a new key must be \
             signed by one; copy the profile's key from where it was made, or ask an operator to retire them \
             (DELETE /v1/agent-keys/<key_id> with an admin token), then log in again",
            ids.join(", ")
        );
    }
    // Stored before it is registered: a registered key is never one this profile lost.
    let key = RequestSigningKey::generate_ed25519()?;
    home.save_signing_key(profile, kind, &key).await?;
    report.api.register_signing_key(&key).await.context("cannot register the signing key")?;
    let store = home.signing_key_store(profile, kind).describe();
    println!("registered signing key {} (ed25519) for {agent}; the private key is in {store}", key.key_id());
    Ok(())
}

/// Forgets the profile; its signing key is retired at the service first, when it can be.
pub async fn logout(args: ProfileArgs) -> anyhow::Result<()> {
    let home = Home::from_env()?;
    let profile = &args.profile;
    let (stored, credentials) = home.credentials(profile)?;
    if let Some(key) = home.load_signing_key(profile, stored.secret_store).await? {
        let key_id = key.key_id().to_owned();
        let api = Api::new(&stored.server_url, credentials)?.with_signing_key(key);
        match api.retire_signing_key(&key_id).await {
            Ok(()) => println!("signing key {key_id} retired at the service"),
            Err(err) => eprintln!(
                "warning: could not retire signing key {key_id} at the service ({err}); an operator can: DELETE \
                 /v1/agent-keys/{key_id} with an admin token"
            ),
        }
    }
    inbox_client::logout(&home, profile)?;
    println!("logged out: profile {profile} and its credentials removed");
    Ok(())
}

fn read_token_from_stdin() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("refresh token: ");
        std::io::stderr().flush().ok();
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line).context("cannot read the refresh token from stdin")?;
    Ok(line.trim().to_owned())
}
