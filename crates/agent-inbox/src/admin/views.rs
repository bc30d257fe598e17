//! Each admin answer as text for a person: which columns a table has and what each cell
//! shows. No I/O: every function returns the text to print.

use inbox_api::{
    AdminAgentKeysResponse, AdminCallbackView, AdminCallbacksResponse, AdminEventDetail, AdminEventView,
    AdminSessionsResponse, InboxStatsResponse, ItemResults,
};

use super::table::{Fields, NONE, Table, age, or_none};

pub fn inboxes(answer: &InboxStatsResponse) -> String {
    if answer.inboxes.is_empty() {
        return "no inboxes in this tenant yet\n".to_owned();
    }
    let mut table = Table::new(&[
        "AGENT",
        "DEPTH",
        "OLDEST",
        "HEAD",
        "CLAIMED",
        "RETRYING",
        "PARKED",
        "ONLINE",
        "LAST SEEN",
    ]);
    for inbox in &answer.inboxes {
        table.row(vec![
            inbox.recipient_id.to_string(),
            inbox.depth.to_string(),
            or_none(inbox.oldest_unacked_age_seconds.map(age)),
            inbox.head_seq.to_string(),
            inbox.claimed.to_string(),
            inbox.retry_scheduled.to_string(),
            inbox.parked.to_string(),
            inbox.online_sessions.to_string(),
            or_none(inbox.last_seen_at_utc.as_ref()),
        ]);
    }
    table.render()
}

pub fn events(agent: &str, events: &[AdminEventView]) -> String {
    if events.is_empty() {
        return format!("no events of {agent} match\n");
    }
    let mut table =
        Table::new(&["SEQ", "EVENT ID", "TYPE", "PRIORITY", "STATE", "ATTEMPTS", "CREATED", "REASON"]);
    for view in events {
        let event = &view.event;
        table.row(vec![
            event.inbox_seq.to_string(),
            event.event_id.to_string(),
            event.event_type.to_string(),
            event.priority.clone(),
            state(view),
            event.delivery_attempts.to_string(),
            event.created_at_utc.clone(),
            or_none(view.reason.as_ref()),
        ]);
    }
    table.render()
}

pub fn parked(events: &[AdminEventView]) -> String {
    if events.is_empty() {
        return "no parked events\n".to_owned();
    }
    let mut table =
        Table::new(&["AGENT", "SEQ", "EVENT ID", "TYPE", "STATE", "ATTEMPTS", "PARKED AT", "REASON"]);
    for view in events {
        let event = &view.event;
        table.row(vec![
            event.recipient_id.to_string(),
            event.inbox_seq.to_string(),
            event.event_id.to_string(),
            event.event_type.to_string(),
            state(view),
            event.delivery_attempts.to_string(),
            or_none(view.terminal_at_utc.as_ref()),
            or_none(view.reason.as_ref()),
        ]);
    }
    table.render()
}

/// The envelope as `name: value` lines, the payload as indented JSON, then the history.
pub fn event(detail: &AdminEventDetail) -> String {
    let view = &detail.event;
    let event = &view.event;
    let mut fields = Fields::default();
    fields.field("event_id", event.event_id.to_string());
    fields.field("agent", event.recipient_id.to_string());
    fields.field("inbox_seq", event.inbox_seq.to_string());
    fields.field("type", event.event_type.to_string());
    fields.field("priority", event.priority.clone());
    fields.field("state", state(view));
    fields.field("attempts", event.delivery_attempts.to_string());
    fields.field("created", event.created_at_utc.clone());
    fields.field("available", event.availability_at_utc.clone());
    let optional = [
        ("expires", &event.expires_at_utc),
        ("lease until", &event.visibility_lease_until_utc),
        ("next retry", &event.next_retry_at_utc),
        ("session", &view.session_id.as_ref().map(ToString::to_string)),
        ("finished", &view.terminal_at_utc),
        ("reason", &view.reason),
        ("deduplication key", &event.deduplication_key.as_ref().map(ToString::to_string)),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            fields.field(name, value.clone());
        }
    }
    let correlation = serde_json::to_value(&event.correlation).unwrap_or_default();
    if correlation.as_object().is_some_and(|fields| fields.values().any(|v| !v.is_null())) {
        fields.field("correlation", correlation.to_string());
    }
    if detail.archived {
        fields.field("archived", "yes: kept for the record, it can no longer change");
    }
    let mut out = fields.render();
    out.push_str("\npayload:\n");
    match (&event.payload, &event.payload_ref) {
        (Some(payload), _) => {
            let pretty = serde_json::to_string_pretty(payload).unwrap_or_default();
            for line in pretty.lines() {
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
        (None, Some(reference)) => {
            out.push_str(&format!("  stored elsewhere: {} {}\n", reference.kind, reference.id))
        }
        (None, None) => out.push_str("  none (a payload is cleared once the event is acknowledged)\n"),
    }
    out.push_str("\nhistory:\n");
    if detail.history.is_empty() {
        out.push_str("  nothing recorded (the service may have history recording turned off)\n");
        return out;
    }
    let mut table = Table::new(&["AT", "ACTION", "STATE", "ATTEMPT", "ACTOR", "SESSION", "CLASS", "REASON"]);
    for entry in &detail.history {
        table.row(vec![
            entry.at_utc.clone(),
            entry.action.clone(),
            entry.state.clone(),
            entry.attempt.to_string(),
            entry.actor.clone(),
            or_none(entry.session_id.as_ref()),
            or_none(entry.class.as_ref()),
            or_none(entry.reason.as_ref()),
        ]);
    }
    for line in table.render().lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// One line per named event: `ok`, or the refusal's code and sentence.
pub fn item_results(results: &ItemResults) -> String {
    let mut table = Table::new(&["EVENT ID", "RESULT", "DETAIL"]);
    for result in &results.results {
        let (outcome, detail) = match &result.error {
            None => ("ok".to_owned(), String::new()),
            Some(error) => (error.code.as_str().to_owned(), error.detail.clone()),
        };
        table.row(vec![result.event_id.to_string(), outcome, detail]);
    }
    table.render()
}

pub fn sessions(answer: &AdminSessionsResponse) -> String {
    if answer.sessions.is_empty() {
        return "no sessions\n".to_owned();
    }
    let mut table = Table::new(&[
        "SESSION",
        "AGENT",
        "DEVICE",
        "TRANSPORT",
        "STATUS",
        "CONNECTED",
        "LAST HEARTBEAT",
        "SUPERSEDED BY",
    ]);
    for session in &answer.sessions {
        table.row(vec![
            session.session_id.to_string(),
            session.agent_id.to_string(),
            or_none(session.device_id.as_ref()),
            session.transport.clone(),
            session.status.clone(),
            session.connected_at_utc.clone(),
            session.last_heartbeat_at_utc.clone(),
            match (&session.superseded_by_session_id, &session.superseded_at_utc) {
                (Some(by), Some(at)) => format!("{by} at {at}"),
                (Some(by), None) => by.to_string(),
                _ => NONE.to_owned(),
            },
        ]);
    }
    table.render()
}

/// The registrations, then their recent deliveries, newest first.
pub fn callbacks(answer: &AdminCallbacksResponse) -> String {
    if answer.registrations.is_empty() {
        return "no callback registrations\n".to_owned();
    }
    let mut registrations = Table::new(&[
        "REGISTRATION",
        "AGENT",
        "URL",
        "STATUS",
        "DELIVERED HEAD",
        "FAILED IN A ROW",
        "NEXT ATTEMPT",
        "LAST ERROR",
    ]);
    let mut deliveries =
        Table::new(&["REGISTRATION", "AT", "KIND", "HEAD", "ATTEMPT", "OUTCOME", "HTTP", "MS", "ERROR"]);
    for view in &answer.registrations {
        let registration = &view.registration;
        registrations.row(vec![
            registration.registration_id.to_string(),
            registration.recipient_id.to_string(),
            registration.callback_url.clone(),
            status(view),
            registration.delivered_head_seq.to_string(),
            view.consecutive_failures.to_string(),
            view.next_attempt_at_utc.clone(),
            or_none(registration.last_error.as_ref()),
        ]);
        for attempt in &view.recent_deliveries {
            deliveries.row(vec![
                registration.registration_id.to_string(),
                attempt.created_at_utc.clone(),
                attempt.kind.clone(),
                or_none(attempt.head_seq),
                attempt.attempt.to_string(),
                attempt.outcome.clone(),
                or_none(attempt.http_status),
                attempt.duration_ms.to_string(),
                or_none(attempt.error.as_ref()),
            ]);
        }
    }
    let mut out = registrations.render();
    let disabled: Vec<&AdminCallbackView> =
        answer.registrations.iter().filter(|v| v.registration.disabled_at_utc.is_some()).collect();
    if !disabled.is_empty() {
        out.push_str("\ndisabled (re-enable with: agent-inbox admin enable-callback REGISTRATION):\n");
        for view in disabled {
            out.push_str(&format!("  {}\n", disabled_line(view)));
        }
    }
    out.push_str("\nrecent deliveries:\n");
    if deliveries.is_empty() {
        out.push_str("  none yet\n");
    } else {
        for line in deliveries.render().lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// One registration after `admin enable-callback`.
pub fn callback_enabled(view: &AdminCallbackView) -> String {
    let registration = &view.registration;
    match registration.disabled_at_utc {
        Some(_) => format!("still {}\n", disabled_line(view)),
        None => format!(
            "{} of {} is {}; the current head is delivered on the next pass\n",
            registration.registration_id,
            registration.recipient_id,
            status(view)
        ),
    }
}

/// `disabled` for a disabled registration, else its verification state.
fn status(view: &AdminCallbackView) -> String {
    match view.registration.disabled_at_utc {
        Some(_) => "disabled".to_owned(),
        None => view.registration.status.clone(),
    }
}

fn disabled_line(view: &AdminCallbackView) -> String {
    let registration = &view.registration;
    format!(
        "{} disabled at {}: {}",
        registration.registration_id,
        or_none(registration.disabled_at_utc.as_ref()),
        or_none(registration.disabled_reason.as_ref())
    )
}

pub fn agent_keys(answer: &AdminAgentKeysResponse) -> String {
    if answer.keys.is_empty() {
        return "no agent keys\n".to_owned();
    }
    let mut table = Table::new(&["KEY ID", "AGENT", "ALGORITHM", "CREATED", "RETIRED"]);
    for key in &answer.keys {
        table.row(vec![
            key.key_id.to_string(),
            key.agent_id.to_string(),
            key.algorithm.clone(),
            key.created_at_utc.clone(),
            or_none(key.retired_at_utc.as_ref()),
        ]);
    }
    table.render()
}

/// The state, a dead letter's with why: `dead_letter (handler_failed)`.
fn state(view: &AdminEventView) -> String {
    let event = &view.event;
    match (event.ack_state.as_str(), event.dead_letter_state.as_str()) {
        ("dead_letter", why) if why != "none" => format!("dead_letter ({why})"),
        (state, _) => state.to_owned(),
    }
}
