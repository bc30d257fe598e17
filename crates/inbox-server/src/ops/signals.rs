//! The notifier: every node tails `outbox_signal` and feeds each committed publish's heads into
//! its [`crate::hints::Hints`], so a publish on node A wakes long polls and streams on node B
//! without a broker. Only committed rows are readable, so no hint ever precedes its commit;
//! re-reading a signal is harmless because a hint only says "the head is at least N". A
//! `session.superseded` signal (a subscribe under the single-active-session policy) goes to
//! [`crate::session_changes::SessionChanges`] instead, to end the superseded sessions' streams;
//! an `inbox.nudged` signal (an operator took parked events back to an inbox) nudges that
//! inbox's streams, which announce it at their unchanged head.
//!
//! # Skipped ids
//!
//! `outbox_id` is AUTO_INCREMENT and ids are handed out when a publish inserts its row, not
//! when it commits: the reader can see id 101 while id 100 is still in flight. A reader that
//! only moved a cursor past 101 would never hint for 100. So [`SignalCursor`] remembers every
//! id it jumped over as a *gap* and asks for the gaps again on every pass until they appear or
//! [`Config::signal_gap_grace`](crate::config::Config) (10 s by default) has passed since the gap was
//! seen. A gap that never fills is a rolled-back publish (rollbacks burn ids on MySQL), or a
//! transaction that stayed open between its insert and its commit for longer than the grace
//! period; for the latter, waiters still find the events on their next database re-check
//! (long polls re-read every few seconds; stream clients poll after their cursor on reconnect).
//! Gaps are bounded: past [`GAPS_MAX`] the oldest are abandoned first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use inbox_core::{RecipientKey, UnixMillis};
use inbox_store::{SIGNALS_READ_MAX, Signal, SignalKind};

use crate::node::AppState;
use crate::periodic::{Failure, Job, Outcome};

/// Skipped ids remembered at most.
pub const GAPS_MAX: usize = 10_000;

/// The notifier: one pass per `notify_interval` reads what committed since the last one.
#[derive(Debug, Default)]
pub struct Notifier {
    /// Where reading resumes; found by the first pass that reaches the database.
    cursor: Option<SignalCursor>,
    /// When this node started reading: signals older than this say nothing about latency.
    started: Option<UnixMillis>,
}

impl Job for Notifier {
    const NAME: &'static str = "notifier";

    async fn tick(&mut self, state: &AppState) -> Outcome {
        let grace = state.config.signals.gap_grace;
        let started = *self.started.get_or_insert_with(|| state.store.now());
        let cursor = match &mut self.cursor {
            Some(cursor) => cursor,
            None => {
                let start = state
                    .store
                    .signals()
                    .start_id(started.minus_ms(grace.as_millis() as u64))
                    .await
                    .map_err(|err| Failure::new(HINTS_WAIT_START, err))?;
                self.cursor.insert(SignalCursor::new(start, grace))
            }
        };
        let mut outcome = Ok(());
        // Forward: everything committed past the cursor, page by page.
        loop {
            match state.store.signals().after(cursor.position(), SIGNALS_READ_MAX).await {
                Ok(signals) => {
                    let full = signals.len() == SIGNALS_READ_MAX as usize;
                    let now = Instant::now();
                    for signal in &signals {
                        cursor.saw(signal.outbox_id, now);
                        deliver(state, signal, started);
                    }
                    if !full {
                        break;
                    }
                }
                Err(err) => {
                    outcome = Err(Failure::new(HINTS_WAIT_NEW, err));
                    break;
                }
            }
        }
        // Backward: the ids skipped so far, newest first (they are the likeliest to commit).
        let gaps = cursor.gaps_to_check(SIGNALS_READ_MAX as usize);
        if !gaps.is_empty() {
            match state.store.signals().by_ids(&gaps).await {
                Ok(signals) => {
                    for signal in &signals {
                        cursor.filled(signal.outbox_id);
                        deliver(state, signal, started);
                    }
                }
                Err(err) => outcome = outcome.and(Err(Failure::new(HINTS_WAIT_SKIPPED, err))),
            }
        }
        let abandoned = cursor.expire(Instant::now());
        if abandoned > 0 {
            state.metrics.signal_gaps_abandoned_total().add([], abandoned as u64);
        }
        // Cached heads are current only while every commit is read: a failed read or an
        // abandoned gap may have missed one.
        if outcome.is_ok() && abandoned == 0 {
            state.head_cache.caught_up();
        } else {
            state.head_cache.distrust();
        }
        outcome
    }
}

const HINTS_WAIT_START: &str = "finding where to start reading signals (hints wait for the next pass)";
const HINTS_WAIT_NEW: &str = "reading new signals (hints wait for the next pass)";
const HINTS_WAIT_SKIPPED: &str = "re-reading skipped signals (hints wait for the next pass)";

/// Hands one signal's heads to this node's waiters, a nudge to the inbox's streams, or a
/// superseding subscribe to the open streams of that agent.
fn deliver(state: &AppState, signal: &Signal, started: UnixMillis) {
    for (recipient, head) in &signal.heads {
        match signal.kind {
            SignalKind::InboxUpdated => {
                let inbox =
                    RecipientKey { tenant_id: signal.tenant_id.clone(), recipient: recipient.clone() };
                state.head_cache.advanced(&inbox, *head);
                state.hints.advanced(&inbox, *head);
            }
            SignalKind::InboxNudged => {
                let inbox =
                    RecipientKey { tenant_id: signal.tenant_id.clone(), recipient: recipient.clone() };
                state.hints.nudged(&inbox);
            }
            SignalKind::SessionSuperseded => {
                state.session_changes.superseded(&signal.tenant_id, &recipient.id);
            }
        }
    }
    state.metrics.signals_read_total().add([], 1);
    // Signals re-read at start-up were published before this node listened: their age says
    // nothing about the notifier's latency.
    if signal.created_at >= started && signal.kind == SignalKind::InboxUpdated {
        let now = state.store.now();
        state
            .metrics
            .publish_to_signal_seconds()
            .observe([], Duration::from_millis(now.ms_since(signal.created_at)));
    }
}

/// The notifier's read position: the highest id read, and the lower ids skipped on the way,
/// each with when it was first skipped. Pure bookkeeping, no I/O.
#[derive(Debug)]
pub struct SignalCursor {
    position: i64,
    gaps: BTreeMap<i64, Instant>,
    grace: Duration,
}

impl SignalCursor {
    pub fn new(position: i64, grace: Duration) -> Self {
        Self { position, gaps: BTreeMap::new(), grace }
    }

    /// The id after which forward reads continue.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Records a signal read going forward (ids arrive in increasing order). Ids between the
    /// previous position and this one were skipped: remember them as gaps.
    pub fn saw(&mut self, id: i64, now: Instant) {
        if id <= self.position {
            self.gaps.remove(&id);
            return;
        }
        // A burst of more than GAPS_MAX skipped ids (a huge rollback, or auto_increment_increment
        // > 1) keeps only the newest GAPS_MAX of them.
        let first = (self.position + 1).max(id - GAPS_MAX as i64);
        for skipped in first..id {
            self.gaps.insert(skipped, now);
        }
        self.position = id;
        while self.gaps.len() > GAPS_MAX {
            self.gaps.pop_first();
        }
    }

    /// Records that a skipped id has committed and been delivered.
    pub fn filled(&mut self, id: i64) {
        self.gaps.remove(&id);
    }

    /// Up to `n` skipped ids to ask for again, newest first.
    pub fn gaps_to_check(&self, n: usize) -> Vec<i64> {
        self.gaps.keys().rev().take(n).copied().collect()
    }

    /// Stops waiting for gaps older than the grace period; returns how many were dropped.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.gaps.len();
        self.gaps.retain(|_, seen| now.duration_since(*seen) < self.grace);
        before - self.gaps.len()
    }

    #[cfg(test)]
    fn gaps(&self) -> usize {
        self.gaps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_ids_are_remembered_until_they_fill_or_expire() {
        let start = Instant::now();
        let mut cursor = SignalCursor::new(10, Duration::from_secs(10));
        cursor.saw(11, start);
        cursor.saw(14, start);
        assert_eq!(cursor.position(), 14);
        assert_eq!(cursor.gaps_to_check(10), vec![13, 12], "12 and 13 were skipped");
        cursor.filled(13);
        cursor.saw(12, start);
        assert_eq!(cursor.gaps(), 0, "a late commit read again fills its gap either way");
        cursor.saw(16, start + Duration::from_secs(5));
        assert_eq!(cursor.expire(start + Duration::from_secs(9)), 0);
        assert_eq!(cursor.expire(start + Duration::from_secs(15)), 1, "15 waited out its grace");
        assert_eq!(cursor.position(), 16, "the position never moves back");
    }

    #[test]
    fn gaps_are_bounded_keeping_the_newest() {
        let now = Instant::now();
        let mut cursor = SignalCursor::new(0, Duration::from_secs(10));
        cursor.saw(GAPS_MAX as i64 * 3, now);
        assert_eq!(cursor.gaps(), GAPS_MAX);
        assert_eq!(cursor.gaps_to_check(1), vec![GAPS_MAX as i64 * 3 - 1]);
        cursor.saw(GAPS_MAX as i64 * 3 + 2, now);
        assert_eq!(cursor.gaps(), GAPS_MAX, "the oldest gap made room");
        assert_eq!(cursor.gaps_to_check(1), vec![GAPS_MAX as i64 * 3 + 1]);
    }
}
