//! Publishing: one event to one or many recipients, atomically, inside a transaction the
//! store opens or one the host application already holds.
//!
//! Per recipient, `inbox_head` hands out the next sequence number. Its row stays locked until
//! the publishing transaction commits, so a recipient's sequence order is its commit order
//! and a reader paging by `inbox_seq` can never skip a row that commits late. Head rows are
//! locked in canonical (sorted) order, so two fan-outs can never deadlock on each other.

use std::collections::HashMap;

use inbox_core::{EventId, EventLifecycle, InboxSeq, Recipient, RecipientKey, UnixMillis};

use super::Inbox;
use super::queries::{self, recipients_predicate};
use crate::Field;
use crate::db::{Arg, DbConnection};
use crate::entropy::random_bytes;
use crate::inbox::fairness;
use crate::inbox::record::{push_event_values, recipient_from_row, seq};
use crate::store::with_retries;
use crate::{Delivery, Dialect, EventRecord, Publish, PublishReceipt, StoreError};

/// Inbox rows per INSERT statement, well under every backend's placeholder limit.
const ROWS_PER_INSERT: usize = 200;

impl Inbox<'_> {
    /// Publishes in a transaction of the store's own, retried if chosen as a deadlock victim.
    pub async fn publish(self, publish: &Publish) -> Result<PublishReceipt, StoreError> {
        let recipients = publish.checked_recipients(self.store.config())?;
        with_retries!(self.store, async {
            let mut tx = self.store.pools().begin().await?;
            let receipt = self.publish_rows(&mut tx.conn(), publish, &recipients).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(receipt)
        })
    }

    /// Publishes inside the caller's open transaction, so the host application's domain rows
    /// and the inbox rows commit (or roll back) together:
    ///
    /// ```no_run
    /// # async fn example(store: inbox_store::SqlStore, pool: sqlx::MySqlPool, publish: inbox_store::Publish)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?; // the host application's own transaction
    /// sqlx::query("INSERT INTO room_message (id, body) VALUES (?, ?)").bind(7).bind("hi").execute(&mut *tx).await?;
    /// store.inbox().publish_in(&mut *tx, &publish).await?;
    /// tx.commit().await?; // the message and every recipient's inbox row, or neither
    /// # Ok(()) }
    /// ```
    ///
    /// On SQLite open the transaction with `BEGIN IMMEDIATE`. A deadlock here rolls back the
    /// caller's whole transaction, so it is reported as [`StoreError::Contention`] for the
    /// caller to retry rather than retried inside.
    pub async fn publish_in<'c>(
        self,
        conn: impl Into<DbConnection<'c>>,
        publish: &Publish,
    ) -> Result<PublishReceipt, StoreError> {
        let mut conn = conn.into();
        if conn.dialect() != self.store.dialect() {
            return Err(StoreError::invalid(
                Field::Connection,
                format!("is {:?} but this store is {:?}", conn.dialect(), self.store.dialect()),
            ));
        }
        let recipients = publish.checked_recipients(self.store.config())?;
        self.publish_rows(&mut conn, publish, &recipients).await
    }

    /// The one publishing path under [`Self::publish`], [`Self::publish_in`] and room posts
    /// (`rooms.rs`): `recipients` must come from [`Publish::checked_recipients`], and the caller
    /// owns the transaction around `conn`.
    pub(crate) async fn publish_rows(
        self,
        conn: &mut DbConnection<'_>,
        publish: &Publish,
        recipients: &[Recipient],
    ) -> Result<PublishReceipt, StoreError> {
        self.publish_rows_locked(conn, publish, recipients).await.map_err(|err| self.galera_stale_read(err))
    }

    async fn publish_rows_locked(
        self,
        conn: &mut DbConnection<'_>,
        publish: &Publish,
        recipients: &[Recipient],
    ) -> Result<PublishReceipt, StoreError> {
        let now = self.store.now();
        publish.check_unexpired(now)?;
        let tenant = publish.tenant_id.as_str();
        let dialect = self.store.dialect();

        // Lock every head in canonical order; without a deduplication key, advance them too.
        let mut args = Vec::with_capacity(recipients.len() * 4);
        for recipient in recipients {
            args.extend([
                Arg::Str(tenant),
                Arg::Str(recipient.kind.as_str()),
                Arg::Str(recipient.id.as_str()),
                Arg::I64(now.get()),
            ]);
        }
        let dedup_key = publish.deduplication_key.as_ref();
        // One recipient, no key, MySQL: the upsert itself reports the new head through
        // LAST_INSERT_ID(expr), which saves the SELECT's round trip on the commonest publish.
        let reports_head = dialect == Dialect::MySql && dedup_key.is_none() && recipients.len() == 1;
        let upserted = if reports_head {
            conn.execute(queries::ADVANCE_HEAD_REPORTING_SEQ, &args).await?
        } else {
            conn.execute(&queries::upsert_heads(dialect, recipients.len(), dedup_key.is_none()), &args)
                .await?
        };
        let reported_head = match (reports_head, upserted.rows_affected) {
            // Inserted: a new head row starts at 1.
            (true, 1) => Some(1),
            // Updated: the value LAST_INSERT_ID(expr) recorded.
            (true, 2) if upserted.last_insert_id > 0 => Some(upserted.last_insert_id),
            _ => None,
        };

        // With the heads locked, a concurrent publish of the same key waits for us, so this
        // check cannot race.
        let mut existing = HashMap::new();
        if let Some(key) = dedup_key {
            let mut args = vec![Arg::Str(tenant), Arg::Str(key.as_str())];
            let predicate = recipients_predicate(recipients, &mut args);
            // A locking read sees the latest committed rows even inside a host transaction at
            // REPEATABLE READ, whose snapshot may predate a concurrent publish of this key.
            for row in conn.fetch_all(&queries::rows_of_key(dialect, &predicate), &args).await? {
                let event_id = EventId::from_slice(&row.bytes("event_id")?)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                existing.insert(recipient_from_row(&row)?, (event_id, seq(row.i64("inbox_seq")?)?));
            }
        }
        let fresh: Vec<Recipient> =
            recipients.iter().filter(|r| !existing.contains_key(*r)).cloned().collect();

        let mut heads = HashMap::new();
        if let Some(head) = reported_head {
            heads.insert(recipients[0].clone(), seq(head)?);
        } else if !fresh.is_empty() {
            if dedup_key.is_some() {
                let mut args = vec![Arg::I64(now.get()), Arg::Str(tenant)];
                let predicate = recipients_predicate(&fresh, &mut args);
                conn.execute(&queries::advance_heads(&predicate), &args).await?;
            }
            let mut args = vec![Arg::Str(tenant)];
            let predicate = recipients_predicate(&fresh, &mut args);
            for row in conn.fetch_all(&queries::heads_of(&predicate), &args).await? {
                heads.insert(recipient_from_row(&row)?, seq(row.i64("head_seq")?)?);
            }
        }

        let records = fresh
            .iter()
            .map(|recipient| {
                let inbox_seq = *heads
                    .get(recipient)
                    .ok_or_else(|| StoreError::Corrupt(format!("no inbox_head row for {recipient:?}")))?;
                Ok(self.new_record(publish, recipient, inbox_seq, now))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let keys = vec![publish.fairness_key.as_ref(); records.len()];
        let ranks = fairness::rank(conn, tenant, &records, &keys).await?;
        insert_records(conn, &records, &ranks).await?;
        let outbox_id = insert_signal(conn, tenant, &records, now).await?;

        let mut fresh_deliveries = records.iter().map(|r| Delivery {
            recipient: r.inbox.recipient.clone(),
            event_id: r.event_id,
            inbox_seq: r.inbox_seq,
            deduplicated: false,
        });
        let deliveries = recipients
            .iter()
            .map(|recipient| match existing.get(recipient) {
                Some((event_id, inbox_seq)) => Delivery {
                    recipient: recipient.clone(),
                    event_id: *event_id,
                    inbox_seq: *inbox_seq,
                    deduplicated: true,
                },
                // `records` follows `fresh`, which follows `recipients` minus the duplicates.
                None => fresh_deliveries.next().expect("one fresh record per new recipient"),
            })
            .collect();
        Ok(PublishReceipt { deliveries, outbox_id })
    }

    /// On Galera a head (or deduplication key) read on one member can be overtaken by a publish
    /// committing on another before this transaction is certified; the losing transaction
    /// sometimes hears of it as a duplicate key rather than a certification conflict. Either
    /// way it is a contention victim whose retry reads the fresh rows. On one server the head
    /// locks make a duplicate impossible, so there it stays an error.
    pub(crate) fn galera_stale_read(self, err: StoreError) -> StoreError {
        if self.store.engine().galera && crate::db::is_duplicate_key(&err) {
            return StoreError::Contention { attempts: 1 };
        }
        err
    }

    pub(crate) fn new_record(
        self,
        publish: &Publish,
        recipient: &Recipient,
        inbox_seq: InboxSeq,
        now: UnixMillis,
    ) -> EventRecord {
        EventRecord {
            inbox: RecipientKey { tenant_id: publish.tenant_id.clone(), recipient: recipient.clone() },
            inbox_seq,
            event_id: EventId::new_v7(now, random_bytes()),
            event_type: publish.event_type.clone(),
            priority: publish.priority,
            deduplication_key: publish.deduplication_key.clone(),
            lifecycle: EventLifecycle::published(
                publish.available_at.unwrap_or(now),
                publish.expires_at,
                publish.max_attempts.unwrap_or(self.store.config().max_attempts_default),
            ),
            lease_owner_session_id: None,
            correlation: publish.correlation.clone(),
            body: publish.body.clone(),
            created_at: now,
            acked_at: None,
            updated_at: now,
            terminal_at: None,
            last_error: None,
        }
    }
}

/// Inserts inbox rows, many per statement, each with its fair rank from `ranks` (by index;
/// none past its end, see [`fairness::rank`]).
pub(crate) async fn insert_records(
    conn: &mut DbConnection<'_>,
    records: &[EventRecord],
    ranks: &[Option<u64>],
) -> Result<(), StoreError> {
    for (n, chunk) in records.chunks(ROWS_PER_INSERT).enumerate() {
        let mut args = Vec::with_capacity(chunk.len() * (queries::EVENT_COLUMN_COUNT + 1));
        for (i, record) in chunk.iter().enumerate() {
            push_event_values(record, &mut args);
            let rank = ranks.get(n * ROWS_PER_INSERT + i).copied().flatten();
            args.push(Arg::OptI64(rank.map(|rank| i64::try_from(rank).unwrap_or(i64::MAX))));
        }
        conn.execute(&queries::insert_events(chunk.len()), &args).await?;
    }
    Ok(())
}

/// Writes the one `outbox_signal` row that tells every node the heads these rows reached
/// (`None` when there are none): the notifier only ever learns of what committed with it.
pub(crate) async fn insert_signal(
    conn: &mut DbConnection<'_>,
    tenant: &str,
    records: &[EventRecord],
    now: UnixMillis,
) -> Result<Option<i64>, StoreError> {
    if records.is_empty() {
        return Ok(None);
    }
    let heads: Vec<(&str, &str, u64)> = records
        .iter()
        .map(|r| (r.inbox.recipient.kind.as_str(), r.inbox.recipient.id.as_str(), r.inbox_seq.get()))
        .collect();
    let heads_json = serde_json::to_string(&heads).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let done = conn
        .execute(
            queries::INSERT_UPDATED_SIGNAL,
            &[Arg::Str(tenant), Arg::Str(&heads_json), Arg::I64(records.len() as i64), Arg::I64(now.get())],
        )
        .await?;
    Ok(Some(done.last_insert_id))
}
