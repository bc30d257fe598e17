//! Wake-ups for this node's long polls and streams: a watch channel per inbox carrying the
//! newest head sequence reported, and how many nudges it had. Reports come only from committed
//! work: the notifier (`ops/signals.rs`), which reads every node's commits from
//! `outbox_signal`, and a publish on this node right after its own commit. A report is only
//! ever "the head is at least N", or a nudge: "events behind the head went back to the inbox"
//! (an operator's requeue or release from quarantine, from its `inbox.nudged` signal), which
//! moves no head but must still reach the agent, whose cursor may be past them. Nudges come
//! from the notifier alone: they do not coalesce, so a second, local report would wake twice.
//!
//! A watch channel holds one value, so reports coalesce to the highest head: a subscriber that
//! is slow to read sees the latest head when it reads, and a report never waits for anyone.
//!
//! The streams of one inbox (thousands, when many processes share an agent identity) announce
//! the same wake-up: the inbox's [`HintMemo`] makes its signal (with seed 001's
//! `approximate_unacked`, one count) and its frames once, and every stream writes the same bytes.
//!
//! Views of a whole tenant (the console's live overview) watch the tenant instead: a counter
//! that moves on every report for any of its inboxes, and on [`Hints::touched`] for changes
//! that move no head (claims, acknowledgements, releases, an operator's actions).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::ws::Utf8Bytes;
use inbox_api::StreamSignal;
use inbox_core::{InboxSeq, RecipientKey, TenantId};
use tokio::sync::watch;

/// Channels kept before the first sweep of channels nobody listens to.
const SWEEP_FLOOR: usize = 1_024;

#[derive(Debug, Default)]
pub struct Hints {
    table: Mutex<Table>,
}

/// What an inbox's channel carries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct InboxWake {
    /// The highest head reported.
    pub head: u64,
    /// Nudges reported so far: a change means events behind the head became claimable again.
    pub nudges: u64,
}

/// How long a made hint stays good for another stream announcing the same wake-up.
const HINT_FRESH: Duration = Duration::from_secs(1);

/// An inbox's channel and the hint its streams share.
#[derive(Debug)]
struct Channel {
    sender: watch::Sender<InboxWake>,
    memo: Arc<HintMemo>,
}

/// One wake-up's signal, made once and written by every stream of the inbox: its
/// `delivery_id` names the hint, the same on each stream. Its frames are made on first use.
#[derive(Debug)]
pub struct SharedHint {
    pub signal: StreamSignal,
    sse_frame: OnceLock<Bytes>,
    json: OnceLock<Utf8Bytes>,
}

impl SharedHint {
    pub fn new(signal: StreamSignal) -> SharedHint {
        SharedHint { signal, sse_frame: OnceLock::new(), json: OnceLock::new() }
    }

    /// The SSE frame, made by `render` for the first stream that asks.
    pub fn sse_frame(&self, render: impl FnOnce(&StreamSignal) -> Bytes) -> Bytes {
        self.sse_frame.get_or_init(|| render(&self.signal)).clone()
    }

    /// The signal as a JSON text (a WebSocket message).
    pub fn json(&self) -> Utf8Bytes {
        self.json.get_or_init(|| serde_json::to_string(&self.signal).unwrap_or_default().into()).clone()
    }
}

/// The last hint made for an inbox, reused by every stream announcing the same wake-up within
/// [`HINT_FRESH`]; one stream makes it while the others wait for it.
#[derive(Debug, Default)]
pub struct HintMemo {
    last: Mutex<Option<(InboxWake, Instant, Arc<SharedHint>)>>,
    making: tokio::sync::Mutex<()>,
}

impl HintMemo {
    /// The hint for `wake`: the one made for it less than [`HINT_FRESH`] ago, or `make`'s.
    pub async fn get_or_make(
        &self,
        wake: InboxWake,
        make: impl AsyncFnOnce() -> StreamSignal,
    ) -> Arc<SharedHint> {
        if let Some(hint) = self.fresh(wake) {
            return hint;
        }
        let _making = self.making.lock().await;
        if let Some(hint) = self.fresh(wake) {
            return hint;
        }
        let hint = Arc::new(SharedHint::new(make().await));
        *self.last.lock().expect("hint memo") = Some((wake, Instant::now(), hint.clone()));
        hint
    }

    fn fresh(&self, wake: InboxWake) -> Option<Arc<SharedHint>> {
        let last = self.last.lock().expect("hint memo");
        let (made_for, at, hint) = last.as_ref()?;
        (*made_for == wake && at.elapsed() < HINT_FRESH).then(|| hint.clone())
    }
}

#[derive(Debug, Default)]
struct Table {
    inboxes: HashMap<RecipientKey, Channel>,
    /// Per tenant, how many changes were reported; only tenants someone watches are kept.
    tenants: HashMap<TenantId, watch::Sender<u64>>,
    /// Size at which the next sweep runs: twice the live channels after the last one, so
    /// sweeping costs O(1) per subscription however many streams are open.
    sweep_at: usize,
}

impl Hints {
    /// A receiver that changes whenever the inbox's head is reported to advance, or the inbox
    /// is nudged. Subscribe before reading the head from the database, so no report between
    /// the two is missed.
    pub fn watch(&self, inbox: &RecipientKey) -> watch::Receiver<InboxWake> {
        self.watch_shared(inbox).0
    }

    /// [`Hints::watch`], with the hint memo the inbox's streams share.
    pub fn watch_shared(&self, inbox: &RecipientKey) -> (watch::Receiver<InboxWake>, Arc<HintMemo>) {
        let mut table = self.table.lock().expect("hints lock");
        if table.inboxes.len() >= table.sweep_at.max(SWEEP_FLOOR) {
            table.inboxes.retain(|_, channel| channel.sender.receiver_count() > 0);
            table.sweep_at = table.inboxes.len() * 2;
        }
        let channel = table.inboxes.entry(inbox.clone()).or_insert_with(|| Channel {
            sender: watch::channel(InboxWake::default()).0,
            memo: Arc::default(),
        });
        (channel.sender.subscribe(), channel.memo.clone())
    }

    /// A receiver that changes whenever anything is reported for one of the tenant's inboxes
    /// (its value counts the reports). Subscribe before reading what it watches.
    pub fn watch_tenant(&self, tenant_id: &TenantId) -> watch::Receiver<u64> {
        let mut table = self.table.lock().expect("hints lock");
        // Tenants are few and watched by operators only: sweep them on every new watch.
        table.tenants.retain(|_, sender| sender.receiver_count() > 0);
        table.tenants.entry(tenant_id.clone()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Reports a change in the tenant's inboxes that moves no head: a claim, an
    /// acknowledgement, a release, an operator's requeue, quarantine or purge.
    pub fn touched(&self, tenant_id: &TenantId) {
        let table = self.table.lock().expect("hints lock");
        table.touch(tenant_id);
    }

    /// Reports that a commit advanced an inbox's head to at least `head`; returns whether
    /// anyone on this node was waiting on that inbox.
    pub fn advanced(&self, inbox: &RecipientKey, head: InboxSeq) -> bool {
        let table = self.table.lock().expect("hints lock");
        table.touch(&inbox.tenant_id);
        let Some(Channel { sender, .. }) = table.inboxes.get(inbox) else { return false };
        sender.send_if_modified(|seen| {
            let newer = head.get() > seen.head;
            if newer {
                seen.head = head.get();
            }
            newer
        });
        sender.receiver_count() > 0
    }

    /// Reports that events behind the inbox's head became claimable again; returns whether
    /// anyone on this node was waiting on that inbox.
    pub fn nudged(&self, inbox: &RecipientKey) -> bool {
        let table = self.table.lock().expect("hints lock");
        table.touch(&inbox.tenant_id);
        let Some(Channel { sender, .. }) = table.inboxes.get(inbox) else { return false };
        sender.send_modify(|seen| seen.nudges = seen.nudges.wrapping_add(1));
        sender.receiver_count() > 0
    }
}

impl Table {
    fn touch(&self, tenant_id: &TenantId) {
        if let Some(sender) = self.tenants.get(tenant_id) {
            sender.send_modify(|changes| *changes = changes.wrapping_add(1));
        }
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
        assert_eq!(rx.borrow_and_update().head, 7, "one wake-up, the highest head");
        assert!(hints.advanced(&inbox("a"), InboxSeq(6)));
        assert!(!rx.has_changed().unwrap(), "a lower head wakes nobody");
        assert!(!hints.advanced(&inbox("b"), InboxSeq(1)), "nobody waits on b");
    }

    #[test]
    fn a_nudge_wakes_the_inbox_without_moving_its_head() {
        let hints = Hints::default();
        let mut rx = hints.watch(&inbox("a"));
        hints.advanced(&inbox("a"), InboxSeq(4));
        rx.mark_unchanged();
        assert!(hints.nudged(&inbox("a")));
        assert!(rx.has_changed().unwrap(), "a nudge is a wake-up");
        assert_eq!(*rx.borrow_and_update(), InboxWake { head: 4, nudges: 1 });
        assert!(!hints.nudged(&inbox("b")), "nobody waits on b");
    }

    #[test]
    fn a_tenant_watch_sees_every_report_of_its_inboxes_and_touches() {
        let hints = Hints::default();
        let mut tenant = hints.watch_tenant(&TenantId::new("t1").unwrap());
        let mut other = hints.watch_tenant(&TenantId::new("t2").unwrap());
        hints.advanced(&inbox("a"), InboxSeq(1));
        assert!(tenant.has_changed().unwrap(), "a report for an inbox nobody watches still counts");
        tenant.mark_unchanged();
        hints.advanced(&inbox("a"), InboxSeq(1));
        assert!(tenant.has_changed().unwrap(), "a repeated head (a requeue) counts too");
        tenant.mark_unchanged();
        hints.touched(&TenantId::new("t1").unwrap());
        assert!(tenant.has_changed().unwrap());
        assert!(!other.has_changed().unwrap(), "another tenant's watch does not move");
        other.mark_unchanged();
    }

    fn signal(head: u64, delivery: &str) -> StreamSignal {
        StreamSignal {
            signal_type: "inbox.updated".into(),
            tenant_id: TenantId::new("t1").unwrap(),
            recipient_id: RecipientId::new("a").unwrap(),
            head_seq: head,
            approximate_unacked: None,
            sent_at_utc: "2026-01-01T00:00:00Z".into(),
            delivery_id: delivery.into(),
        }
    }

    #[tokio::test]
    async fn the_streams_of_one_inbox_share_one_hint_per_wake_up() {
        let hints = Hints::default();
        let (_a, memo) = hints.watch_shared(&inbox("a"));
        let (_b, same) = hints.watch_shared(&inbox("a"));
        assert!(Arc::ptr_eq(&memo, &same), "one memo per inbox");
        let first = InboxWake { head: 1, nudges: 0 };
        let one = memo.get_or_make(first, async || signal(1, "d1")).await;
        let again = same.get_or_make(first, async || signal(1, "d2")).await;
        assert!(Arc::ptr_eq(&one, &again), "made once for this wake-up");
        assert_eq!(again.signal.delivery_id, "d1");
        let frame = one.sse_frame(|s| Bytes::from(format!("id: {}\n\n", s.head_seq)));
        assert_eq!(&again.sse_frame(|_| Bytes::from_static(b"not made twice"))[..], b"id: 1\n\n");
        assert_eq!(frame, again.sse_frame(|_| Bytes::new()));
        assert!(one.json().as_str().contains("\"head_seq\":1"));
        let next = memo.get_or_make(InboxWake { head: 2, nudges: 0 }, async || signal(2, "d3")).await;
        assert_eq!(next.signal.delivery_id, "d3", "a new head makes a new hint");
        let nudged = memo.get_or_make(InboxWake { head: 2, nudges: 1 }, async || signal(2, "d4")).await;
        assert_eq!(nudged.signal.delivery_id, "d4", "so does a nudge");
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
