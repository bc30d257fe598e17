//! Group commit: many publishes in one transaction, so a busy node pays for one commit (one
//! fsync) and a handful of statements per batch instead of six round trips per publish.
//!
//! Every head the batch touches is locked once, in canonical (sorted) order, before anything
//! else, exactly as a single fan-out locks its heads, so batches never deadlock with each
//! other or with single publishes. Within the batch, publishes take sequence numbers in batch
//! order, and a deduplication key repeated in the batch resolves to the first publish's event,
//! as it would across batches. Nothing is answered before the commit returns; when a batch
//! fails for any reason but contention, each publish is tried again on its own, so one bad
//! request never fails its batch-mates.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use inbox_core::{EventId, FairnessKey, InboxSeq, Recipient, UnixMillis};

use super::Inbox;
use super::queries::{self, recipients_predicate};
use crate::db::{Arg, DbConnection};
use crate::dialect::Dialect;
use crate::inbox::fairness;
use crate::inbox::publish::{insert_records, insert_signal};
use crate::inbox::record::{recipient_from_row, seq};
use crate::store::with_retries;
use crate::{Delivery, EventRecord, Publish, PublishReceipt, StoreError};

/// Head rows per locking or updating statement.
const HEADS_PER_STATEMENT: usize = 200;
/// Deduplication keys per lookup statement.
const KEYS_PER_STATEMENT: usize = 200;

/// A head: tenant and recipient, ordered (tenant, kind, id) as every publisher locks them.
type HeadKey = (String, Recipient);

impl Inbox<'_> {
    /// Publishes each of `publishes` as [`Self::publish`] would, committing them together: one
    /// answer per publish, in order. A publish that is invalid on its own is refused without
    /// touching the others.
    pub async fn publish_batch(
        self,
        publishes: &[impl std::borrow::Borrow<Publish>],
    ) -> Vec<Result<PublishReceipt, StoreError>> {
        let mut answers: Vec<Option<Result<PublishReceipt, StoreError>>> =
            Vec::with_capacity(publishes.len());
        let mut valid = Vec::with_capacity(publishes.len());
        let now = self.store.now();
        for (index, publish) in publishes.iter().map(std::borrow::Borrow::borrow).enumerate() {
            let checked = publish
                .checked_recipients(self.store.config())
                .and_then(|recipients| publish.check_unexpired(now).map(|()| recipients));
            match checked {
                Ok(recipients) => {
                    valid.push(Batched { index, publish, recipients });
                    answers.push(None);
                }
                Err(err) => answers.push(Some(Err(err))),
            }
        }
        match valid.len() {
            0 => {}
            1 => answers[valid[0].index] = Some(self.publish(valid[0].publish).await),
            _ => match with_retries!(self.store, async {
                self.publish_batch_once(&valid).await.map_err(|err| self.galera_stale_read(err))
            }) {
                Ok(receipts) => {
                    for (batched, receipt) in valid.iter().zip(receipts) {
                        answers[batched.index] = Some(Ok(receipt));
                    }
                }
                // The database is away: every publish of the batch would wait out the same
                // timeout again, so each hears it now.
                Err(StoreError::Unavailable(err)) => {
                    let reason = err.to_string();
                    for batched in &valid {
                        answers[batched.index] = Some(Err(StoreError::unreachable(&reason)));
                    }
                }
                // Something in one publish (a constraint, a corrupt row): find which, alone.
                Err(_) => {
                    for batched in &valid {
                        answers[batched.index] = Some(self.publish(batched.publish).await);
                    }
                }
            },
        }
        answers.into_iter().map(|answer| answer.expect("every publish answered")).collect()
    }

    async fn publish_batch_once(self, batch: &[Batched<'_>]) -> Result<Vec<PublishReceipt>, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        let dialect = self.store.dialect();

        // How many rows each head gets, were no publish deduplicated.
        let mut counts: BTreeMap<HeadKey, u64> = BTreeMap::new();
        for batched in batch {
            for recipient in &batched.recipients {
                *counts
                    .entry((batched.publish.tenant_id.as_str().to_owned(), recipient.clone()))
                    .or_default() += 1;
            }
        }
        let keyed = batch.iter().any(|b| b.publish.deduplication_key.is_some());
        let heads: Vec<HeadKey> = counts.keys().cloned().collect();
        if keyed {
            // Which publishes add rows is known only once the heads are locked.
            for chunk in heads.chunks(HEADS_PER_STATEMENT) {
                let mut args = Vec::with_capacity(chunk.len() * 4);
                for (tenant, recipient) in chunk {
                    args.extend([
                        Arg::Str(tenant),
                        Arg::Str(recipient.kind.as_str()),
                        Arg::Str(recipient.id.as_str()),
                        Arg::I64(now.get()),
                    ]);
                }
                conn.execute(&queries::upsert_heads(dialect, chunk.len(), false), &args).await?;
            }
        } else {
            // Every recipient gets its rows: lock and advance each head in one statement.
            upsert_heads_to(&mut conn, dialect, &counts, HeadChange::Add, now).await?;
        }

        let mut existing = existing_events(&mut conn, dialect, batch).await?;
        let read = read_heads(&mut conn, &heads).await?;
        let mut head_seq = read.clone();
        if !keyed {
            for (key, head) in head_seq.iter_mut() {
                *head = head
                    .checked_sub(counts[key])
                    .ok_or_else(|| StoreError::Corrupt("a head below its own advance".into()))?;
            }
        }

        let mut receipts = Vec::with_capacity(batch.len());
        // Per tenant: the new rows, and each one's fairness key.
        let mut records_by_tenant: BTreeMap<&str, (Vec<EventRecord>, Vec<Option<&FairnessKey>>)> =
            BTreeMap::new();
        for batched in batch {
            let tenant = batched.publish.tenant_id.as_str();
            let key = batched.publish.deduplication_key.as_ref().map(|k| k.as_str());
            let mut deliveries = Vec::with_capacity(batched.recipients.len());
            let (records, keys) = records_by_tenant.entry(tenant).or_default();
            for recipient in &batched.recipients {
                let dedup = key.map(|key| (tenant.to_owned(), key.to_owned(), recipient.clone()));
                if let Some((event_id, inbox_seq)) = dedup.as_ref().and_then(|k| existing.get(k)) {
                    deliveries.push(Delivery {
                        recipient: recipient.clone(),
                        event_id: *event_id,
                        inbox_seq: *inbox_seq,
                        deduplicated: true,
                    });
                    continue;
                }
                let head = head_seq
                    .get_mut(&(tenant.to_owned(), recipient.clone()))
                    .ok_or_else(|| StoreError::Corrupt(format!("no inbox_head row for {recipient:?}")))?;
                *head += 1;
                let inbox_seq = InboxSeq::new(*head).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let record = self.new_record(batched.publish, recipient, inbox_seq, now);
                if let Some(dedup) = dedup {
                    existing.insert(dedup, (record.event_id, inbox_seq));
                }
                deliveries.push(Delivery {
                    recipient: recipient.clone(),
                    event_id: record.event_id,
                    inbox_seq,
                    deduplicated: false,
                });
                records.push(record);
                keys.push(batched.publish.fairness_key.as_ref());
            }
            receipts.push((tenant, PublishReceipt { deliveries, outbox_id: None }));
        }

        if keyed {
            head_seq.retain(|key, head| read.get(key) != Some(head));
            upsert_heads_to(&mut conn, dialect, &head_seq, HeadChange::Set, now).await?;
        } else {
            debug_assert_eq!(head_seq, read, "the advance covered exactly the rows written");
        }
        let mut outbox_ids = HashMap::new();
        for (tenant, (records, keys)) in &records_by_tenant {
            let ranks = fairness::rank(&mut conn, tenant, records, keys).await?;
            insert_records(&mut conn, records, &ranks).await?;
            outbox_ids.insert(*tenant, insert_signal(&mut conn, tenant, records, now).await?);
        }
        tx.commit().await?;
        Ok(receipts
            .into_iter()
            .map(|(tenant, mut receipt)| {
                if receipt.deliveries.iter().any(|d| !d.deduplicated) {
                    receipt.outbox_id = outbox_ids.get(tenant).copied().flatten();
                }
                receipt
            })
            .collect())
    }
}

/// A publish that passed its own checks, with where its answer goes.
struct Batched<'a> {
    index: usize,
    publish: &'a Publish,
    recipients: Vec<Recipient>,
}

/// The events already published under the batch's deduplication keys, by tenant, key and
/// recipient. The heads are locked, so a concurrent publish of the same key waits for this
/// transaction and the answer cannot go stale.
async fn existing_events(
    conn: &mut DbConnection<'_>,
    dialect: Dialect,
    batch: &[Batched<'_>],
) -> Result<HashMap<(String, String, Recipient), (EventId, InboxSeq)>, StoreError> {
    // Per tenant: the keys, and the recipients of the publishes that carry one.
    let mut keys: BTreeMap<&str, (BTreeSet<&str>, BTreeSet<&Recipient>)> = BTreeMap::new();
    for batched in batch {
        if let Some(key) = &batched.publish.deduplication_key {
            let (tenant_keys, recipients) = keys.entry(batched.publish.tenant_id.as_str()).or_default();
            tenant_keys.insert(key.as_str());
            recipients.extend(&batched.recipients);
        }
    }
    let mut existing = HashMap::new();
    for (tenant, (keys, recipients)) in keys {
        let keys: Vec<&str> = keys.into_iter().collect();
        let recipients: Vec<Recipient> = recipients.into_iter().cloned().collect();
        for chunk in keys.chunks(KEYS_PER_STATEMENT) {
            let mut args = vec![Arg::Str(tenant)];
            args.extend(chunk.iter().map(|k| Arg::Str(k)));
            // Only rows of recipients whose heads this batch holds: locking another batch's
            // rows could deadlock with it.
            let predicate = recipients_predicate(&recipients, &mut args);
            let sql = queries::rows_of_keys(dialect, chunk.len(), &predicate);
            for row in conn.fetch_all(&sql, &args).await? {
                let event_id = EventId::from_slice(&row.bytes("event_id")?)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let key = row.string("deduplication_key")?;
                existing.insert(
                    (tenant.to_owned(), key, recipient_from_row(&row)?),
                    (event_id, seq(row.i64("inbox_seq")?)?),
                );
            }
        }
    }
    Ok(existing)
}

/// The current `head_seq` of every locked head.
async fn read_heads(
    conn: &mut DbConnection<'_>,
    heads: &[HeadKey],
) -> Result<BTreeMap<HeadKey, u64>, StoreError> {
    let mut by_tenant: BTreeMap<&str, Vec<Recipient>> = BTreeMap::new();
    for (tenant, recipient) in heads {
        by_tenant.entry(tenant.as_str()).or_default().push(recipient.clone());
    }
    let mut seqs = BTreeMap::new();
    for (tenant, recipients) in &by_tenant {
        for chunk in recipients.chunks(HEADS_PER_STATEMENT) {
            let mut args = vec![Arg::Str(tenant)];
            let predicate = recipients_predicate(chunk, &mut args);
            for row in conn.fetch_all(&queries::heads_of(&predicate), &args).await? {
                let head = u64::try_from(row.i64("head_seq")?)
                    .map_err(|_| StoreError::Corrupt("a negative head_seq".into()))?;
                seqs.insert(((*tenant).to_owned(), recipient_from_row(&row)?), head);
            }
        }
    }
    Ok(seqs)
}

/// How [`upsert_heads_to`] changes an existing head.
#[derive(Debug, Clone, Copy)]
enum HeadChange {
    /// To the value given.
    Set,
    /// Up by the value given (a new head starts at it).
    Add,
}

/// Writes heads, in the canonical order they are kept in, many per statement.
async fn upsert_heads_to(
    conn: &mut DbConnection<'_>,
    dialect: Dialect,
    heads: &BTreeMap<HeadKey, u64>,
    change: HeadChange,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let heads: Vec<(&HeadKey, i64)> = heads.iter().map(|(k, v)| (k, *v as i64)).collect();
    let on_existing = match change {
        HeadChange::Set => queries::HEAD_SET_TO,
        HeadChange::Add => queries::HEAD_ADDED_TO,
    };
    for chunk in heads.chunks(HEADS_PER_STATEMENT) {
        let mut args = Vec::with_capacity(chunk.len() * 5);
        for ((tenant, recipient), head) in chunk {
            args.extend([
                Arg::Str(tenant),
                Arg::Str(recipient.kind.as_str()),
                Arg::Str(recipient.id.as_str()),
                Arg::I64(*head),
                Arg::I64(now.get()),
            ]);
        }
        conn.execute(&queries::write_heads(dialect, chunk.len(), on_existing), &args).await?;
    }
    Ok(())
}
