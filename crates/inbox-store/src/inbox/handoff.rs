//! Hand-offs: an acknowledgement that carries follow-up publishes, so a chain of agents acts
//! exactly once. The ack and the follow-ups commit in one transaction, and only while the
//! acknowledging lease holds; a stale lease refuses both. Each follow-up's deduplication key is
//! derived from the acknowledged event and the follow-up's place in the list, so a retried
//! hand-off (the answer was lost) finds its first publishes instead of making second ones.
//!
//! It reuses the two paths it joins: the slow path's lease check (`apply.rs`, inside this
//! transaction) and the one publishing path (`publish.rs`). The acknowledged row is locked
//! before any head, as an acknowledgement alone would lock it; the heads follow in canonical
//! order, as every publish locks them.

use inbox_core::{
    AckResult, AckState, DeduplicationKey, EventId, Recipient, RecipientKey, SessionId, Transition,
};

use super::Inbox;
use crate::db::DbConnection;
use crate::inbox::apply::Change;
use crate::inbox::history::Attribution;
use crate::inbox::rows::load_events;
use crate::store::with_retries;
use crate::{AckReceipt, Field, ItemOutcome, ItemRefusal, Publish, PublishReceipt, Refusal, StoreError};
use inbox_core::{LeaseToken, RefusalReason};

pub use inbox_core::limits::FOLLOW_UPS_MAX;

/// The prefix of every follow-up's deduplication key: `handoff:{event_id}:{index}`.
pub const HANDOFF_KEY_PREFIX: &str = "handoff:";

/// An acknowledgement (always `completed`) with the publishes it hands work on with.
#[derive(Debug, Clone)]
pub struct HandOff {
    pub inbox: RecipientKey,
    /// The session acknowledging, for the history.
    pub session_id: Option<SessionId>,
    pub event_id: EventId,
    pub lease_token: LeaseToken,
    /// One to [`FOLLOW_UPS_MAX`] publishes, each to recipients of the acknowledging inbox's
    /// tenant, without a deduplication key of their own (the hand-off gives each one).
    pub follow_ups: Vec<Publish>,
}

/// What a hand-off committed: the acknowledgement, and one receipt per follow-up (on a retry,
/// the first publishes, marked deduplicated).
#[derive(Debug, Clone)]
pub struct HandOffReceipt {
    pub ack: AckReceipt,
    pub follow_ups: Vec<PublishReceipt>,
}

/// The deduplication key of follow-up `index` of the hand-off acknowledging `event_id`.
pub fn handoff_key(event_id: EventId, index: usize) -> DeduplicationKey {
    DeduplicationKey::new(format!("{HANDOFF_KEY_PREFIX}{event_id}:{index}"))
        .expect("a uuid and an index fit a deduplication key")
}

impl Inbox<'_> {
    /// Acknowledges one event and publishes its follow-ups in the same transaction, only while
    /// its lease holds. A refused lease (`lease_mismatch`, `lease_expired`, ...) commits
    /// nothing. Repeating a hand-off that committed answers its first receipts; a hand-off
    /// named for an event already acknowledged without these follow-ups is refused, since its
    /// lease ended then.
    pub async fn hand_off(self, hand_off: &HandOff) -> Result<ItemOutcome<HandOffReceipt>, StoreError> {
        if hand_off.follow_ups.is_empty() || hand_off.follow_ups.len() > FOLLOW_UPS_MAX {
            return Err(StoreError::invalid(
                Field::FollowUps,
                format!("must hold 1 to {FOLLOW_UPS_MAX} publishes; it holds {}", hand_off.follow_ups.len()),
            ));
        }
        let mut keyed = Vec::with_capacity(hand_off.follow_ups.len());
        for (index, follow_up) in hand_off.follow_ups.iter().enumerate() {
            if follow_up.tenant_id != hand_off.inbox.tenant_id {
                return Err(StoreError::invalid_item(
                    Field::Tenant,
                    index,
                    "must be the acknowledging inbox's tenant",
                ));
            }
            if follow_up.deduplication_key.is_some() {
                return Err(StoreError::invalid_item(
                    Field::DeduplicationKey,
                    index,
                    format!(
                        "is given by the hand-off ({HANDOFF_KEY_PREFIX}{{event_id}}:{{index}}); leave it out"
                    ),
                ));
            }
            let publish = Publish {
                deduplication_key: Some(handoff_key(hand_off.event_id, index)),
                ..follow_up.clone()
            };
            let recipients = publish.checked_recipients(self.store.config()).map_err(|e| e.of_item(index))?;
            keyed.push((publish, recipients));
        }
        with_retries!(self.store, self.hand_off_once(hand_off, &keyed))
    }

    async fn hand_off_once(
        self,
        hand_off: &HandOff,
        keyed: &[(Publish, Vec<Recipient>)],
    ) -> Result<ItemOutcome<HandOffReceipt>, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let ids = [hand_off.event_id];
        let lock = self.store.dialect().for_update();
        // Under the row lock: was it acknowledged before this call? Then this is a repeat. A
        // lease past its end is over for a hand-off even before the scavenger returns the
        // event (a plain acknowledgement is still taken then; a hand-off is held to the lease).
        let locked = load_events(&mut conn, &hand_off.inbox, &ids, lock).await?;
        let repeat = locked.first().is_some_and(|record| record.state() == AckState::Acked);
        let lapsed = locked.first().is_some_and(|record| {
            record.state() == AckState::Claimed
                && record.lifecycle.lease.is_some_and(|lease| lease.until <= now)
        });
        if lapsed {
            return Ok(Err(ItemRefusal {
                event_id: hand_off.event_id,
                reason: Refusal::Refused(RefusalReason::LeaseExpired),
            }));
        }
        let change = Change {
            event_id: hand_off.event_id,
            transition: Transition::Acknowledge {
                token_hash: hand_off.lease_token.hash(),
                now,
                result: AckResult::Completed,
            },
            note: None,
            by: Attribution::agent(hand_off.session_id.as_ref()),
        };
        let outcome = self
            .apply_changes_in(&mut conn, &hand_off.inbox, &[change], now)
            .await?
            .pop()
            .expect("one outcome per change");
        let record = match outcome {
            Ok(record) => record,
            // Dropping the transaction rolls it back: nothing of a refused hand-off commits.
            Err(refusal) => return Ok(Err(refusal)),
        };
        let follow_ups = publish_all(self, &mut conn, keyed).await?;
        let published_now = follow_ups.iter().flat_map(|r| &r.deliveries).any(|d| !d.deduplicated);
        if repeat && published_now {
            return Ok(Err(ItemRefusal {
                event_id: hand_off.event_id,
                reason: Refusal::Refused(RefusalReason::Terminal("acked")),
            }));
        }
        tx.commit().await?;
        Ok(Ok(HandOffReceipt {
            ack: AckReceipt { event_id: record.event_id, state: record.state() },
            follow_ups,
        }))
    }
}

async fn publish_all(
    inbox: Inbox<'_>,
    conn: &mut DbConnection<'_>,
    keyed: &[(Publish, Vec<Recipient>)],
) -> Result<Vec<PublishReceipt>, StoreError> {
    let mut receipts = Vec::with_capacity(keyed.len());
    for (index, (publish, recipients)) in keyed.iter().enumerate() {
        receipts.push(inbox.publish_rows(conn, publish, recipients).await.map_err(|e| e.of_item(index))?);
    }
    Ok(receipts)
}
