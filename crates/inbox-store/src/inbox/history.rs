//! Each event's history: one JSON object per transition, newline-terminated, appended to the
//! row's `history_json` column in the same statement as the transition itself. Kept with the
//! row, it is archived with it and read back by [`Inbox::event_detail`](super::Inbox).
//!
//! Appending is a string concatenation in SQL, so the fast paths stay one statement and read
//! nothing. Heartbeats are not recorded (there is no bound on how many a lease gets). A
//! requeue loop could still grow the column without end, so whenever the slow path rewrites a
//! row it keeps only the newest [`HISTORY_ENTRIES_MAX`] entries.

use inbox_core::{AckResult, AckState, DeadLetterReason, QuarantineClass, SessionId, Transition, UnixMillis};
use serde::{Deserialize, Serialize};

use super::queries;
use crate::Field;
use crate::dialect::Dialect;
use crate::{EventRecord, StoreError};

/// Entries a slow-path rewrite keeps, newest last.
pub const HISTORY_ENTRIES_MAX: usize = 100;

/// The longest operator subject an [`Actor`] may name, in bytes.
pub const ACTOR_SUBJECT_BYTES_MAX: usize = 128;

/// What happened to the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryAction {
    Claimed,
    Acknowledged,
    Released,
    LeaseExpired,
    DeadLettered,
    Quarantined,
    Requeued,
    ReleasedFromQuarantine,
    Expired,
}

impl HistoryAction {
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryAction::Claimed => "claimed",
            HistoryAction::Acknowledged => "acknowledged",
            HistoryAction::Released => "released",
            HistoryAction::LeaseExpired => "lease_expired",
            HistoryAction::DeadLettered => "dead_lettered",
            HistoryAction::Quarantined => "quarantined",
            HistoryAction::Requeued => "requeued",
            HistoryAction::ReleasedFromQuarantine => "released_from_quarantine",
            HistoryAction::Expired => "expired",
        }
    }
}

/// Who made a transition happen: the agent holding the lease, an operator (by the subject of
/// the token they used) or the server's own scavenger.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    Agent,
    Operator(String),
    Scavenger,
}

impl Actor {
    /// An operator by their token's subject, checked: 1 to [`ACTOR_SUBJECT_BYTES_MAX`] bytes
    /// without control characters.
    pub fn operator(subject: impl Into<String>) -> Result<Actor, StoreError> {
        let subject = subject.into();
        if subject.is_empty()
            || subject.len() > ACTOR_SUBJECT_BYTES_MAX
            || subject.chars().any(char::is_control)
        {
            return Err(StoreError::invalid(
                Field::Actor,
                format!("must be 1 to {ACTOR_SUBJECT_BYTES_MAX} bytes without control characters"),
            ));
        }
        Ok(Actor::Operator(subject))
    }

    /// The history's spelling: `agent`, `operator:<subject>` or `scavenger`.
    pub fn label(&self) -> String {
        match self {
            Actor::Agent => "agent".to_owned(),
            Actor::Operator(subject) => format!("operator:{subject}"),
            Actor::Scavenger => "scavenger".to_owned(),
        }
    }
}

/// One recorded transition of an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When it happened, by the store's clock.
    pub at: UnixMillis,
    pub action: HistoryAction,
    /// The event's state right after.
    pub state: AckState,
    /// `delivery_attempts` right after.
    pub attempt: u32,
    /// The session that held (or took) the lease, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// `agent`, `operator:<subject>` or `scavenger` (see [`Actor::label`]).
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<QuarantineClass>,
}

impl HistoryEntry {
    pub fn new(at: UnixMillis, action: HistoryAction, state: AckState, attempt: u32, actor: &Actor) -> Self {
        Self { at, action, state, attempt, session_id: None, actor: actor.label(), reason: None, class: None }
    }

    /// The entry that follows a transition which parked the event: why it was parked.
    pub(crate) fn dead_lettered(
        at: UnixMillis,
        attempt: u32,
        reason: DeadLetterReason,
        actor: &Actor,
    ) -> Self {
        Self {
            reason: Some(reason.as_str().to_owned()),
            ..Self::new(at, HistoryAction::DeadLettered, AckState::DeadLetter, attempt, actor)
        }
    }

    /// The entry as one line of the column: JSON and a newline.
    pub(crate) fn line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("a history entry serializes");
        line.push('\n');
        line
    }

    /// The line split around the value of `attempt`, for statements that append it without
    /// reading the row: SQL puts `delivery_attempts` between the two halves. The entry's own
    /// `attempt` is ignored.
    pub(crate) fn line_around_attempt(&self) -> (String, String) {
        const MARK: u32 = u32::MAX;
        let line = Self { attempt: MARK, ..self.clone() }.line();
        let mark = format!("\"attempt\":{MARK}");
        // `attempt` precedes every free-text field, and a quote inside one is escaped, so the
        // first match is the field itself.
        let (before, after) = line.split_once(&mark).expect("the entry has an attempt");
        (format!("{before}\"attempt\":"), after.to_owned())
    }
}

/// Who made a transition, for its history entries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attribution<'a> {
    pub actor: &'a Actor,
    /// The session acting, when it named itself; else the lease's holder is named.
    pub session_id: Option<&'a SessionId>,
    /// A quarantine's class.
    pub class: Option<QuarantineClass>,
}

impl<'a> Attribution<'a> {
    pub(crate) fn agent(session_id: Option<&'a SessionId>) -> Self {
        Self { actor: &Actor::Agent, session_id, class: None }
    }

    pub(crate) fn scavenger() -> Self {
        Self { actor: &Actor::Scavenger, session_id: None, class: None }
    }

    pub(crate) fn operator(actor: &'a Actor, class: Option<QuarantineClass>) -> Self {
        Self { actor, session_id: None, class }
    }
}

/// The entries one accepted, changing transition records: its own, then `dead_lettered` when
/// it parked the event (with the dead-letter reason) or `expired` when it ended the event past
/// its expiry. Heartbeats record nothing. `reason` is what the caller said (a release's,
/// failure's or quarantine's reason).
pub(crate) fn entries_for(
    transition: &Transition,
    before: &EventRecord,
    after: &EventRecord,
    by: Attribution<'_>,
    reason: Option<&str>,
) -> Vec<HistoryEntry> {
    let action = match transition {
        Transition::Claim { .. } => HistoryAction::Claimed,
        Transition::Acknowledge { result: AckResult::Quarantined, .. } => HistoryAction::Quarantined,
        Transition::Acknowledge { .. } => HistoryAction::Acknowledged,
        Transition::Release { .. } => HistoryAction::Released,
        Transition::Heartbeat { .. } => return Vec::new(),
        Transition::LeaseExpired { .. } => HistoryAction::LeaseExpired,
        Transition::Expire { .. } => HistoryAction::Expired,
        Transition::Quarantine { .. } => HistoryAction::Quarantined,
        Transition::Requeue { .. } => HistoryAction::Requeued,
        Transition::ReleaseQuarantine { .. } => HistoryAction::ReleasedFromQuarantine,
    };
    // The session is the lease's: the one that took it, or the one whose lease this ends.
    let holder =
        (before.state() == AckState::Claimed).then_some(before.lease_owner_session_id.as_ref()).flatten();
    let session_id = match transition {
        Transition::Claim { .. } => after.lease_owner_session_id.as_ref(),
        Transition::Acknowledge { .. }
        | Transition::Release { .. }
        | Transition::LeaseExpired { .. }
        | Transition::Quarantine { .. } => by.session_id.or(holder),
        _ => None,
    };
    let (at, state, attempt) = (after.updated_at, after.state(), after.lifecycle.delivery_attempts);
    let mut entries = vec![HistoryEntry {
        session_id: session_id.cloned(),
        reason: reason.map(str::to_owned),
        class: by.class.filter(|_| action == HistoryAction::Quarantined),
        ..HistoryEntry::new(at, action, state, attempt, by.actor)
    }];
    if state == AckState::DeadLetter && before.state() != AckState::DeadLetter {
        entries.push(HistoryEntry::dead_lettered(at, attempt, after.lifecycle.dead_letter_reason, by.actor));
    }
    if state == AckState::Expired && action != HistoryAction::Expired {
        entries.push(HistoryEntry::new(at, HistoryAction::Expired, state, attempt, by.actor));
    }
    entries
}

/// A fast path's append of one entry whose `attempt` is the row's own `delivery_attempts` and,
/// when the entry names no session, whose session is the row's lease owner: so the statement
/// reads nothing first. `set` is the `history_json = ..., ` clause; bind `before` and `after`
/// (in that order) ahead of the statement's other arguments.
pub(crate) struct AppendAroundAttempt {
    pub set: String,
    pub before: String,
    pub after: String,
}

impl AppendAroundAttempt {
    pub(crate) fn new(dialect: Dialect, entry: &HistoryEntry) -> Self {
        let (before, after) = entry.line_around_attempt();
        // Without a session of its own, the entry names the row's lease owner.
        Self { set: queries::history_set(dialect, entry.session_id.is_none()), before, after }
    }
}

/// The lines of `entries`, concatenated.
pub(crate) fn lines(entries: &[HistoryEntry]) -> String {
    entries.iter().map(HistoryEntry::line).collect()
}

/// The entries of a `history_json` value, oldest first. A line that does not parse (written
/// by a newer version, or damaged by hand) is skipped, so one bad line never hides the rest.
pub(crate) fn parse_history(text: Option<&str>) -> Vec<HistoryEntry> {
    let Some(text) = text else { return Vec::new() };
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| match serde_json::from_str(line) {
            Ok(entry) => Some(entry),
            Err(err) => {
                tracing::warn!(%err, "skipping a history line that does not parse");
                None
            }
        })
        .collect()
}

/// `existing` with `appended` after it, keeping only the newest [`HISTORY_ENTRIES_MAX`]
/// lines: the value a slow-path rewrite stores.
pub(crate) fn capped(existing: Option<&str>, appended: &str) -> String {
    let mut text = String::with_capacity(existing.map_or(0, str::len) + appended.len());
    text.push_str(existing.unwrap_or(""));
    text.push_str(appended);
    let n_lines = text.lines().count();
    if n_lines <= HISTORY_ENTRIES_MAX {
        return text;
    }
    let skip = n_lines - HISTORY_ENTRIES_MAX;
    let mut kept = String::with_capacity(text.len());
    for line in text.lines().skip(skip) {
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> HistoryEntry {
        HistoryEntry {
            session_id: Some(SessionId::new("s-1").unwrap()),
            reason: Some("looks like \"attempt\":4294967295 an injection".into()),
            class: Some(QuarantineClass::PromptInjection),
            ..HistoryEntry::new(
                UnixMillis(1_000),
                HistoryAction::Quarantined,
                AckState::Quarantined,
                3,
                &Actor::Operator("ops@example".into()),
            )
        }
    }

    #[test]
    fn a_line_parses_back_to_its_entry() {
        let entry = entry();
        let line = entry.line();
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        assert_eq!(parse_history(Some(&line)), vec![entry]);
        assert!(line.contains("\"actor\":\"operator:ops@example\""));
    }

    #[test]
    fn the_halves_around_attempt_make_the_line_with_any_attempt() {
        let entry = entry();
        let (before, after) = entry.line_around_attempt();
        assert_eq!(format!("{before}7{after}"), HistoryEntry { attempt: 7, ..entry }.line());
    }

    #[test]
    fn bad_lines_are_skipped_and_rewrites_keep_the_newest() {
        let good = entry().line();
        let text = format!("{good}not json\n{{\"action\":\"teleported\"}}\n{good}");
        assert_eq!(parse_history(Some(&text)).len(), 2);
        let many: String = (0..HISTORY_ENTRIES_MAX + 5).map(|n| format!("{n}\n")).collect();
        let kept = capped(Some(&many), "last\n");
        assert_eq!(kept.lines().count(), HISTORY_ENTRIES_MAX);
        assert_eq!(kept.lines().next(), Some("6"));
        assert_eq!(kept.lines().last(), Some("last"));
        assert_eq!(capped(None, &good), good);
    }
}
