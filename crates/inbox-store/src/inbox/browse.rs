//! What operators read about an inbox: its events by display state, one event with its
//! history (from the live table or the archive), and a tenant's activity per minute.

use inbox_core::{EventId, RecipientKey, TenantId, UnixMillis};

use super::Inbox;
use crate::{EventDetail, EventRecord, EventsQuery, MinuteActivity, StoreError};

impl Inbox<'_> {
    /// Events of one inbox, optionally in one display state, ordered by `inbox_seq`, after
    /// `after_seq`, at most `limit`.
    pub async fn events(self, query: &EventsQuery) -> Result<Vec<EventRecord>, StoreError> {
        let _ = query;
        Err(StoreError::Corrupt("Inbox::events is not implemented yet".into()))
    }

    /// One event with its history: from `agent_inbox`, else from `agent_inbox_archive`.
    pub async fn event_detail(
        self,
        inbox: &RecipientKey,
        event_id: EventId,
    ) -> Result<Option<EventDetail>, StoreError> {
        let _ = (inbox, event_id);
        Err(StoreError::Corrupt("Inbox::event_detail is not implemented yet".into()))
    }

    /// Events of a tenant published and acknowledged per minute since `since`, live and
    /// archived, oldest minute first; minutes with neither are left out.
    pub async fn activity(
        self,
        tenant_id: &TenantId,
        since: UnixMillis,
    ) -> Result<Vec<MinuteActivity>, StoreError> {
        let _ = (tenant_id, since);
        Err(StoreError::Corrupt("Inbox::activity is not implemented yet".into()))
    }
}
