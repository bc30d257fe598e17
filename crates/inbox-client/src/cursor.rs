//! What a scan of the inbox after the cursor means for the agent, as a pure fold over poll
//! pages: how far the cursor may move, whether anything is claimable now, and when something
//! not claimable yet (a retry delay, another process's lease, a delayed delivery) will be.
//!
//! The cursor only moves over a prefix of *terminal* events (acknowledged, dead-lettered,
//! quarantined, expired). An event another process holds stays after the cursor until it is
//! finished: if that process dies, its lease runs out and this agent sees the event again.
//! Claims do not depend on the cursor (claim-next takes any claimable event); the cursor
//! bounds how much is re-read per wake and is what a cursor reset is measured against.

use std::collections::HashSet;

use inbox_api::EventEnvelope;
use inbox_api::time::parse_utc;
use inbox_core::{EventId, EventState};

/// A scan in progress, fed page by page in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The cursor the scan may persist: every event up to it is terminal.
    pub cursor: u64,
    /// An open event was met; the cursor stops before it.
    pub blocked: bool,
    /// Events a claim could take now.
    pub claimable: usize,
    /// The earliest time (epoch ms) an open event that is not claimable yet may become so.
    pub next_change_ms: Option<i64>,
    /// The highest head the pages reported.
    pub head_seq: u64,
    /// The highest sequence the pages contained.
    pub seen_through: u64,
}

impl Scan {
    pub fn new(cursor: u64) -> Scan {
        Scan { cursor, blocked: false, claimable: 0, next_change_ms: None, head_seq: 0, seen_through: cursor }
    }

    /// Adds one page. `held` are the events this agent is working on: their leases are ours,
    /// so they neither block a claim nor call for a wake.
    pub fn add_page(
        &mut self,
        events: &[EventEnvelope],
        next_cursor: u64,
        head_seq: u64,
        now_ms: i64,
        held: &HashSet<EventId>,
    ) {
        self.head_seq = self.head_seq.max(head_seq);
        for event in events {
            self.seen_through = self.seen_through.max(event.inbox_seq);
            match classify(event, now_ms) {
                State::Terminal => {
                    if !self.blocked {
                        self.cursor = self.cursor.max(event.inbox_seq);
                    }
                    continue;
                }
                State::Claimable => self.claimable += 1,
                State::Later(at_ms) => {
                    if !held.contains(&event.event_id) {
                        self.next_change_ms = Some(self.next_change_ms.map_or(at_ms, |t| t.min(at_ms)));
                    }
                }
                State::Unknown => {}
            }
            self.blocked = true;
        }
        if !self.blocked {
            self.cursor = self.cursor.max(next_cursor);
        }
        self.seen_through = self.seen_through.max(next_cursor);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Terminal,
    Claimable,
    /// Open, and possibly claimable from this time on.
    Later(i64),
    /// A state this client does not know: treated as open, with no time to wake at.
    Unknown,
}

fn classify(event: &EventEnvelope, now_ms: i64) -> State {
    let time = |text: &Option<String>| text.as_deref().and_then(|t| parse_utc(t).ok());
    let Some(state) = EventState::parse(&event.ack_state) else { return State::Unknown };
    match state {
        EventState::Acked | EventState::DeadLetter | EventState::Quarantined | EventState::Expired => {
            State::Terminal
        }
        EventState::Claimed => time(&event.visibility_lease_until_utc).map_or(State::Unknown, State::Later),
        EventState::Available | EventState::RetryScheduled => {
            let available = parse_utc(&event.availability_at_utc).unwrap_or(0);
            let retry = time(&event.next_retry_at_utc).unwrap_or(0);
            let from = available.max(retry);
            if from <= now_ms && state == EventState::Available {
                State::Claimable
            } else {
                State::Later(from)
            }
        }
    }
}
