//! The `inbox` subsystem: publishing into recipients' inboxes (alone, in a batch, or inside a
//! host application's transaction), reading after a cursor, visibility leases, the scavenger,
//! the operator's tools for parked events and cold storage of retained history.
//!
//! Every operation is a method of [`Inbox`], the handle [`SqlStore::inbox`] lends out.

mod admin;
pub(crate) mod apply;
mod browse;
mod claim_floor;
mod claim_plan;
mod cold_storage;
mod fairness;
mod handoff;
pub(crate) mod history;
mod leases;
mod model;
mod publish;
mod publish_batch;
mod queries;
mod read;
pub(crate) mod record;
pub(crate) mod rows;
mod scavenge;

pub(crate) use scavenge::SweepMarks;

pub use admin::{BACKLOGS_MAX, Backlog};
pub use browse::ACTIVITY_WINDOW_MS_MAX;
pub use claim_plan::{CLAIM_INDEX, ClaimPlan};
pub use cold_storage::{ARCHIVE_BATCH_MAX, ArchiveKey, ArchivedRow, archive_key_of_line};
pub use handoff::{FOLLOW_UPS_MAX, HANDOFF_KEY_PREFIX, HandOff, HandOffReceipt, handoff_key};
pub use history::{ACTOR_SUBJECT_BYTES_MAX, Actor, HISTORY_ENTRIES_MAX, HistoryAction, HistoryEntry};
pub use leases::{REASON_BYTES_MAX, RETRY_AFTER_MS_MAX};
pub use model::{
    AckItem, AckReceipt, Acknowledge, ClaimByIds, ClaimNext, ClaimOrder, ClaimedEvent, DELIVERY_ATTEMPTS_MAX,
    Delivery, EventDetail, EventRecord, EventState, EventsQuery, Heartbeat, HeartbeatItem, HeartbeatReceipt,
    InboxHead, InboxStats, MinuteActivity, ParkedQuery, PollPage, PollQuery, Publish, PublishReceipt,
    QuarantineRequest, Release, ReleaseReceipt, ScavengeReport, TenantUsage,
};
pub use read::UNACKED_ESTIMATE_MAX;

use crate::SqlStore;

/// The `signal_type` of the `outbox_signal` row that a change taking parked events back to the
/// inbox commits (`apply.rs`); its `recipient_heads` names the inbox with the highest seq
/// reopened, which is not a new head.
pub const INBOX_NUDGED_SIGNAL: &str = "inbox.nudged";

/// The inbox subsystem of one [`SqlStore`]: publish, read, leases, scavenge, parked events and
/// cold storage. A borrowed view, free to make: `store.inbox().claim_next(&claim)`.
#[derive(Debug, Clone, Copy)]
pub struct Inbox<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// Publishing, reading and leasing events, see [`Inbox`].
    pub fn inbox(&self) -> Inbox<'_> {
        Inbox { store: self }
    }
}
