//! Proof at start that the database engine keeps the two promises claims rest on, and (after
//! migrating) that it plans the claim statement through the claim index. Some MySQL-compatible engines accept `FOR UPDATE SKIP LOCKED` and silently
//! neither lock nor skip, which would hand one event to two holders; an engine that ignores
//! `READ COMMITTED` would hide commits from claimers. Both are checked with two connections
//! against a scratch table, so an engine that fails is refused by name before anything is served.

use crate::db::{Arg, DbConnection, Pooled};
use crate::engine::{EngineReport, Product};
use crate::inbox::{CLAIM_INDEX, ClaimPlan};
use crate::{SqlStore, StoreError, queries};

/// How many extra pooled connections to try for one on the same server as the first.
const SAME_SERVER_TRIES: usize = 8;

impl SqlStore {
    /// Proves with two connections that `FOR UPDATE SKIP LOCKED` skips a row the other holds
    /// locked, and that a transaction sees rows committed after it began (`READ COMMITTED`).
    /// An engine that fails gets [`StoreError::EngineRefused`] naming it and the property.
    pub async fn check_engine(&self) -> Result<EngineReport, StoreError> {
        let engine = self.engine().clone();
        if engine.product == Product::Sqlite {
            // One writer at a time: there is nothing to skip, and every read sees every commit.
            return Ok(EngineReport { engine, locks_checked: true });
        }
        let mut first = self.pools().writer().await?;
        first.conn().execute_raw(queries::CREATE_PROBE_TABLE).await?;
        let home = server_of(&mut first).await?;
        let mut held = Vec::new();
        let mut second = None;
        for _ in 0..SAME_SERVER_TRIES {
            let mut candidate = self.pools().writer().await?;
            if server_of(&mut candidate).await? == home {
                second = Some(candidate);
                break;
            }
            held.push(candidate);
        }
        drop(held);
        let Some(mut second) = second else {
            return Ok(EngineReport { engine, locks_checked: false });
        };
        let key = i64::from_le_bytes(crate::entropy::random_bytes::<8>()) & (i64::MAX >> 1);
        let result = probe(&mut first.conn(), &mut second.conn(), key).await;
        // Whatever happened, leave no open transaction and no probe rows behind.
        let _ = first.conn().execute_raw("ROLLBACK").await;
        let _ = second.conn().execute_raw("ROLLBACK").await;
        let _ = first.conn().execute(queries::DELETE_PROBE_ROWS, &[Arg::I64(key), Arg::I64(key + 1)]).await;
        match result? {
            None => Ok(EngineReport { engine, locks_checked: true }),
            Some(property) => Err(StoreError::EngineRefused { engine: engine.to_string(), property }),
        }
    }
}

/// What the claim-plan check found besides a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlanCheck {
    /// SQLite: its planner is told the index (`INDEXED BY`) where it matters.
    NotApplicable,
    /// The planner reads the claim index, in claim order.
    UsesClaimIndex(ClaimPlan),
    /// The planner could use the claim index but chose otherwise; a sentence for the log.
    Warning(ClaimPlan, String),
}

impl SqlStore {
    /// Asks the planner (`EXPLAIN`, nothing runs) how it would run the claim statement of an
    /// inbox that does not exist, after migrating.
    ///
    /// Refuses ([`StoreError::ClaimIndexUnusable`]) when the claim index is not among the
    /// indexes the planner can use: the schema lost it, and no statistics will bring it back,
    /// so every claim would read the inbox's whole history. Only warns when the index could be
    /// used but another plan was chosen (or rows would be sorted): that choice rests on table
    /// statistics, which differ between an empty table at start and a full one under load, and
    /// `ANALYZE TABLE agent_inbox` corrects them, so refusing to serve over it would stop
    /// nodes that claim well.
    pub async fn check_claim_plan(&self) -> Result<ClaimPlanCheck, StoreError> {
        let inbox = inbox_core::RecipientKey {
            tenant_id: inbox_core::TenantId::new("agent-inbox-engine-check").expect("a tenant id"),
            recipient: inbox_core::Recipient::agent(
                inbox_core::RecipientId::new("claim-plan").expect("a recipient id"),
            ),
        };
        let Some(plan) = self.inbox().explain_claim(&inbox, 10).await? else {
            return Ok(ClaimPlanCheck::NotApplicable);
        };
        if !plan.possible_keys.iter().any(|k| k == CLAIM_INDEX) {
            return Err(StoreError::ClaimIndexUnusable(format!(
                "the planner can use only {}",
                if plan.possible_keys.is_empty() {
                    "a full table scan".to_owned()
                } else {
                    plan.possible_keys.join(", ")
                }
            )));
        }
        if plan.key.as_deref() != Some(CLAIM_INDEX) || plan.filesort {
            let sentence = format!(
                "the planner reads the claim statement through {} ({}{}) instead of {CLAIM_INDEX}; claims will read more than they return until `ANALYZE TABLE agent_inbox` refreshes the table's statistics",
                plan.key.as_deref().unwrap_or("no index"),
                plan.access_type,
                if plan.filesort { ", sorting the rows" } else { "" }
            );
            return Ok(ClaimPlanCheck::Warning(plan, sentence));
        }
        Ok(ClaimPlanCheck::UsesClaimIndex(plan))
    }
}

/// The server a connection reached (host name and port, unique per Galera member).
async fn server_of(pooled: &mut Pooled) -> Result<String, StoreError> {
    let row = pooled
        .conn()
        .fetch_optional(queries::SERVER_OF_CONNECTION, &[])
        .await?
        .ok_or_else(|| StoreError::Corrupt("the server query returned no row".into()))?;
    row.string("server")
}

/// Runs the two checks; `Some(sentence)` names the property the engine broke.
async fn probe(
    a: &mut DbConnection<'_>,
    b: &mut DbConnection<'_>,
    key: i64,
) -> Result<Option<String>, StoreError> {
    let args = [Arg::I64(key), Arg::I64(key + 1)];
    a.execute(queries::INSERT_PROBE_ROWS, &args).await?;

    a.execute_raw("BEGIN").await?;
    let first =
        a.fetch_optional(queries::PICK_PROBE_ROW, &args).await?.map(|r| r.i64("probe_id")).transpose()?;
    if first != Some(key) {
        return Ok(Some(format!(
            "FOR UPDATE SKIP LOCKED returned {first:?} instead of the first of two unlocked rows"
        )));
    }
    b.execute_raw("BEGIN").await?;
    let skipped = match b.fetch_optional(queries::PICK_PROBE_ROW, &args).await {
        Ok(row) => row.map(|r| r.i64("probe_id")).transpose()?,
        Err(StoreError::Contention { .. }) => {
            return Ok(Some("FOR UPDATE SKIP LOCKED waited for a row another connection holds locked instead of skipping it".into()));
        }
        Err(other) => return Err(other),
    };
    if skipped != Some(key + 1) {
        return Ok(Some(format!(
            "FOR UPDATE SKIP LOCKED returned {} while another connection held it locked (it must skip to the next row)",
            match skipped {
                Some(id) if id == key => "the locked row".to_owned(),
                other => format!("{other:?}"),
            }
        )));
    }
    b.execute_raw("ROLLBACK").await?;

    // READ COMMITTED: a row committed by another connection after this transaction's first
    // read is visible to its next read.
    let before = a
        .fetch_optional(queries::READ_PROBE_VALUE, &[Arg::I64(key + 1)])
        .await?
        .map(|r| r.i64("probe_value"))
        .transpose()?;
    b.execute(queries::SET_PROBE_VALUE, &[Arg::I64(key + 1)]).await?;
    let after = a
        .fetch_optional(queries::READ_PROBE_VALUE, &[Arg::I64(key + 1)])
        .await?
        .map(|r| r.i64("probe_value"))
        .transpose()?;
    a.execute_raw("ROLLBACK").await?;
    if before != Some(0) || after != Some(1) {
        return Ok(Some(
            "a transaction did not see a row committed by another connection after it began (the session is not at READ COMMITTED)"
                .into(),
        ));
    }
    Ok(None)
}
