//! What operators read about an inbox: its events by display state, one event with its
//! history (from the live table or the archive), and a tenant's activity per minute. Reads
//! only, from the reader pool; nothing here locks.

use inbox_core::{AckState, EventId, RecipientKey, TenantId, UnixMillis};

use super::{Inbox, queries};
use crate::Field;
use crate::db::Arg;
use crate::inbox::history::parse_history;
use crate::inbox::record::{event_from_row, event_with_history_from_row, seq_arg};
use crate::inbox::rows::inbox_args;
use crate::{EventDetail, EventRecord, EventState, EventsQuery, MinuteActivity, StoreError};

/// The longest window [`Inbox::activity`] reports on: one day.
pub const ACTIVITY_WINDOW_MS_MAX: u64 = 24 * 3_600_000;

impl Inbox<'_> {
    /// Events of one inbox between `after_seq` and `before_seq`, optionally in one display
    /// state, ordered by `inbox_seq` (oldest or newest first), at most `limit`. Only the live
    /// table: archived events are found one by one with [`Inbox::event_detail`].
    pub async fn events(self, query: &EventsQuery) -> Result<Vec<EventRecord>, StoreError> {
        self.store.batch_len(Field::Limit, query.limit as usize)?;
        let now = self.store.now();
        let mut args = inbox_args(&query.inbox);
        args.push(seq_arg(query.after_seq.unwrap_or(inbox_core::InboxSeq(0))));
        args.push(query.before_seq.map_or(Arg::I64(i64::MAX), seq_arg));
        let page = match query.state {
            None => queries::EVENTS_PAGE,
            Some(EventState::Available) => {
                args.push(Arg::I64(now.get()));
                queries::EVENTS_PAGE_AVAILABLE_NOW
            }
            Some(EventState::RetryScheduled) => {
                args.push(Arg::I64(now.get()));
                queries::EVENTS_PAGE_RETRY_SCHEDULED
            }
            Some(filter) => {
                args.push(Arg::Str(stored_state(filter).as_str()));
                queries::EVENTS_PAGE_IN_STATE
            }
        };
        let sql = if query.newest_first { page.newest_first } else { page.oldest_first };
        args.push(Arg::I64(i64::from(query.limit)));
        let mut pooled = self.store.pools().reader().await?;
        pooled.conn().fetch_all(sql, &args).await?.iter().map(event_from_row).collect()
    }

    /// One event with its history: from `agent_inbox`, else from `agent_inbox_archive`;
    /// `None` when neither holds it for this inbox.
    pub async fn event_detail(
        self,
        inbox: &RecipientKey,
        event_id: EventId,
    ) -> Result<Option<EventDetail>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let mut conn = pooled.conn();
        let mut live = inbox_args(inbox);
        live.push(Arg::Bytes(event_id.as_bytes()));
        if let Some(row) = conn.fetch_optional(queries::LIVE_EVENT_DETAIL, &live).await? {
            let (record, history) = event_with_history_from_row(&row)?;
            return Ok(Some(EventDetail {
                record,
                history: parse_history(history.as_deref()),
                archived: false,
            }));
        }
        let mut archived = vec![Arg::Bytes(event_id.as_bytes())];
        archived.extend(inbox_args(inbox));
        let Some(row) = conn.fetch_optional(queries::ARCHIVED_EVENT_DETAIL, &archived).await? else {
            return Ok(None);
        };
        let (record, history) = event_with_history_from_row(&row)?;
        Ok(Some(EventDetail { record, history: parse_history(history.as_deref()), archived: true }))
    }

    /// Events of a tenant published and acknowledged per minute since `since` (at most
    /// [`ACTIVITY_WINDOW_MS_MAX`] ago), live and archived, oldest minute first. A minute with
    /// neither is left out; minutes start at `t - t % 60000`.
    pub async fn activity(
        self,
        tenant_id: &TenantId,
        since: UnixMillis,
    ) -> Result<Vec<MinuteActivity>, StoreError> {
        let now = self.store.now();
        if since < now.minus_ms(ACTIVITY_WINDOW_MS_MAX) {
            return Err(StoreError::invalid(
                Field::ActivityWindow,
                format!(
                    "reaches back more than {} hours; ask for a shorter window",
                    ACTIVITY_WINDOW_MS_MAX / 3_600_000
                ),
            ));
        }
        // Ids of a clock running slightly behind the one that stamped created_at still count.
        let first_id = inbox_core::EventId::new_v7(since.minus_ms(60_000), [0; 10]);
        let (tenant, since_ms) = (Arg::Str(tenant_id.as_str()), Arg::I64(since.get()));
        let args = [
            tenant,
            Arg::Bytes(first_id.as_bytes()),
            since_ms,
            tenant,
            since_ms,
            since_ms,
            since_ms,
            tenant,
            since_ms,
            since_ms,
            tenant,
            since_ms,
        ];
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled.conn().fetch_all(queries::ACTIVITY_PER_MINUTE, &args).await?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        rows.iter()
            .map(|row| {
                Ok(MinuteActivity {
                    minute_start: UnixMillis(row.i64("minute_start")?),
                    published: count(row.i64("published")?),
                    acked: count(row.i64("acked")?),
                })
            })
            .collect()
    }
}

/// The stored state a filter other than `available`/`retry_scheduled` names.
fn stored_state(filter: EventState) -> AckState {
    match filter {
        EventState::Available | EventState::RetryScheduled => AckState::Available,
        EventState::Claimed => AckState::Claimed,
        EventState::Acked => AckState::Acked,
        EventState::DeadLetter => AckState::DeadLetter,
        EventState::Quarantined => AckState::Quarantined,
        EventState::Expired => AckState::Expired,
    }
}
