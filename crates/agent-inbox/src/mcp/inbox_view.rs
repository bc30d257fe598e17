//! What one look at the inbox finds, for the `inbox://head` resource and for what its
//! subscribers (and a Claude Code channel) are told: the head, how many events are waiting
//! (claimable now) and of which types, and when an event that is open but not claimable yet
//! (a lease another process holds, a retry's delay, a delayed delivery) may become so. The
//! service sends no hint for that last kind of change, so the watcher (`head.rs`) looks again
//! at that time itself.
//!
//! A look costs one poll of the claimable events (the service filters them; one page of 100
//! holds the count and the types), and, for the times, a scan of the open events after a
//! cursor that only moves over finished ones (`inbox_client::cursor::Scan`), at most
//! [`SCAN_PAGES_MAX`] pages per look.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use inbox_api::time::format_utc;
use inbox_api::{HeadResponse, PollRequest, PollResponse, ProblemCode};
use inbox_client::cursor::Scan;
use inbox_client::{Api, ClientError};
use inbox_core::InboxSeq;
use inbox_core::limits::BatchLimit;
use serde::Serialize;
use serde_json::Value;

/// Events one page holds, and so how far the waiting count is exact.
pub const COUNTED_MAX: usize = 100;
/// Pages of open events one look reads for the times they become claimable; past them a time
/// is found by a later look (the watcher looks at least every `LOOK_EVERY_MAX`).
pub const SCAN_PAGES_MAX: usize = 10;
/// Pages of claimable-only answers followed when one comes back empty with more after it.
const CLAIMABLE_PAGES_MAX: usize = 20;

/// The waiting work as of one look.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Waiting {
    pub head_seq: u64,
    /// Events a claim could take now, at most [`COUNTED_MAX`].
    pub claimable: usize,
    /// More may wait than `claimable` says.
    pub capped: bool,
    /// How many of the counted events are of each type.
    pub types: BTreeMap<String, usize>,
    /// The delivery attempts of the counted events together: it grows when an event was
    /// claimed and came back between two looks (a lease ran out), though the count did not.
    pub attempts: u64,
}

/// The `inbox://head` resource: the service's head answer and the waiting work.
#[derive(Debug, Clone, Serialize)]
pub struct HeadView {
    #[serde(flatten)]
    pub head: HeadResponse,
    pub claimable: usize,
    pub claimable_count_capped: bool,
    /// The earliest time an open event that is not claimable now may become so; absent when
    /// none is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_claimable_at_utc: Option<String>,
}

/// Where the scan of open events starts: shared by every look of one server process, and
/// only ever moved over finished events, so an open event is never skipped.
#[derive(Debug, Default)]
pub struct ScanCursor(AtomicU64);

/// The waiting work now.
pub async fn waiting(api: &Api) -> Result<Waiting, ClientError> {
    let mut after_seq = 0;
    for _ in 0..CLAIMABLE_PAGES_MAX {
        let request = PollRequest {
            after_seq: InboxSeq(after_seq),
            limit: Some(BatchLimit::saturating(COUNTED_MAX as u32)),
            include_claimable_only: true,
            ..PollRequest::default()
        };
        let page = match api.poll(&request).await {
            Ok(page) => page,
            Err(err) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
                after_seq = oldest_available(&err).saturating_sub(1);
                continue;
            }
            Err(err) => return Err(err),
        };
        if page.events.is_empty() && page.more_available && page.next_cursor > after_seq {
            after_seq = page.next_cursor;
            continue;
        }
        return Ok(counted(&page));
    }
    Err(ClientError::Protocol(format!("no end to the claimable events after {CLAIMABLE_PAGES_MAX} pages")))
}

/// The earliest time (epoch ms) an open event not claimable now may become so, from a scan
/// of open events after `cursor` (which it moves over the finished ones it passes).
pub async fn next_change_ms(api: &Api, cursor: &ScanCursor) -> Result<Option<i64>, ClientError> {
    let mut scan = Scan::new(cursor.0.load(Ordering::Acquire));
    let held = HashSet::new();
    let mut after_seq = scan.cursor;
    let mut pages = 0;
    while pages < SCAN_PAGES_MAX {
        let request = PollRequest {
            after_seq: InboxSeq(after_seq),
            limit: Some(BatchLimit::saturating(COUNTED_MAX as u32)),
            ..PollRequest::default()
        };
        let page = match api.poll(&request).await {
            Ok(page) => page,
            Err(err) if err.code() == Some(&ProblemCode::CursorResetRequired) => {
                scan = Scan::new(oldest_available(&err).saturating_sub(1));
                after_seq = scan.cursor;
                pages += 1;
                continue;
            }
            Err(err) => return Err(err),
        };
        scan.add_page(&page.events, page.next_cursor, page.head_seq, now_ms(), &held);
        pages += 1;
        if !page.more_available || page.next_cursor <= after_seq {
            break;
        }
        after_seq = page.next_cursor;
    }
    cursor.0.fetch_max(scan.cursor, Ordering::AcqRel);
    Ok(scan.next_change_ms)
}

/// The resource's contents now.
pub async fn head_view(api: &Api, cursor: &ScanCursor) -> Result<HeadView, ClientError> {
    let head = api.head().await?;
    let waiting = waiting(api).await?;
    let next = next_change_ms(api, cursor).await?;
    Ok(HeadView {
        head: HeadResponse { head_seq: head.head_seq.max(waiting.head_seq), ..head },
        claimable: waiting.claimable,
        claimable_count_capped: waiting.capped,
        next_claimable_at_utc: next.map(format_utc),
    })
}

fn counted(page: &PollResponse) -> Waiting {
    let mut types = BTreeMap::new();
    for event in &page.events {
        *types.entry(event.event_type.as_str().to_owned()).or_insert(0) += 1;
    }
    Waiting {
        head_seq: page.head_seq,
        claimable: page.events.len(),
        capped: page.more_available || page.events.len() >= COUNTED_MAX,
        types,
        attempts: page.events.iter().map(|event| u64::from(event.delivery_attempts)).sum(),
    }
}

fn oldest_available(err: &ClientError) -> u64 {
    match err {
        ClientError::Refused { problem } => {
            problem.extensions.get("oldest_available_seq").and_then(Value::as_u64).unwrap_or(1)
        }
        _ => 1,
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
