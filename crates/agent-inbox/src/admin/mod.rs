//! `agent-inbox admin`: the operators' view from a terminal, over the service's admin API
//! (through `inbox-client`'s [`Admin`]). Tables for people by default, the service's JSON with
//! `--json`. A refusal prints the problem's sentence and code and exits 1; so does an
//! operation some of whose events were refused (after printing which).

mod args;
mod table;
mod views;

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Context as _, anyhow, bail};
use inbox_api::{ParkedEventsRequest, QuarantineRequest};
use inbox_client::{Admin, AdminAnswer, ClientError, EventsQuery, Home, ParkedQuery, Secret};
use inbox_core::limits::EventIds;
use serde::Serialize;

pub use args::{AdminArgs, AdminCommand, AdminConnect, EventsArgs};

/// The variable an admin token may come from instead of `--token-file`.
pub const ADMIN_TOKEN_VARIABLE: &str = "AGENT_INBOX_ADMIN_TOKEN";

pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let admin = connect(&args.connect)?;
    let json = args.connect.json;
    match args.command {
        AdminCommand::Inboxes { limit } => {
            let answer = admin.inboxes(limit).await.map_err(refused)?;
            print(json, &answer, views::inboxes)
        }
        AdminCommand::Events { agent, state, after_seq, newest_first, before_seq, limit } => {
            let query = EventsQuery {
                recipient_id: agent.clone(),
                state,
                after_seq,
                newest_first,
                before_seq,
                limit,
            };
            let answer = admin.events(&query).await.map_err(refused)?;
            print(json, &answer, |value| views::events(&agent, &value.events))?;
            let shown = answer.value.events.len();
            if !json && shown > 0 && shown == limit.unwrap_or(100) as usize {
                let last = answer.value.events.last().map_or(0, |e| e.event.inbox_seq);
                let flag = if newest_first { "--before-seq" } else { "--after-seq" };
                eprintln!("more may follow: add {flag} {last}");
            }
            Ok(())
        }
        AdminCommand::Event { agent, event_id } => {
            let answer = admin.event(&agent, &event_id).await.map_err(refused)?;
            print(json, &answer, views::event)
        }
        AdminCommand::Parked { agent, state, limit } => {
            let query = ParkedQuery { recipient_id: agent, state, limit };
            let answer = admin.parked(&query).await.map_err(refused)?;
            print(json, &answer, |value| views::parked(&value.events))
        }
        AdminCommand::Requeue(events) => {
            let answer = admin.requeue(&request(events)?).await.map_err(refused)?;
            items(json, &answer, "requeued")
        }
        AdminCommand::Purge { events, yes } => {
            if !yes {
                confirm_purge(&events)?;
            }
            let answer = admin.purge(&request(events)?).await.map_err(refused)?;
            items(json, &answer, "purged")
        }
        AdminCommand::Quarantine { events, reason, class } => {
            let event_ids = event_ids(events.event_ids)?;
            let request = QuarantineRequest { recipient_id: events.agent, event_ids, reason, class };
            let answer = admin.quarantine(&request).await.map_err(refused)?;
            items(json, &answer, "quarantined")
        }
        AdminCommand::Release(events) => {
            let answer = admin.release(&request(events)?).await.map_err(refused)?;
            items(json, &answer, "released")
        }
        AdminCommand::Sessions { agent, limit } => {
            let answer = admin.sessions(agent.as_deref(), limit).await.map_err(refused)?;
            print(json, &answer, views::sessions)
        }
        AdminCommand::Callbacks => {
            let answer = admin.callbacks().await.map_err(refused)?;
            print(json, &answer, views::callbacks)
        }
        AdminCommand::EnableCallback { registration_id } => {
            let answer = admin.enable_callback(&registration_id).await.map_err(refused)?;
            print(json, &answer, views::callback_enabled)
        }
        AdminCommand::Keys => {
            let answer = admin.agent_keys().await.map_err(refused)?;
            print(json, &answer, views::agent_keys)
        }
    }
}

/// The service from `--server` or the login profile; the token from `--token-file` or
/// [`ADMIN_TOKEN_VARIABLE`].
fn connect(args: &AdminConnect) -> anyhow::Result<Admin> {
    let server = match &args.server {
        Some(server) => server.clone(),
        None => Home::from_env()?.load_profile(&args.profile).map(|p| p.server_url).with_context(|| {
            format!(
                "no service to talk to: pass --server URL, or log in (agent-inbox login) so profile {:?} names one",
                args.profile
            )
        })?,
    };
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the admin token from {}", path.display()))?,
        None => std::env::var(ADMIN_TOKEN_VARIABLE).map_err(|_| {
            anyhow!(
                "no admin token: pass --token-file PATH or set {ADMIN_TOKEN_VARIABLE} (issue one with: \
                 agent-inbox token issue --kind admin --tenant T --subject YOU)"
            )
        })?,
    };
    let token = token.trim();
    if token.is_empty() {
        bail!("the admin token is empty; issue one with: agent-inbox token issue --kind admin");
    }
    Ok(Admin::new(&server, Secret::new(token))?)
}

/// A refusal as the operator reads it: the problem's sentence, then its stable code.
fn refused(err: ClientError) -> anyhow::Error {
    match &err {
        ClientError::Refused { problem } => {
            anyhow!("{} ({}, HTTP {})", problem.detail, problem.code, problem.status)
        }
        _ => anyhow::Error::new(err),
    }
}

fn print<T>(json: bool, answer: &AdminAnswer<T>, view: impl FnOnce(&T) -> String) -> anyhow::Result<()> {
    let text = if json { pretty(&answer.json)? } else { view(&answer.value) };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

fn pretty(value: &impl Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

/// Prints one line per event; fails when the service refused any of them.
fn items(json: bool, answer: &AdminAnswer<inbox_api::ItemResults>, done: &str) -> anyhow::Result<()> {
    print(json, answer, views::item_results)?;
    let results = &answer.value.results;
    let refused = results.iter().filter(|r| !r.ok).count();
    if refused > 0 {
        bail!("{refused} of {} events were not {done}", results.len());
    }
    Ok(())
}

fn request(events: EventsArgs) -> anyhow::Result<ParkedEventsRequest> {
    Ok(ParkedEventsRequest { recipient_id: events.agent, event_ids: event_ids(events.event_ids)? })
}

/// The events named on the command line, as a batch the service takes.
fn event_ids(ids: Vec<inbox_core::EventId>) -> anyhow::Result<EventIds> {
    EventIds::new(ids).map_err(|e| anyhow!("the event ids {e}"))
}

/// Purging cannot be undone: on a terminal, ask; elsewhere, insist on `--yes`.
fn confirm_purge(events: &EventsArgs) -> anyhow::Result<()> {
    let n = events.event_ids.len();
    let what = if n == 1 { "1 event".to_owned() } else { format!("{n} events") };
    if !std::io::stdin().is_terminal() {
        bail!(
            "purge deletes {what} for good; pass --yes to confirm (stdin is not a terminal, so it cannot ask)"
        );
    }
    eprint!("Delete {what} of {} for good? This cannot be undone. [y/N] ", events.agent);
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        bail!("nothing was purged");
    }
    Ok(())
}
