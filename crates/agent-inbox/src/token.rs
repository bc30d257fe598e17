//! `token issue`: signs a token with the same keys the service uses (read from its database).

use anyhow::{Context as _, bail};
use inbox_core::{RecipientId, TenantId};
use inbox_server::{CallerKind, TokenService};

use crate::cli::IssueArgs;
use crate::serve::{load_database_config, with_store};

pub async fn issue(args: IssueArgs) -> anyhow::Result<()> {
    let config = load_database_config(&args.database)?;
    let tenant = TenantId::new(args.tenant).context("--tenant")?;
    let subject = RecipientId::new(args.subject).context("--subject")?;
    let Some(kind) = CallerKind::parse(&args.kind) else {
        bail!("--kind must be agent, publisher or admin, not {:?}", args.kind);
    };
    let scope = args.scope.unwrap_or_else(|| kind.default_scope().to_owned());
    let ttl = args.ttl.map(|t| crate::connect::duration("--ttl", &t)).transpose()?;
    let issued = with_store(&config, async |store| {
        store.migrate().await?;
        inbox_server::prepare_secrets(store, &config).await?;
        let tokens = TokenService::new(store.clone(), &config).await.map_err(anyhow::Error::msg)?;
        tokens
            .issue(&tenant, &subject, kind, &scope, ttl, args.refresh)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {}", e.code, e.detail))
    })
    .await?;
    println!("{}", issued.access_token);
    if let Some(refresh) = issued.refresh_token {
        println!("{refresh}");
    }
    Ok(())
}
