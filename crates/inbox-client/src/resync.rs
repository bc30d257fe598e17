//! The whole resync snapshot after `cursor_reset_required`. The service sends open events in
//! pages (`GET /v1/inbox/resync?after_seq=&limit=`); the developer's resync callback gets them
//! all at once, with the first page's head and resume point, so it never rebuilds from a part.

use inbox_api::{EventEnvelope, ResyncResponse};

use crate::api::Api;
use crate::error::ClientError;

/// Reads every page. Events past the first page's `resume_after_seq` are left out: they were
/// published during the resync, and the scans that follow it find them as usual.
pub(crate) async fn snapshot(api: &Api, page_size: u32) -> Result<ResyncResponse, ClientError> {
    let mut snapshot = api.resync_page(0, page_size).await?;
    let first = std::mem::take(&mut snapshot.open_events);
    let more = snapshot.more_available;
    add_page(&mut snapshot, first, more);
    while let Some(after_seq) = next_page_after(&snapshot) {
        let page = api.resync_page(after_seq, page_size).await?;
        add_page(&mut snapshot, page.open_events, page.more_available);
    }
    Ok(snapshot)
}

/// Where the next page starts, or `None` when the snapshot is whole.
fn next_page_after(snapshot: &ResyncResponse) -> Option<u64> {
    snapshot.more_available.then(|| snapshot.open_events.last().map(|e| e.inbox_seq)).flatten()
}

/// Appends one page. The snapshot is whole when the service has no more, the page is empty
/// (so paging always moves forward), or the page reached past the resume point.
fn add_page(snapshot: &mut ResyncResponse, events: Vec<EventEnvelope>, more: bool) {
    let resume = snapshot.resume_after_seq;
    let past_resume = events.iter().any(|e| e.inbox_seq > resume);
    snapshot.more_available = more && !events.is_empty() && !past_resume;
    snapshot.open_events.extend(events.into_iter().filter(|e| e.inbox_seq <= resume));
}

#[cfg(test)]
mod tests {
    use inbox_api::Correlation;
    use inbox_core::{EventId, EventType, RecipientId, RecipientKind, TenantId};

    use super::*;

    fn event(inbox_seq: u64) -> EventEnvelope {
        EventEnvelope {
            event_id: EventId::from_bytes(u128::from(inbox_seq).to_be_bytes()),
            tenant_id: TenantId::new("t1").unwrap(),
            recipient_kind: RecipientKind::agent(),
            recipient_id: RecipientId::new("alpha").unwrap(),
            inbox_seq,
            event_type: EventType::new("task").unwrap(),
            priority: "normal".into(),
            availability_at_utc: String::new(),
            expires_at_utc: None,
            deduplication_key: None,
            ack_state: "available".into(),
            delivery_attempts: 0,
            visibility_lease_until_utc: None,
            next_retry_at_utc: None,
            dead_letter_state: "none".into(),
            correlation: Correlation::default(),
            payload: None,
            payload_ref: None,
            created_at_utc: String::new(),
        }
    }

    fn head_page(resume: u64) -> ResyncResponse {
        ResyncResponse {
            head_seq: resume,
            oldest_available_seq: 1,
            resume_after_seq: resume,
            open_events: Vec::new(),
            more_available: true,
        }
    }

    fn seqs(snapshot: &ResyncResponse) -> Vec<u64> {
        snapshot.open_events.iter().map(|e| e.inbox_seq).collect()
    }

    #[test]
    fn pages_are_joined_until_the_service_has_no_more() {
        let mut snapshot = head_page(9);
        add_page(&mut snapshot, vec![event(2), event(4)], true);
        assert_eq!(next_page_after(&snapshot), Some(4));
        add_page(&mut snapshot, vec![event(5), event(9)], false);
        assert_eq!((seqs(&snapshot), next_page_after(&snapshot)), (vec![2, 4, 5, 9], None));
        assert!(!snapshot.more_available);
    }

    #[test]
    fn events_past_the_resume_point_end_the_snapshot_and_are_left_to_the_scan() {
        let mut snapshot = head_page(5);
        add_page(&mut snapshot, vec![event(4), event(6)], true);
        assert_eq!((seqs(&snapshot), next_page_after(&snapshot)), (vec![4], None));
    }

    #[test]
    fn an_empty_page_ends_paging_even_if_the_service_says_more() {
        let mut snapshot = head_page(5);
        add_page(&mut snapshot, vec![event(1)], true);
        add_page(&mut snapshot, Vec::new(), true);
        assert_eq!((seqs(&snapshot), next_page_after(&snapshot)), (vec![1], None));
    }
}
