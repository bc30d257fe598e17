//! `agent-inbox mcp`: the inbox as a Model Context Protocol server on stdio, for language-model
//! clients. It authenticates like `listen` (a login profile whose refresh token rotates, or a
//! fixed `--token`), signs the critical calls when the profile has a key, offers the tools the
//! token's scopes allow, and logs to stderr only: stdout is the protocol. With
//! `--claude-channel` it is also a Claude Code channel (`channel.rs`).

mod arguments;
mod calls;
mod channel;
mod head;
mod inbox_view;
mod outcome;
mod output;
mod retry;
mod scopes;
mod server;
mod stdio;
mod task_listen;
mod task_store;
mod task_watch;
mod tasks;

use std::sync::Arc;

use anyhow::Context as _;
use inbox_client::Api;
use rmcp::ServiceExt as _;
use rmcp::service::ServerInitializeError;

use crate::cli::McpArgs;
use crate::connect::{connect, with_profile_signing_key};
use retry::{Repeat, retrying};
use scopes::{Offer, token_identity, token_scopes};
use server::InboxServer;
use task_listen::TaskListens;
use tasks::{Identity, Tasks};

pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let _log = inbox_server::logging::init(args.log_json, "info");
    let connect_args = args.connect();
    let connection = connect(&connect_args)?;
    let api = with_profile_signing_key(&connect_args, connection.api).await?;
    let offer = offer(&api).await?;
    let tasks = tasks(&api).await.map(Arc::new);
    let channel = match args.claude_channel {
        true => Some(channel_inbox(&api).await),
        false => None,
    };
    tracing::info!(
        server = api.base_url(),
        signing_key_id = api.signing_key_id().unwrap_or("none"),
        publish = offer.publish,
        claude_channel = channel.is_some(),
        "serving MCP on stdio"
    );
    let listens = Arc::new(TaskListens::new(tasks.clone()));
    let stdio = stdio::filtered_stdio(listens.clone());
    let server = InboxServer::new(api, offer, tasks, listens, channel);
    match server.serve((stdio.input, stdio.output)).await {
        Ok(service) => {
            let reason = service.waiting().await.context("the MCP session failed")?;
            tracing::info!(?reason, "MCP session ended");
        }
        // A client that only probed (server/discover) or went away before its first request.
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("the client left before a session began")
        }
        Err(err) => return Err(err).context("the MCP session could not start"),
    }
    // The service dropped its end of stdout; let the last answers reach the client.
    let _ = stdio.writer.await;
    Ok(())
}

/// The tools the access token's scopes allow. Getting the token may mean a refresh (with the
/// profile's refresh token): a service that cannot be reached then is retried briefly, and
/// after that the agent tools are offered without publishing.
async fn offer(api: &Api) -> anyhow::Result<Offer> {
    match retrying(Repeat::Safe, || api.access_token()).await {
        Ok(token) => Ok(match token_scopes(token.expose()) {
            Some(scopes) => Offer::from_scopes(&scopes),
            None => {
                tracing::warn!("the access token's scopes are unreadable; offering the agent tools only");
                Offer::AGENT
            }
        }),
        Err(err) if err.is_transient() => {
            tracing::warn!(error = %err, "cannot get an access token now; offering the agent tools only");
            Ok(Offer::AGENT)
        }
        Err(err) => Err(err).context("cannot get an access token"),
    }
}

/// Whose inbox a channel speaks for: the tenant and agent the access token names (the claims
/// are only shown, never trusted; the service decides what the token reaches).
async fn channel_inbox(api: &Api) -> channel::Inbox {
    let identity = api.access_token().await.ok().and_then(|token| token_identity(token.expose()));
    let (tenant, agent) = identity.map_or((None, None), |(tenant, agent)| (Some(tenant), Some(agent)));
    channel::Inbox { tenant, agent }
}

/// `inbox_wait`'s tasks, sealed for the token's identity with the key in the agent-inbox home;
/// without a readable identity or key, clients get the bounded wait only.
async fn tasks(api: &Api) -> Option<Tasks> {
    let token = api.access_token().await.ok()?;
    let Some((tenant, agent)) = token_identity(token.expose()) else {
        tracing::warn!("the access token names no tenant and agent; inbox_wait is offered without tasks");
        return None;
    };
    let identity = Identity { server: api.base_url().to_owned(), tenant, agent };
    let home = inbox_client::Home::from_env().ok()?;
    match Tasks::open(home.dir(), identity) {
        Ok(tasks) => Some(tasks),
        Err(err) => {
            tracing::warn!(error = %err, "cannot keep the task key; inbox_wait is offered without tasks");
            None
        }
    }
}
