//! Heads this node knows to be current, so a conditional head check (`GET /v1/inbox/head` with
//! `If-None-Match`) that will answer `304` needs no database read.
//!
//! The cache learns heads from the same reports that wake waiters: the notifier, which reads
//! every node's committed publishes from `outbox_signal`, and this node's own publishes right
//! after their commit; and from the database reads of checks it could not answer. A head only
//! grows, so every entry keeps the highest value it was told.
//!
//! It answers only while the notifier is known to be caught up: its last pass read everything
//! without an error and abandoned no skipped signal, and ended less than [`TRUST_PASSES`]
//! intervals ago. So a cached head is behind the database by at most what the notifier has not
//! read yet, the notifier's own delay, and never longer: after a start (before the first pass),
//! while the database is away, or when the notifier stalls or abandons a gap, every check reads
//! the database again, and the cache starts empty once the notifier catches up.
//!
//! A database read that raced a report cannot put an older head back: entries only grow, and a
//! read that started before the cache was emptied is not kept ([`HeadCache::epoch`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use inbox_core::{InboxSeq, RecipientKey};

/// Inboxes remembered at most; past this the cache starts over, empty.
pub const ENTRIES_MAX: usize = 100_000;

/// Notifier intervals a pass stays good for: a pass that ends later than this leaves the
/// cache untrusted until the next one.
pub const TRUST_PASSES: u32 = 3;

#[derive(Debug)]
pub struct HeadCache {
    inner: Mutex<Inner>,
    /// How long a caught-up notifier pass is trusted.
    trust_for: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    heads: HashMap<RecipientKey, u64>,
    /// Moves whenever the cache is emptied.
    epoch: u64,
    /// Until when the notifier's last pass vouches for the cache.
    trusted_until: Option<Instant>,
}

impl HeadCache {
    /// A cache fed by a notifier that runs every `notify_interval`.
    pub fn new(notify_interval: Duration) -> HeadCache {
        HeadCache { inner: Mutex::default(), trust_for: notify_interval * TRUST_PASSES }
    }

    /// The inbox's head, when the cache knows it and is trusted now.
    pub fn current(&self, inbox: &RecipientKey) -> Option<u64> {
        let inner = self.inner.lock().expect("head cache lock");
        let trusted = inner.trusted_until.is_some_and(|until| Instant::now() < until);
        if trusted { inner.heads.get(inbox).copied() } else { None }
    }

    /// A committed publish moved the inbox's head to at least `head` (a report of the notifier
    /// or of this node's publish).
    pub fn advanced(&self, inbox: &RecipientKey, head: InboxSeq) {
        let mut inner = self.inner.lock().expect("head cache lock");
        inner.keep(inbox, head.get());
    }

    /// Where the cache stands before a database read: pass it to [`HeadCache::read`].
    pub fn epoch(&self) -> u64 {
        self.inner.lock().expect("head cache lock").epoch
    }

    /// A database read, begun at `epoch`, found the inbox's head at `head`.
    pub fn read(&self, inbox: &RecipientKey, head: u64, epoch: u64) {
        let mut inner = self.inner.lock().expect("head cache lock");
        if inner.epoch == epoch {
            inner.keep(inbox, head);
        }
    }

    /// The notifier read everything committed so far, without an error or an abandoned gap.
    pub fn caught_up(&self) {
        let mut inner = self.inner.lock().expect("head cache lock");
        if inner.trusted_until.is_none() {
            // Reports missed while untrusted may be anywhere: start from nothing.
            inner.empty();
        }
        inner.trusted_until = Some(Instant::now() + self.trust_for);
    }

    /// The notifier may have missed a commit (a failed read, an abandoned gap): answer from the
    /// database until it has caught up again.
    pub fn distrust(&self) {
        let mut inner = self.inner.lock().expect("head cache lock");
        inner.trusted_until = None;
        inner.empty();
    }
}

impl Inner {
    fn keep(&mut self, inbox: &RecipientKey, head: u64) {
        if let Some(known) = self.heads.get_mut(inbox) {
            *known = (*known).max(head);
            return;
        }
        if self.heads.len() >= ENTRIES_MAX {
            self.empty();
        }
        self.heads.insert(inbox.clone(), head);
    }

    fn empty(&mut self) {
        self.heads.clear();
        self.epoch += 1;
    }
}

#[cfg(test)]
mod tests {
    use inbox_core::{Recipient, RecipientId, TenantId};

    use super::*;

    fn inbox(agent: &str) -> RecipientKey {
        RecipientKey {
            tenant_id: TenantId::new("t").unwrap(),
            recipient: Recipient::agent(RecipientId::new(agent).unwrap()),
        }
    }

    #[test]
    fn answers_only_while_the_notifier_is_caught_up() {
        let cache = HeadCache::new(Duration::from_millis(30));
        cache.advanced(&inbox("a"), InboxSeq(4));
        assert_eq!(cache.current(&inbox("a")), None, "before the first pass");
        cache.caught_up();
        assert_eq!(cache.current(&inbox("a")), None, "reports before the first pass are dropped");
        cache.advanced(&inbox("a"), InboxSeq(5));
        assert_eq!(cache.current(&inbox("a")), Some(5));
        cache.distrust();
        assert_eq!(cache.current(&inbox("a")), None);
        cache.caught_up();
        assert_eq!(cache.current(&inbox("a")), None, "emptied by the distrust");
    }

    #[test]
    fn a_pass_is_trusted_for_a_few_intervals_only() {
        let interval = Duration::from_millis(400);
        let cache = HeadCache::new(interval);
        cache.caught_up();
        cache.advanced(&inbox("a"), InboxSeq(1));
        std::thread::sleep(interval * TRUST_PASSES + Duration::from_millis(50));
        assert_eq!(cache.current(&inbox("a")), None, "a stalled notifier vouches for nothing");
        cache.caught_up();
        assert_eq!(cache.current(&inbox("a")), Some(1));
    }

    #[test]
    fn heads_only_grow_and_a_read_from_before_an_emptying_is_not_kept() {
        let cache = HeadCache::new(Duration::from_secs(60));
        cache.caught_up();
        let before = cache.epoch();
        cache.advanced(&inbox("a"), InboxSeq(7));
        cache.read(&inbox("a"), 6, before);
        assert_eq!(cache.current(&inbox("a")), Some(7), "an older read does not lower a head");
        cache.distrust();
        cache.caught_up();
        cache.read(&inbox("a"), 6, before);
        assert_eq!(cache.current(&inbox("a")), None, "read before the emptying");
        let now = cache.epoch();
        cache.read(&inbox("a"), 8, now);
        assert_eq!(cache.current(&inbox("a")), Some(8));
    }
}
