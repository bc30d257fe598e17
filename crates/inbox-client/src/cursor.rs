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

#[cfg(test)]
mod tests {
    use super::*;
    use inbox_api::Correlation;
    use inbox_api::time::format_utc;
    use inbox_core::{EventType, RecipientId, RecipientKind, TenantId};

    const NOW: i64 = 1_800_000_000_000;

    /// The event of sequence `seq`: its id is made from the sequence.
    fn id(seq: u64) -> EventId {
        EventId::from_bytes(u128::from(seq).to_be_bytes())
    }

    fn event(seq: u64, state: &str) -> EventEnvelope {
        EventEnvelope {
            event_id: id(seq),
            tenant_id: TenantId::new("t").unwrap(),
            recipient_kind: RecipientKind::agent(),
            recipient_id: RecipientId::new("a").unwrap(),
            inbox_seq: seq,
            event_type: EventType::new("task").unwrap(),
            priority: "normal".into(),
            availability_at_utc: format_utc(NOW - 1_000),
            expires_at_utc: None,
            deduplication_key: None,
            ack_state: state.into(),
            delivery_attempts: 0,
            visibility_lease_until_utc: None,
            next_retry_at_utc: None,
            dead_letter_state: "none".into(),
            correlation: Correlation::default(),
            payload: None,
            payload_ref: None,
            created_at_utc: format_utc(NOW - 1_000),
        }
    }

    fn leased(seq: u64, until: i64) -> EventEnvelope {
        EventEnvelope { visibility_lease_until_utc: Some(format_utc(until)), ..event(seq, "claimed") }
    }

    #[test]
    fn the_cursor_moves_over_terminal_events_and_stops_at_the_first_open_one() {
        let mut scan = Scan::new(10);
        let page = [event(11, "acked"), event(12, "dead_letter"), event(13, "available"), event(14, "acked")];
        scan.add_page(&page, 14, 20, NOW, &HashSet::new());
        assert_eq!(scan.cursor, 12);
        assert!(scan.blocked);
        assert_eq!(scan.claimable, 1);
        assert_eq!(scan.head_seq, 20);
        assert_eq!(scan.seen_through, 14);
        scan.add_page(&[event(15, "acked")], 15, 20, NOW, &HashSet::new());
        assert_eq!(scan.cursor, 12, "a later page cannot move a blocked cursor");
    }

    #[test]
    fn an_all_terminal_scan_moves_the_cursor_to_the_page_end() {
        let mut scan = Scan::new(0);
        scan.add_page(&[event(1, "acked"), event(3, "expired")], 3, 3, NOW, &HashSet::new());
        assert_eq!((scan.cursor, scan.blocked, scan.claimable), (3, false, 0));
        let mut empty = Scan::new(5);
        empty.add_page(&[], 5, 5, NOW, &HashSet::new());
        assert_eq!(empty.cursor, 5);
    }

    #[test]
    fn leases_of_others_and_retry_delays_call_for_a_wake_at_the_earliest() {
        let mut retry = event(3, "retry_scheduled");
        retry.next_retry_at_utc = Some(format_utc(NOW + 9_000));
        let mut delayed = event(4, "available");
        delayed.availability_at_utc = format_utc(NOW + 60_000);
        let page = [leased(1, NOW + 5_000), leased(2, NOW + 2_000), retry, delayed];
        let held: HashSet<EventId> = [id(2)].into();
        let mut scan = Scan::new(0);
        scan.add_page(&page, 4, 4, NOW, &held);
        assert_eq!(scan.next_change_ms, Some(NOW + 5_000), "our own lease (2) is not a reason to wake");
        assert_eq!(scan.claimable, 0);
        assert_eq!(scan.cursor, 0);
    }

    #[test]
    fn unknown_states_block_the_cursor_without_a_wake() {
        let mut scan = Scan::new(0);
        scan.add_page(&[event(1, "teleported"), event(2, "acked")], 2, 2, NOW, &HashSet::new());
        assert_eq!((scan.cursor, scan.claimable, scan.next_change_ms), (0, 0, None));
    }
}
