//! Wake-ups for waiting long polls on this node: a watch channel per inbox carrying the newest
//! head sequence seen. Publishing on this node sends the new heads here after commit; waiters
//! also re-read the database every second, so a commit made by another node or process is
//! noticed even without a hint. A hint is only ever "the head is at least N".

use std::collections::HashMap;
use std::sync::Mutex;

use inbox_core::{InboxSeq, RecipientKey};
use tokio::sync::watch;

#[derive(Debug, Default)]
pub struct Hints {
    inboxes: Mutex<HashMap<RecipientKey, watch::Sender<u64>>>,
}

impl Hints {
    /// A receiver that changes whenever the inbox's head is reported to advance.
    pub fn watch(&self, inbox: &RecipientKey) -> watch::Receiver<u64> {
        let mut inboxes = self.inboxes.lock().expect("hints lock");
        // Drop channels nobody listens to any more, so the table tracks live waiters only.
        if inboxes.len() > 1_024 {
            inboxes.retain(|_, sender| sender.receiver_count() > 0);
        }
        inboxes.entry(inbox.clone()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Reports that a commit advanced an inbox's head to at least `head`.
    pub fn advanced(&self, inbox: &RecipientKey, head: InboxSeq) {
        let inboxes = self.inboxes.lock().expect("hints lock");
        if let Some(sender) = inboxes.get(inbox) {
            sender.send_if_modified(|seen| {
                let newer = head.get() > *seen;
                if newer {
                    *seen = head.get();
                }
                newer
            });
        }
    }
}
