//! What the database does with the claim statement: the plan MySQL/MariaDB chooses for it
//! (`EXPLAIN FORMAT=JSON`) and, on MariaDB, what running it cost (`ANALYZE FORMAT=JSON`: the
//! index entries it read and the pages it touched, dead entries included).
//!
//! The engine check asks for the plan at start (a claim that cannot use the claim index reads
//! every row of the inbox); the purge-lag test and `inbox-bench readview` measure the cost
//! while an old read view holds back purge. The statement analysed is the one
//! [`Inbox::claim_next`] runs, built by the same code, inside a transaction that is rolled
//! back, so nothing is claimed.

use inbox_core::{RecipientKey, UnixMillis};
use serde_json::Value;

use super::Inbox;
use crate::StoreError;
use crate::db::DbConnection;
use crate::dialect::Dialect;
use crate::engine::Product;

/// The plan and, where measured, the cost of one claim statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPlan {
    /// The index the plan reads `agent_inbox` through (`None`: a full table scan).
    pub key: Option<String>,
    /// The indexes the planner considered.
    pub possible_keys: Vec<String>,
    /// How the index is read (`range`, `ref`, `ALL`, ...).
    pub access_type: String,
    /// Whether the rows are sorted after reading (the index does not give claim order).
    pub filesort: bool,
    /// The planner's estimate of the index entries to read; dead (delete-marked) entries
    /// count, which is how purge lag shows in a plan.
    pub rows_estimate: u64,
    /// Rows the index handed to the server (MariaDB's `r_rows`), when the statement ran.
    pub rows_read: Option<u64>,
    /// Pages the statement touched (MariaDB's `r_engine_stats.pages_accessed`), when it ran:
    /// the work dead entries cost, which `rows_read` does not show.
    pub pages_accessed: Option<u64>,
}

/// The index every claim must be able to use.
pub const CLAIM_INDEX: &str = "ix_agent_inbox_claim";

impl Inbox<'_> {
    /// Runs the claim statement of `inbox` for `limit` events under MariaDB's `ANALYZE
    /// FORMAT=JSON` (MySQL: `EXPLAIN FORMAT=JSON`, without costs) in a transaction that is
    /// rolled back. `None` on SQLite, whose planner reports neither.
    pub async fn analyze_claim(
        self,
        inbox: &RecipientKey,
        limit: u32,
    ) -> Result<Option<ClaimPlan>, StoreError> {
        if self.store.dialect() != Dialect::MySql {
            return Ok(None);
        }
        let run = self.store.engine().product == Product::MariaDb;
        let mut tx = self.store.pools().begin().await?;
        let plan = claim_plan(&mut tx.conn(), inbox, limit, self.store.now(), run).await;
        tx.rollback().await?;
        plan.map(Some)
    }

    /// The plan MySQL/MariaDB would choose for the claim statement of `inbox` (`EXPLAIN
    /// FORMAT=JSON`; nothing runs). `None` on SQLite.
    pub async fn explain_claim(
        self,
        inbox: &RecipientKey,
        limit: u32,
    ) -> Result<Option<ClaimPlan>, StoreError> {
        if self.store.dialect() != Dialect::MySql {
            return Ok(None);
        }
        let mut pooled = self.store.pools().reader().await?;
        claim_plan(&mut pooled.conn(), inbox, limit, self.store.now(), false).await.map(Some)
    }
}

/// The plan of the claim statement for `inbox` (`run`: execute it under ANALYZE).
pub(crate) async fn claim_plan(
    conn: &mut DbConnection<'_>,
    inbox: &RecipientKey,
    limit: u32,
    now: UnixMillis,
    run: bool,
) -> Result<ClaimPlan, StoreError> {
    let statement = super::claim_floor::claim_statement(conn, inbox, limit, now).await?;
    let prefix = if run { "ANALYZE FORMAT=JSON " } else { "EXPLAIN FORMAT=JSON " };
    let row = conn
        .fetch_optional(&format!("{prefix}{}", statement.sql), &statement.args)
        .await?
        .ok_or_else(|| StoreError::Corrupt("EXPLAIN returned no row".into()))?;
    let text = row.string(if run { "ANALYZE" } else { "EXPLAIN" })?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|err| StoreError::Corrupt(format!("EXPLAIN FORMAT=JSON: {err}")))?;
    Ok(plan_of(&json))
}

/// Reads the `agent_inbox` access of a JSON plan (MariaDB's and MySQL's layouts both).
fn plan_of(json: &Value) -> ClaimPlan {
    let table = find_table(json).unwrap_or(&Value::Null);
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let number =
        |v: &Value| v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)).or_else(|| v.as_str()?.parse().ok());
    ClaimPlan {
        key: table.get("key").and_then(Value::as_str).map(str::to_owned),
        possible_keys: strings(table.get("possible_keys").unwrap_or(&Value::Null)),
        access_type: table.get("access_type").and_then(Value::as_str).unwrap_or("").to_owned(),
        filesort: json.to_string().contains("filesort"),
        rows_estimate: table
            .get("rows")
            .or_else(|| table.get("rows_examined_per_scan"))
            .and_then(number)
            .unwrap_or(0),
        rows_read: table.get("r_rows").and_then(number),
        pages_accessed: table.get("r_engine_stats").and_then(|s| s.get("pages_accessed")).and_then(number),
    }
}

/// The first `table` object of a plan that reads `agent_inbox`.
fn find_table(json: &Value) -> Option<&Value> {
    match json {
        Value::Object(map) => {
            if let Some(table) = map.get("table")
                && table.get("table_name").and_then(Value::as_str) == Some("agent_inbox")
            {
                return Some(table);
            }
            map.values().find_map(find_table)
        }
        Value::Array(items) => items.iter().find_map(find_table),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mariadb_analysis_reads_key_rows_and_pages() {
        let json: Value = serde_json::from_str(
            r#"{"query_block":{"select_id":1,"nested_loop":[{"table":{"table_name":"agent_inbox",
            "access_type":"range","possible_keys":["PRIMARY","ix_agent_inbox_claim"],
            "key":"ix_agent_inbox_claim","rows":384,"r_rows":10,
            "r_engine_stats":{"pages_accessed":72}}}]}}"#,
        )
        .unwrap();
        let plan = plan_of(&json);
        assert_eq!(plan.key.as_deref(), Some("ix_agent_inbox_claim"));
        assert_eq!(plan.access_type, "range");
        assert_eq!((plan.rows_estimate, plan.rows_read, plan.pages_accessed), (384, Some(10), Some(72)));
        assert!(!plan.filesort);
    }

    #[test]
    fn a_mysql_plan_with_a_sort_is_seen() {
        let json: Value = serde_json::from_str(
            r#"{"query_block":{"ordering_operation":{"using_filesort":true,"table":{"table_name":"agent_inbox",
            "access_type":"ALL","rows_examined_per_scan":"1200"}}}}"#,
        )
        .unwrap();
        let plan = plan_of(&json);
        assert_eq!(plan.key, None);
        assert_eq!(plan.rows_estimate, 1200);
        assert!(plan.filesort);
    }
}
