//! Visibility leases: claim, acknowledge, release and heartbeat.
//!
//! Each operation has a fast path, one SQL statement for the common case (every item holds
//! its lease) that also appends the event's history entry, and falls back to the slow path
//! (`apply.rs`) for the rest.
//!
//! A signed call's nonce is not recorded here: the server records it before the call, many
//! calls' nonces in one statement (see `Signatures::remember_nonces`).

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};

use inbox_core::limits::{RETRY_AFTER_SECONDS_MAX, Reason, ReleaseReason};
use inbox_core::{
    AckResult, AckState, EventId, LeaseToken, LeaseTokenHash, RecipientKey, SessionId, Transition, UnixMillis,
};

use super::{Inbox, queries};
use crate::db::{Arg, DbConnection};
use crate::entropy::random_bytes;
use crate::inbox::apply::Change;
use crate::inbox::claim_floor;
use crate::inbox::fairness;
use crate::inbox::history::{Actor, AppendAroundAttempt, Attribution, HistoryAction, HistoryEntry};
use crate::inbox::record::{event_from_row, seq_arg, settle};
use crate::inbox::rows::{inbox_args, load_events};
use crate::store::with_retries;
use crate::{
    AckReceipt, Acknowledge, ClaimByIds, ClaimNext, ClaimOrder, ClaimedEvent, EventRecord, Field, Heartbeat,
    HeartbeatItem, HeartbeatReceipt, ItemOutcome, ItemRefusal, Refusal, Release, ReleaseReceipt, StoreError,
};

/// Events one statement of [`Inbox::acknowledge_batch`] acknowledges at most: with two
/// parameters each, well inside SQLite's and MySQL's limits on a statement's parameters.
const ACKS_TOGETHER_MAX: usize = 2_000;

/// `places` (requests of one session) cut into the groups that go in one statement each, of
/// at most [`ACKS_TOGETHER_MAX`] events; a request alone takes the one-request path.
fn statements(places: &[usize], acks: &[impl Borrow<Acknowledge>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut events = 0;
    for &i in places {
        let n = acks[i].borrow().items.len();
        match groups.last_mut() {
            Some(group) if events + n <= ACKS_TOGETHER_MAX => {
                group.push(i);
                events += n;
            }
            _ => {
                groups.push(vec![i]);
                events = n;
            }
        }
    }
    groups.retain(|group| group.len() > 1);
    groups
}

/// Every item of `ack` acknowledged as completed.
fn acked(ack: &Acknowledge) -> Vec<ItemOutcome<AckReceipt>> {
    ack.items.iter().map(|i| Ok(AckReceipt { event_id: i.event_id, state: AckState::Acked })).collect()
}

/// The longest `retry_after` a release may ask for.
pub const RETRY_AFTER_MS_MAX: u64 = RETRY_AFTER_SECONDS_MAX * 1_000;
pub use inbox_core::limits::REASON_BYTES_MAX;

impl Inbox<'_> {
    /// Claims up to `limit` claimable events, most urgent first, then oldest. Concurrent
    /// claimers of one inbox skip each other's rows instead of waiting for them.
    pub async fn claim_next(self, claim: &ClaimNext) -> Result<Vec<ClaimedEvent>, StoreError> {
        self.store.batch_len(Field::Limit, claim.limit as usize)?;
        let lease_ms = self.store.lease_ms(claim.lease_ms)?;
        with_retries!(self.store, self.claim_next_once(claim, lease_ms))
    }

    async fn claim_next_once(
        self,
        claim: &ClaimNext,
        lease_ms: u64,
    ) -> Result<Vec<ClaimedEvent>, StoreError> {
        if claim.order == ClaimOrder::Fair {
            return self.claim_fair_once(claim, lease_ms).await;
        }
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let statement = claim_floor::claim_statement(&mut tx.conn(), &claim.inbox, claim.limit, now).await?;
        let records = tx
            .conn()
            .fetch_all(&statement.sql, &statement.args)
            .await?
            .iter()
            .map(event_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let lowest_claimed = records.iter().map(|record| record.inbox_seq.get()).min();
        let lease = Leasing { session_id: claim.session_id.as_ref(), now, lease_ms };
        let claimed = lease_records(self, &mut tx.conn(), &claim.inbox, records, lease).await?;
        tx.commit().await?;
        if statement.window.worth_advancing(lowest_claimed) {
            self.advance_claim_floor(&claim.inbox).await;
        }
        Ok(claimed)
    }

    /// A fair claim (`fairness.rs`): the fair index in rank order, then the served rank raised
    /// to the highest rank taken, in a statement of its own after the commit (and, every
    /// [`fairness::PRUNE_EVERY_RANKS`], the keys with nothing past it forgotten). Best effort:
    /// a served rank left behind only ranks a new key's events a little early, and a key row
    /// left behind ranks as no row would.
    async fn claim_fair_once(
        self,
        claim: &ClaimNext,
        lease_ms: u64,
    ) -> Result<Vec<ClaimedEvent>, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let (sql, args) = fairness::claim_statement(&tx.conn(), &claim.inbox, claim.limit, now);
        let rows = tx.conn().fetch_all(&sql, &args).await?;
        let mut ranks = Vec::with_capacity(rows.len());
        for row in &rows {
            if let Some(rank) = row.opt_i64("fair_rank")?.and_then(|rank| u64::try_from(rank).ok()) {
                ranks.push(rank);
            }
        }
        let records = rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
        let lease = Leasing { session_id: claim.session_id.as_ref(), now, lease_ms };
        let claimed = lease_records(self, &mut tx.conn(), &claim.inbox, records, lease).await?;
        tx.commit().await?;
        if let (Some(&lowest), Some(&highest)) = (ranks.iter().min(), ranks.iter().max()) {
            let raised = async {
                let mut pooled = self.store.pools().writer().await?;
                fairness::raise_served_rank(&mut pooled.conn(), &claim.inbox, highest, now).await?;
                if fairness::worth_pruning(lowest, highest) {
                    fairness::prune_keys(&mut pooled.conn(), &claim.inbox, highest).await?;
                }
                Ok::<_, StoreError>(())
            };
            if let Err(err) = raised.await {
                tracing::debug!(error = %err, tenant = %claim.inbox.tenant_id, "served rank not raised or keys not pruned");
            }
        }
        Ok(claimed)
    }

    /// Moves the inbox's claim floor forward after a claim, in a transaction of its own, so
    /// the next claim names fewer buckets. Best effort: a floor that stays behind costs later
    /// claims reads, never an event, so a failure (another node moving or lowering it at the
    /// same moment) is only logged.
    async fn advance_claim_floor(self, inbox: &RecipientKey) {
        let advanced = async {
            let mut tx = self.store.pools().begin().await?;
            let advanced = claim_floor::advance(&mut tx.conn(), inbox, self.store.now()).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(advanced)
        };
        if let Err(err) = advanced.await {
            tracing::debug!(error = %err, tenant = %inbox.tenant_id, recipient = %inbox.recipient.id, "claim floor not moved");
        }
    }

    /// Claims the named events, each with its own outcome, in request order.
    pub async fn claim_by_ids(
        self,
        claim: &ClaimByIds,
    ) -> Result<Vec<ItemOutcome<ClaimedEvent>>, StoreError> {
        self.store.batch_len(Field::EventIds, claim.event_ids.len())?;
        distinct(Field::EventIds, claim.event_ids.iter())?;
        let lease_ms = self.store.lease_ms(claim.lease_ms)?;
        with_retries!(self.store, self.claim_by_ids_once(claim, lease_ms))
    }

    async fn claim_by_ids_once(
        self,
        claim: &ClaimByIds,
        lease_ms: u64,
    ) -> Result<Vec<ItemOutcome<ClaimedEvent>>, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let locked = load_events(
            &mut conn,
            &claim.inbox,
            &claim.event_ids,
            self.store.dialect().for_update_skip_locked(),
        )
        .await?;
        let mut refusals: HashMap<EventId, Refusal> = HashMap::new();
        let mut claimable = Vec::new();
        for record in locked {
            match record.lifecycle.claimable_at(now) {
                Ok(()) => claimable.push(record),
                Err(reason) => {
                    refusals.insert(record.event_id, Refusal::Refused(reason));
                }
            }
        }
        let lease = Leasing { session_id: claim.session_id.as_ref(), now, lease_ms };
        let claimed = lease_records(self, &mut conn, &claim.inbox, claimable, lease).await?;
        let mut claimed: HashMap<EventId, ClaimedEvent> =
            claimed.into_iter().map(|c| (c.event.event_id, c)).collect();

        // Rows skipped as locked exist but are being claimed or changed by someone else.
        let missing: Vec<EventId> = claim
            .event_ids
            .iter()
            .filter(|id| !claimed.contains_key(id) && !refusals.contains_key(id))
            .copied()
            .collect();
        if !missing.is_empty() {
            for record in load_events(&mut conn, &claim.inbox, &missing, "").await? {
                refusals.insert(
                    record.event_id,
                    Refusal::Refused(inbox_core::RefusalReason::NotClaimable("claimed")),
                );
            }
        }
        tx.commit().await?;
        Ok(claim
            .event_ids
            .iter()
            .map(|id| match claimed.remove(id) {
                Some(c) => Ok(c),
                None => Err(ItemRefusal {
                    event_id: *id,
                    reason: refusals.get(id).copied().unwrap_or(Refusal::NotFound),
                }),
            })
            .collect())
    }

    /// Acknowledges events. Repeating an ack with the same token succeeds and changes
    /// nothing; a `failed` result parks the event as dead-lettered.
    pub async fn acknowledge(self, ack: &Acknowledge) -> Result<Vec<ItemOutcome<AckReceipt>>, StoreError> {
        self.check_acknowledge(ack)?;
        with_retries!(self.store, self.acknowledge_once(ack))
    }

    /// Acknowledges several requests' events (a node's concurrent acknowledgements, gathered by
    /// group commit), answering each as [`Inbox::acknowledge`] would. Requests whose every
    /// item completes, and that name the same session, go in one statement together; the
    /// others, and every request of a group where some token did not match, are then answered
    /// one by one. A request never acknowledges another's events: each token is matched within
    /// its own request and inbox.
    pub async fn acknowledge_batch(
        self,
        acks: &[impl Borrow<Acknowledge>],
    ) -> Vec<Result<Vec<ItemOutcome<AckReceipt>>, StoreError>> {
        let mut answers: Vec<Option<Result<_, _>>> =
            acks.iter().map(|ack| self.check_acknowledge(ack.borrow()).err().map(Err)).collect();
        let mut groups: HashMap<Option<&SessionId>, Vec<usize>> = HashMap::new();
        for (i, ack) in acks.iter().map(Borrow::borrow).enumerate() {
            if answers[i].is_none() && ack.items.iter().all(|item| item.result == AckResult::Completed) {
                groups.entry(ack.session_id.as_ref()).or_default().push(i);
            }
        }
        for places in groups.into_values().flat_map(|places| statements(&places, acks)) {
            let group: Vec<&Acknowledge> = places.iter().map(|&i| acks[i].borrow()).collect();
            if let Ok(true) = with_retries!(self.store, self.completed_together(&group, self.store.now())) {
                for (&i, ack) in places.iter().zip(group) {
                    answers[i] = Some(Ok(acked(ack)));
                }
            }
        }
        let mut results = Vec::with_capacity(acks.len());
        for (ack, answer) in acks.iter().map(Borrow::borrow).zip(answers) {
            results.push(match answer {
                Some(answer) => answer,
                None => with_retries!(self.store, self.acknowledge_once(ack)),
            });
        }
        results
    }

    /// The checks of an acknowledgement that need no database.
    fn check_acknowledge(&self, ack: &Acknowledge) -> Result<(), StoreError> {
        self.store.batch_len(Field::Acks, ack.items.len())?;
        distinct(Field::Acks, ack.items.iter().map(|i| &i.event_id))?;
        for (index, item) in ack.items.iter().enumerate() {
            match (&item.reason, item.result) {
                (None, AckResult::Quarantined) => {
                    return Err(StoreError::invalid_item(
                        Field::Reason,
                        index,
                        format!(
                            "is required to quarantine event {}: say why, in at most {REASON_BYTES_MAX} bytes",
                            item.event_id
                        ),
                    ));
                }
                (Some(reason), _) => check_reason(reason).map_err(|e| e.of_item(index))?,
                (None, _) => {}
            }
        }
        Ok(())
    }

    async fn acknowledge_once(self, ack: &Acknowledge) -> Result<Vec<ItemOutcome<AckReceipt>>, StoreError> {
        let now = self.store.now();
        if ack.items.iter().all(|item| item.result == AckResult::Completed)
            && self.completed_together(&[ack], now).await?
        {
            return Ok(acked(ack));
        }
        let changes: Vec<Change> = ack
            .items
            .iter()
            .map(|item| Change {
                event_id: item.event_id,
                transition: Transition::Acknowledge {
                    token_hash: item.lease_token.hash(),
                    now,
                    result: item.result,
                },
                note: item.reason.as_deref().filter(|_| item.result != AckResult::Completed),
                by: Attribution {
                    class: (item.result == AckResult::Quarantined).then(|| item.class.unwrap_or_default()),
                    ..Attribution::agent(ack.session_id.as_ref())
                },
            })
            .collect();
        let outcomes = self.apply_changes(&ack.inbox, &changes, now).await?;
        Ok(outcomes
            .into_iter()
            .map(|o| o.map(|r| AckReceipt { event_id: r.event_id, state: r.state() }))
            .collect())
    }

    /// The fast path: every item of `acks` (requests of one session, every item completed)
    /// acknowledged in one statement. `Ok(false)`: some token did not match (a repeat, a lost
    /// lease); answer item by item.
    async fn completed_together(self, acks: &[&Acknowledge], now: UnixMillis) -> Result<bool, StoreError> {
        let items: usize = acks.iter().map(|ack| ack.items.len()).sum();
        let hashes: Vec<Vec<LeaseTokenHash>> =
            acks.iter().map(|ack| ack.items.iter().map(|i| i.lease_token.hash()).collect()).collect();
        let dialect = self.store.dialect();
        let mut args = Vec::with_capacity(5 + 3 * acks.len() + 2 * items);
        // Every item's entry is the same but for its attempt, read from the row itself.
        let history = self.store.config().record_history.then(|| {
            let entry = HistoryEntry {
                session_id: acks[0].session_id.clone(),
                ..HistoryEntry::new(now, HistoryAction::Acknowledged, AckState::Acked, 0, &Actor::Agent)
            };
            AppendAroundAttempt::new(dialect, &entry)
        });
        if let Some(append) = &history {
            args.extend([Arg::Str(append.before.as_str()), Arg::Str(append.after.as_str())]);
        }
        args.extend([Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(now.get())]);
        for (ack, hashes) in acks.iter().zip(&hashes) {
            args.extend(inbox_args(&ack.inbox));
            args.extend(ack.items.iter().map(|i| Arg::Bytes(i.event_id.as_bytes())));
            args.extend(hashes.iter().map(|h| Arg::Bytes(h.0.as_slice())));
        }
        let sizes: Vec<usize> = acks.iter().map(|ack| ack.items.len()).collect();
        let sql = queries::ack_completed(
            dialect,
            &sizes,
            history.as_ref().map_or("", |append| append.set.as_str()),
        );
        // Rows that matched stay acknowledged even when others did not: the item-by-item path
        // that follows finds them acknowledged with the same token, which it answers as done.
        let done = self.store.pools().writer().await?.conn().execute(&sql, &args).await?;
        Ok(done.rows_affected == items as u64)
    }

    /// Gives a claimed event back: claimable again after `retry_after_ms`, or dead-lettered if
    /// it has no attempts left.
    pub async fn release(self, release: &Release) -> Result<ReleaseReceipt, StoreError> {
        if release.retry_after_ms > RETRY_AFTER_MS_MAX {
            return Err(StoreError::invalid(
                Field::RetryDelay,
                format!("must be at most {RETRY_AFTER_SECONDS_MAX} s (one week)"),
            ));
        }
        if let Some(reason) = &release.reason {
            ReleaseReason::new(reason.as_str()).map_err(|e| StoreError::invalid(Field::Reason, e.0))?;
        }
        with_retries!(self.store, self.release_once(release))
    }

    async fn release_once(self, release: &Release) -> Result<ReleaseReceipt, StoreError> {
        let now = self.store.now();
        let next_retry_at = (release.retry_after_ms > 0).then(|| now.plus_ms(release.retry_after_ms));
        let hash = release.lease_token.hash();
        let dialect = self.store.dialect();
        let mut args = Vec::with_capacity(12);
        // The entry is built around the row's attempt count and lease owner: nothing is read.
        let history = self.store.config().record_history.then(|| {
            let entry = HistoryEntry {
                reason: release.reason.clone(),
                ..HistoryEntry::new(now, HistoryAction::Released, AckState::Available, 0, &Actor::Agent)
            };
            AppendAroundAttempt::new(dialect, &entry)
        });
        if let Some(append) = &history {
            args.extend([Arg::Str(append.before.as_str()), Arg::Str(append.after.as_str())]);
        }
        args.extend([
            Arg::I64(now.get()),
            Arg::OptI64(next_retry_at.map(UnixMillis::get)),
            Arg::OptStr(release.reason.as_deref()),
            Arg::I64(now.get()),
        ]);
        args.extend(inbox_args(&release.inbox));
        args.extend([
            Arg::Bytes(release.event_id.as_bytes()),
            Arg::Bytes(hash.0.as_slice()),
            Arg::I64(now.get()),
        ]);
        let sql = queries::release_held(dialect, history.as_ref().map_or("", |append| append.set.as_str()));
        let mut tx = self.store.pools().begin().await?;
        let done = tx.conn().execute(&sql, &args).await?;
        if done.rows_affected == 1 {
            // Available again: below the claim floor, claims would not see it.
            let mut args = inbox_args(&release.inbox);
            args.push(Arg::Bytes(release.event_id.as_bytes()));
            let row = tx.conn().fetch_optional(queries::SEQ_OF_EVENT, &args).await?;
            let seq = row
                .map(|row| row.i64("inbox_seq"))
                .transpose()?
                .map(crate::inbox::record::seq)
                .transpose()?;
            if let Some(seq) = seq {
                claim_floor::reopen(&mut tx.conn(), &release.inbox, seq, now).await?;
            }
            tx.commit().await?;
            return Ok(ReleaseReceipt {
                event_id: release.event_id,
                state: AckState::Available,
                next_retry_at,
            });
        }
        // The slow path takes its own transaction (on SQLite, the one writer).
        tx.rollback().await?;
        let change = Change {
            event_id: release.event_id,
            transition: Transition::Release { token_hash: hash, now, retry_after_ms: release.retry_after_ms },
            note: release.reason.as_deref(),
            by: Attribution::agent(None),
        };
        let outcome =
            self.apply_changes(&release.inbox, &[change], now).await?.pop().expect("one outcome per change");
        let record = outcome?;
        Ok(ReleaseReceipt {
            event_id: record.event_id,
            state: record.state(),
            next_retry_at: record.lifecycle.next_retry_at,
        })
    }

    /// Extends live leases. A lease that has already ended is not revived.
    pub async fn heartbeat(
        self,
        heartbeat: &Heartbeat,
    ) -> Result<Vec<ItemOutcome<HeartbeatReceipt>>, StoreError> {
        self.store.batch_len(Field::Leases, heartbeat.items.len())?;
        distinct(Field::Leases, heartbeat.items.iter().map(|i| &i.event_id))?;
        let lease_ms_max = self.store.config().lease_ms_max;
        let out_of_bounds = |i: &HeartbeatItem| i.extend_ms < 1_000 || i.extend_ms > lease_ms_max;
        if let Some((index, item)) = heartbeat.items.iter().enumerate().find(|(_, i)| out_of_bounds(i)) {
            return Err(StoreError::invalid_item(
                Field::LeaseExtension,
                index,
                format!(
                    "is {} s for event {}; it must be between 1 and {} s",
                    item.extend_ms / 1_000,
                    item.event_id,
                    lease_ms_max / 1_000
                ),
            ));
        }
        with_retries!(self.store, self.heartbeat_once(heartbeat))
    }

    async fn heartbeat_once(
        self,
        heartbeat: &Heartbeat,
    ) -> Result<Vec<ItemOutcome<HeartbeatReceipt>>, StoreError> {
        let now = self.store.now();
        let items = &heartbeat.items;
        let extend_ms = items[0].extend_ms;
        if items.iter().all(|i| i.extend_ms == extend_ms) {
            let until = now.plus_ms(extend_ms);
            let hashes: Vec<LeaseTokenHash> = items.iter().map(|i| i.lease_token.hash()).collect();
            let mut args = vec![Arg::I64(until.get()), Arg::I64(now.get())];
            args.extend(inbox_args(&heartbeat.inbox));
            args.extend([Arg::I64(now.get()), Arg::I64(until.get())]);
            args.extend(items.iter().map(|i| Arg::Bytes(i.event_id.as_bytes())));
            args.extend(hashes.iter().map(|h| Arg::Bytes(h.0.as_slice())));
            let sql = queries::extend_leases(self.store.dialect(), items.len());
            let done = self.store.pools().writer().await?.conn().execute(&sql, &args).await?;
            if done.rows_affected == items.len() as u64 {
                return Ok(items
                    .iter()
                    .map(|i| Ok(HeartbeatReceipt { event_id: i.event_id, lease_until: until }))
                    .collect());
            }
        }
        let lease_ms_max = self.store.config().lease_ms_max;
        let changes: Vec<Change> = items
            .iter()
            .map(|item| Change {
                event_id: item.event_id,
                transition: Transition::Heartbeat {
                    token_hash: item.lease_token.hash(),
                    now,
                    extend_ms: item.extend_ms,
                    lease_ms_max,
                },
                note: None,
                by: Attribution::agent(None),
            })
            .collect();
        let outcomes = self.apply_changes(&heartbeat.inbox, &changes, now).await?;
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.map(|r| HeartbeatReceipt {
                    event_id: r.event_id,
                    lease_until: r.lifecycle.lease.map_or(now, |l| l.until),
                })
            })
            .collect())
    }
}
/// The lease a claim hands out.
#[derive(Clone, Copy)]
struct Leasing<'a> {
    session_id: Option<&'a SessionId>,
    now: UnixMillis,
    lease_ms: u64,
}

/// Marks claimable records of one inbox as claimed, each under a fresh token, in one UPDATE
/// that also appends each one's `claimed` history entry.
async fn lease_records(
    inbox_handle: Inbox<'_>,
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    records: Vec<EventRecord>,
    lease: Leasing<'_>,
) -> Result<Vec<ClaimedEvent>, StoreError> {
    let Leasing { session_id, now, lease_ms } = lease;
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let lease_until = now.plus_ms(lease_ms);
    let mut claimed = Vec::with_capacity(records.len());
    for mut record in records {
        let lease_token = LeaseToken::from_random(random_bytes());
        let transition = Transition::Claim { token_hash: lease_token.hash(), now, lease_ms };
        let applied = record.lifecycle.apply(transition).map_err(|reason| {
            StoreError::Corrupt(format!("event {} was selected as claimable but {reason}", record.event_id))
        })?;
        settle(&mut record, applied.next, now);
        record.lease_owner_session_id = session_id.cloned();
        claimed.push(ClaimedEvent { event: record, lease_token, lease_until });
    }
    let hashes: Vec<LeaseTokenHash> = claimed.iter().map(|c| c.lease_token.hash()).collect();
    let mut args = vec![
        Arg::I64(lease_until.get()),
        Arg::OptStr(session_id.map(SessionId::as_str)),
        Arg::I64(now.get()),
    ];
    for (c, hash) in claimed.iter().zip(&hashes) {
        args.extend([seq_arg(c.event.inbox_seq), Arg::Bytes(hash.0.as_slice())]);
    }
    // Each row's entry, chosen per row like its token hash; the attempt is known here.
    let lines: Vec<String> = if inbox_handle.store.config().record_history {
        claimed
            .iter()
            .map(|c| {
                let life = &c.event.lifecycle;
                HistoryEntry {
                    session_id: session_id.cloned(),
                    ..HistoryEntry::new(
                        now,
                        HistoryAction::Claimed,
                        life.state,
                        life.delivery_attempts,
                        &Actor::Agent,
                    )
                }
                .line()
            })
            .collect()
    } else {
        Vec::new()
    };
    for (c, line) in claimed.iter().zip(&lines) {
        args.extend([seq_arg(c.event.inbox_seq), Arg::Str(line.as_str())]);
    }
    args.extend(inbox_args(inbox));
    args.extend(claimed.iter().map(|c| seq_arg(c.event.inbox_seq)));
    let sql = queries::mark_claimed(conn.dialect(), claimed.len(), !lines.is_empty());
    let done = conn.execute(&sql, &args).await?;
    if done.rows_affected != claimed.len() as u64 {
        return Err(StoreError::Corrupt(format!(
            "claimed {} of {} locked events",
            done.rows_affected,
            claimed.len()
        )));
    }
    Ok(claimed)
}

/// Checks a quarantine's (or failure's) reason by the rule of [`Reason`].
pub(crate) fn check_reason(reason: &str) -> Result<(), StoreError> {
    Reason::new(reason).map(|_| ()).map_err(|e| StoreError::invalid(Field::Reason, e.0))
}

/// Refuses a batch that names the same event twice: its outcomes would be ambiguous.
pub(crate) fn distinct<'a>(field: Field, ids: impl Iterator<Item = &'a EventId>) -> Result<(), StoreError> {
    let mut seen = HashSet::new();
    for id in ids {
        if !seen.insert(*id) {
            return Err(StoreError::invalid(field, format!("names event {id} twice")));
        }
    }
    Ok(())
}
