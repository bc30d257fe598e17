//! Wake-ups for this node's long polls and streams: a watch channel per inbox carrying the
//! newest head sequence reported. Reports come only from committed work: the notifier
//! (`ops/signals.rs`), which reads every node's commits from `outbox_signal`, and a publish on
//! this node right after its own commit. A report is only ever "the head is at least N".
//!
//! A watch channel holds one value, so reports coalesce to the highest head: a subscriber that
//! is slow to read sees the latest head when it reads, and a report never waits for anyone.

use std::collections::HashMap;
use std::sync::Mutex;

use inbox_core::{InboxSeq, RecipientKey};
use tokio::sync::watch;

/// Channels kept before the first sweep of channels nobody listens to.
const SWEEP_FLOOR: usize = 1_024;

#[derive(Debug, Default)]
pub struct Hints {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    inboxes: HashMap<RecipientKey, watch::Sender<u64>>,
    /// Size at which the next sweep runs: twice the live channels after the last one, so
    /// sweeping costs O(1) per subscription however many streams are open.
    sweep_at: usize,
}

impl Hints {
    /// A receiver that changes whenever the inbox's head is reported to advance. Subscribe
    /// before reading the head from the database, so no report between the two is missed.
    pub fn watch(&self, inbox: &RecipientKey) -> watch::Receiver<u64> {
        let mut table = self.table.lock().expect("hints lock");
        if table.inboxes.len() >= table.sweep_at.max(SWEEP_FLOOR) {
            table.inboxes.retain(|_, sender| sender.receiver_count() > 0);
            table.sweep_at = table.inboxes.len() * 2;
        }
        table.inboxes.entry(inbox.clone()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Reports that a commit advanced an inbox's head to at least `head`; returns whether
    /// anyone on this node was waiting on that inbox.
    pub fn advanced(&self, inbox: &RecipientKey, head: InboxSeq) -> bool {
        let table = self.table.lock().expect("hints lock");
        let Some(sender) = table.inboxes.get(inbox) else { return false };
        sender.send_if_modified(|seen| {
            let newer = head.get() > *seen;
            if newer {
                *seen = head.get();
            }
            newer
        });
        sender.receiver_count() > 0
    }
}

#[cfg(test)]
mod tests {
    use inbox_core::{Recipient, RecipientId, TenantId};

    use super::*;

    fn inbox(agent: &str) -> RecipientKey {
        RecipientKey {
            tenant_id: TenantId::new("t1").unwrap(),
            recipient: Recipient::agent(RecipientId::new(agent).unwrap()),
        }
    }

    #[test]
    fn reports_coalesce_to_the_highest_head_and_never_go_back() {
        let hints = Hints::default();
        let mut rx = hints.watch(&inbox("a"));
        for head in [3, 7, 5] {
            assert!(hints.advanced(&inbox("a"), InboxSeq(head)));
        }
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 7, "one wake-up, the highest head");
        assert!(hints.advanced(&inbox("a"), InboxSeq(6)));
        assert!(!rx.has_changed().unwrap(), "a lower head wakes nobody");
        assert!(!hints.advanced(&inbox("b"), InboxSeq(1)), "nobody waits on b");
    }

    #[test]
    fn channels_without_listeners_are_swept() {
        let hints = Hints::default();
        let kept = hints.watch(&inbox("kept"));
        for n in 0..SWEEP_FLOOR * 3 {
            drop(hints.watch(&inbox(&format!("gone{n}"))));
        }
        let table = hints.table.lock().unwrap();
        assert!(table.inboxes.len() <= SWEEP_FLOOR + 1, "{} channels", table.inboxes.len());
        assert!(table.inboxes.contains_key(&inbox("kept")));
        drop(kept);
    }
}
