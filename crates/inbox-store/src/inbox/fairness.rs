//! Fair claims (issue 31): within one priority, a claim of an inbox whose tenant turned fair
//! claims on interleaves the sources of its events (their fairness keys), so a burst from one
//! source cannot hold another's events back.
//!
//! The rule is start-time fair queueing with one unit per event. A publish gives each event
//! with a key a rank: one past the larger of the key's last rank in that inbox and the inbox's
//! served rank (the highest rank a claim has taken). A key with a backlog has taken ranks far
//! ahead of the served rank, so a quiet key's next event lands just past it and is claimed
//! first; two busy keys alternate; a busy key still gets one event in every round, so nothing
//! waits without bound. A fair claim reads the fair index in (priority, fair rank, seq) order
//! and stops after the rows it claims: its cost does not grow with the number of keys.
//!
//! Ranks are written by publishes, which hold the inbox's head lock, so a key's ranks follow
//! its publishes; the served rank is raised after a fair claim commits, best effort, and now
//! and then the keys with nothing past it are forgotten (`prune_keys`). Sequence
//! numbers, poll-after-cursor order, leases and fencing do not know ranks exist, and an event
//! made available again (released, expired lease) keeps its rank, so it goes back near the
//! front, as it does in sequence order.

use std::collections::{BTreeSet, HashMap};

use inbox_core::{FairnessKey, Recipient, RecipientKey, UnixMillis};

use super::claim_floor;
use super::queries::{self, recipients_predicate};
use crate::EventRecord;
use crate::StoreError;
use crate::db::{Arg, DbConnection};
use crate::inbox::record::recipient_from_row;
use crate::inbox::rows::inbox_args;

/// Keys, recipients or (inbox, key) rows per statement.
const ITEMS_PER_STATEMENT: usize = 200;
/// A fair claim whose ranks cross a multiple of this forgets the inbox's keys that have
/// nothing waiting past the served rank: the key rows stay about as many as the keys with a
/// backlog, and the pass (which reads the inbox's key rows) runs once per this many ranks.
pub(crate) const PRUNE_EVERY_RANKS: u64 = 1_024;

/// The fair rank of each of `records` (new rows of one tenant whose heads this transaction
/// holds), given each one's fairness key: `None` where it has none. Empty when no record has
/// a key, which costs no statement.
pub(crate) async fn rank(
    conn: &mut DbConnection<'_>,
    tenant: &str,
    records: &[EventRecord],
    keys: &[Option<&FairnessKey>],
) -> Result<Vec<Option<u64>>, StoreError> {
    if keys.iter().all(Option::is_none) {
        return Ok(Vec::new());
    }
    let keyed =
        || records.iter().zip(keys).filter_map(|(record, key)| Some((&record.inbox.recipient, (*key)?)));
    let recipients: Vec<Recipient> =
        keyed().map(|(recipient, _)| recipient.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let names: Vec<&str> =
        keyed().map(|(_, key)| key.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
    let dialect = conn.dialect();

    let mut served: HashMap<Recipient, u64> = HashMap::new();
    let mut last: HashMap<(Recipient, String), u64> = HashMap::new();
    for chunk in recipients.chunks(ITEMS_PER_STATEMENT) {
        let mut args = vec![Arg::Str(tenant)];
        let predicate = recipients_predicate(chunk, &mut args);
        for row in conn.fetch_all(&queries::fair_clocks_of(&predicate), &args).await? {
            served.insert(recipient_from_row(&row)?, non_negative(row.i64("served_rank")?));
        }
        for names in names.chunks(ITEMS_PER_STATEMENT) {
            let mut args = vec![Arg::Str(tenant)];
            args.extend(names.iter().map(|name| Arg::Str(name)));
            let predicate = recipients_predicate(chunk, &mut args);
            for row in conn.fetch_all(&queries::fair_keys_of(dialect, names.len(), &predicate), &args).await?
            {
                let key = (recipient_from_row(&row)?, row.string("fairness_key")?);
                last.insert(key, non_negative(row.i64("last_rank")?));
            }
        }
    }

    let mut ranks = Vec::with_capacity(records.len());
    let mut written: HashMap<(Recipient, String), u64> = HashMap::new();
    for (record, key) in records.iter().zip(keys) {
        let Some(key) = key else {
            ranks.push(None);
            continue;
        };
        let recipient = &record.inbox.recipient;
        let slot = (recipient.clone(), key.as_str().to_owned());
        let previous = written.get(&slot).or_else(|| last.get(&slot)).copied().unwrap_or(0);
        let rank = previous.max(served.get(recipient).copied().unwrap_or(0)) + 1;
        written.insert(slot, rank);
        ranks.push(Some(rank));
    }

    let written: Vec<((Recipient, String), i64)> =
        written.into_iter().map(|(slot, rank)| (slot, i64::try_from(rank).unwrap_or(i64::MAX))).collect();
    for chunk in written.chunks(ITEMS_PER_STATEMENT) {
        let mut args = Vec::with_capacity(chunk.len() * 5);
        for ((recipient, key), rank) in chunk {
            args.extend([
                Arg::Str(tenant),
                Arg::Str(recipient.kind.as_str()),
                Arg::Str(recipient.id.as_str()),
                Arg::Str(key),
                Arg::I64(*rank),
            ]);
        }
        conn.execute(&queries::write_fair_keys(dialect, chunk.len()), &args).await?;
    }
    Ok(ranks)
}

/// The fair claim of up to `limit` events of `inbox` at `now`: its text and binds.
pub(crate) fn claim_statement<'a>(
    conn: &DbConnection<'_>,
    inbox: &'a RecipientKey,
    limit: u32,
    now: UnixMillis,
) -> (String, Vec<Arg<'a>>) {
    let ranks = claim_floor::priority_ranks();
    let mut args = inbox_args(inbox);
    args.extend([Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(now.get()), Arg::I64(i64::from(limit))]);
    (queries::claim_next_fair(conn.dialect(), &ranks), args)
}

/// Raises the inbox's served rank to `rank`, the highest a fair claim just took.
pub(crate) async fn raise_served_rank(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    rank: u64,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let mut args = inbox_args(inbox);
    args.extend([Arg::I64(i64::try_from(rank).unwrap_or(i64::MAX)), Arg::I64(now.get())]);
    conn.execute(queries::RAISE_FAIR_CLOCK.text(conn.dialect()), &args).await?;
    Ok(())
}

/// Whether a claim that took ranks `lowest..=highest` should prune the inbox's keys.
pub(crate) fn worth_pruning(lowest: u64, highest: u64) -> bool {
    lowest / PRUNE_EVERY_RANKS != highest / PRUNE_EVERY_RANKS
}

/// Forgets the inbox's keys whose last rank is at or below `served`.
pub(crate) async fn prune_keys(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    served: u64,
) -> Result<u64, StoreError> {
    let mut args = inbox_args(inbox);
    args.push(Arg::I64(i64::try_from(served).unwrap_or(i64::MAX)));
    Ok(conn.execute(queries::PRUNE_FAIR_KEYS, &args).await?.rows_affected)
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
