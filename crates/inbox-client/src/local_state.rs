//! The agent's own durable memory, in a local SQLite file: the cursor it polls after, and a
//! bounded cache of event ids it already processed (with the result), so a completed event
//! delivered again after a crash or a lost acknowledgement is acknowledged without running the
//! handler a second time (a failed one runs again: see `work`). One file may serve several
//! identities; rows are keyed by inbox.

use std::path::{Path, PathBuf};
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use inbox_core::AckResult;
use sqlx::Row as _;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::ClientError;

/// Default number of processed event ids remembered per inbox.
pub const PROCESSED_CAPACITY_DEFAULT: u32 = 10_000;
/// Inserts between two prunings of the processed cache.
const PRUNE_EVERY: u32 = 64;

/// How a processed event ended, as it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processed {
    /// Acknowledged as `completed`.
    Completed,
    /// Acknowledged as `failed`: the service dead-letters it.
    Failed,
}

impl Processed {
    pub fn as_str(self) -> &'static str {
        self.ack_result().as_str()
    }

    /// The acknowledgement's `result`.
    pub fn ack_result(self) -> AckResult {
        match self {
            Processed::Completed => AckResult::Completed,
            Processed::Failed => AckResult::Failed,
        }
    }
}

/// The local state file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LocalState {
    pool: SqlitePool,
    path: PathBuf,
    capacity: u32,
    inserts: Arc<AtomicU32>,
}

impl LocalState {
    /// Opens (creating) the state file at `path`, remembering up to `capacity` processed ids
    /// per inbox.
    pub async fn open(path: &Path, capacity: u32) -> Result<LocalState, ClientError> {
        let fail = |source| ClientError::LocalState { path: path.to_owned(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::secret_store::create_private_dir(dir).map_err(|err| fail(sqlx::Error::Io(err)))?;
        }
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(fail)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode: a committed record survives the process crashing (what the
            // dedup cache is for) without an fsync per event; a power cut may lose the last
            // few, and then an event runs twice, which at-least-once delivery allows anyway.
            .synchronous(SqliteSynchronous::Normal)
            // Two agents of one identity may share the file.
            .busy_timeout(Duration::from_secs(10));
        // No idle timeout or lifetime, so sqlx spawns no maintenance task for the pool: in sqlx
        // 0.8 that task can read a momentarily wrapped idle count and loop for ever without
        // yielding, and the process never exits (see inbox-store's `db.rs`, issue 40).
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(fail)?;
        for statement in [
            "CREATE TABLE IF NOT EXISTS inbox_cursor (
                inbox TEXT PRIMARY KEY,
                after_seq INTEGER NOT NULL,
                updated_at_ms INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS processed_event (
                inbox TEXT NOT NULL,
                event_id TEXT NOT NULL,
                inbox_seq INTEGER NOT NULL,
                result TEXT NOT NULL,
                processed_at_ms INTEGER NOT NULL,
                PRIMARY KEY (inbox, event_id))",
            "CREATE INDEX IF NOT EXISTS processed_event_age ON processed_event (inbox, processed_at_ms)",
        ] {
            sqlx::query(statement).execute(&pool).await.map_err(fail)?;
        }
        Ok(LocalState { pool, path: path.to_owned(), capacity: capacity.max(1), inserts: Arc::default() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cursor to poll after (0 when none was stored).
    pub async fn cursor(&self, inbox: &str) -> Result<u64, ClientError> {
        let row = sqlx::query("SELECT after_seq FROM inbox_cursor WHERE inbox = ?")
            .bind(inbox)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(row.map_or(0, |r| r.get::<i64, _>(0).max(0) as u64))
    }

    /// Moves the cursor forward to `after_seq`; never back (another process sharing the file
    /// may be ahead).
    pub async fn advance_cursor(&self, inbox: &str, after_seq: u64) -> Result<(), ClientError> {
        sqlx::query(
            "INSERT INTO inbox_cursor (inbox, after_seq, updated_at_ms) VALUES (?, ?, ?)
             ON CONFLICT (inbox) DO UPDATE SET after_seq = MAX(after_seq, excluded.after_seq),
                 updated_at_ms = excluded.updated_at_ms",
        )
        .bind(inbox)
        .bind(after_seq as i64)
        .bind(inbox_api::time::now_ms())
        .execute(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        Ok(())
    }

    /// Sets the cursor to `after_seq` exactly: after a resync, when the service says where to
    /// continue.
    pub async fn reset_cursor(&self, inbox: &str, after_seq: u64) -> Result<(), ClientError> {
        sqlx::query(
            "INSERT INTO inbox_cursor (inbox, after_seq, updated_at_ms) VALUES (?, ?, ?)
             ON CONFLICT (inbox) DO UPDATE SET after_seq = excluded.after_seq,
                 updated_at_ms = excluded.updated_at_ms",
        )
        .bind(inbox)
        .bind(after_seq as i64)
        .bind(inbox_api::time::now_ms())
        .execute(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        Ok(())
    }

    /// How `event_id` ended when this agent processed it before.
    pub async fn processed(&self, inbox: &str, event_id: &str) -> Result<Option<Processed>, ClientError> {
        let row = sqlx::query("SELECT result FROM processed_event WHERE inbox = ? AND event_id = ?")
            .bind(inbox)
            .bind(event_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(row.map(|r| match r.get::<String, _>(0).as_str() {
            "failed" => Processed::Failed,
            _ => Processed::Completed,
        }))
    }

    /// Records that the handler finished `event_id`, before it is acknowledged: a crash
    /// between the two then costs an acknowledgement, not a second run.
    pub async fn record_processed(
        &self,
        inbox: &str,
        event_id: &str,
        inbox_seq: u64,
        result: Processed,
    ) -> Result<(), ClientError> {
        sqlx::query(
            "INSERT INTO processed_event (inbox, event_id, inbox_seq, result, processed_at_ms)
             VALUES (?, ?, ?, ?, ?)
             ON CONFLICT (inbox, event_id) DO UPDATE SET result = excluded.result",
        )
        .bind(inbox)
        .bind(event_id)
        .bind(inbox_seq as i64)
        .bind(result.as_str())
        .bind(inbox_api::time::now_ms())
        .execute(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        if self.inserts.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == 0 {
            self.prune(inbox).await?;
        }
        Ok(())
    }

    /// Forgets all but the newest `capacity` processed ids of `inbox`.
    pub async fn prune(&self, inbox: &str) -> Result<u64, ClientError> {
        let done = sqlx::query(
            "DELETE FROM processed_event WHERE inbox = ? AND rowid IN (
                SELECT rowid FROM processed_event WHERE inbox = ?
                ORDER BY processed_at_ms DESC, rowid DESC LIMIT -1 OFFSET ?)",
        )
        .bind(inbox)
        .bind(inbox)
        .bind(i64::from(self.capacity))
        .execute(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        Ok(done.rows_affected())
    }

    pub async fn processed_count(&self, inbox: &str) -> Result<u64, ClientError> {
        let row = sqlx::query("SELECT COUNT(*) FROM processed_event WHERE inbox = ?")
            .bind(inbox)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(row.get::<i64, _>(0).max(0) as u64)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    fn fail(&self, source: sqlx::Error) -> ClientError {
        ClientError::LocalState { path: self.path.clone(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("inbox-client-state-{name}-{}.db", std::process::id()));
        remove(&path);
        path
    }

    fn remove(path: &Path) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[tokio::test]
    async fn the_cursor_only_moves_forward_unless_reset() {
        let path = temp_path("cursor");
        let state = LocalState::open(&path, 10).await.unwrap();
        assert_eq!(state.cursor("t/a").await.unwrap(), 0);
        state.advance_cursor("t/a", 7).await.unwrap();
        state.advance_cursor("t/a", 3).await.unwrap();
        assert_eq!(state.cursor("t/a").await.unwrap(), 7);
        assert_eq!(state.cursor("t/b").await.unwrap(), 0, "keyed by inbox");
        state.reset_cursor("t/a", 2).await.unwrap();
        assert_eq!(state.cursor("t/a").await.unwrap(), 2);
        state.close().await;
        remove(&path);
    }

    /// The state file's pool runs no task that can hold a thread for ever: the state is opened
    /// on a runtime whose paused clock would let a pool maintenance task sweep on every turn,
    /// used as `listen` uses it, one operation at a time from the main thread of another
    /// runtime, and its own runtime must keep turning and finish once told to.
    #[test]
    fn the_state_file_leaves_no_pool_task_running() {
        use std::sync::atomic::AtomicU64;
        use std::time::Instant;

        let path = temp_path("pool-task");
        let (state_sender, state_receiver) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (exited, has_exited) = std::sync::mpsc::channel();
        let beats = Arc::new(AtomicU64::new(0));
        let (opening, beating) = (path.clone(), beats.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let state = LocalState::open(&opening, 10).await.unwrap();
                tokio::time::pause();
                state_sender.send(state).unwrap();
                // Counts the runtime's turns, sleeping longer than any sqlx pool period so the
                // paused clock jumps to the pool's wake-ups first.
                let heartbeat = async {
                    loop {
                        tokio::time::sleep(Duration::from_secs(3_600)).await;
                        beating.fetch_add(1, Ordering::Relaxed);
                    }
                };
                tokio::select! {
                    _ = stopped => {}
                    () = heartbeat => {}
                }
            });
            drop(runtime);
            let _ = exited.send(());
        });
        let state = state_receiver.recv().unwrap();
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (n_operations, used_for, failure) = runtime.block_on(async {
            let started = Instant::now();
            let (mut n_operations, mut failure) = (0u64, None);
            let (mut last_beats, mut last_beat_at) = (0, Instant::now());
            while started.elapsed() < Duration::from_secs(2) && failure.is_none() {
                let now_beats = beats.load(Ordering::Relaxed);
                if now_beats != last_beats {
                    (last_beats, last_beat_at) = (now_beats, Instant::now());
                } else if last_beat_at.elapsed() > Duration::from_millis(500) {
                    break; // the state's runtime stopped turning
                }
                let step = tokio::time::timeout(Duration::from_secs(5), async {
                    state.advance_cursor("t/a", n_operations + 1).await?;
                    state.cursor("t/a").await
                });
                match step.await {
                    Ok(Ok(_)) => n_operations += 2,
                    Ok(Err(err)) => failure = Some(err.to_string()),
                    Err(_) => failure = Some("an operation took more than 5 s".to_owned()),
                }
            }
            let used_for = started.elapsed();
            let _ = tokio::time::timeout(Duration::from_secs(5), state.close()).await;
            (n_operations, used_for, failure)
        });
        drop(runtime);
        let _ = stop.send(());
        let finished = has_exited.recv_timeout(Duration::from_secs(10)).is_ok();
        remove(&path);
        assert!(
            finished && failure.is_none(),
            "after {n_operations} operations in {used_for:?} (failure: {failure:?}), the state's runtime \
             {} within 10 s of being told to stop: a pool task never yields",
            if finished { "finished" } else { "did not finish" }
        );
    }

    #[tokio::test]
    async fn processed_ids_survive_reopening_and_stay_bounded() {
        let path = temp_path("processed");
        let state = LocalState::open(&path, 3).await.unwrap();
        state.record_processed("t/a", "e1", 1, Processed::Completed).await.unwrap();
        state.record_processed("t/a", "e2", 2, Processed::Failed).await.unwrap();
        state.close().await;
        let state = LocalState::open(&path, 3).await.unwrap();
        assert_eq!(state.processed("t/a", "e1").await.unwrap(), Some(Processed::Completed));
        assert_eq!(state.processed("t/a", "e2").await.unwrap(), Some(Processed::Failed));
        assert_eq!(state.processed("t/b", "e1").await.unwrap(), None);
        for n in 3..=6 {
            state.record_processed("t/a", &format!("e{n}"), n, Processed::Completed).await.unwrap();
        }
        state.prune("t/a").await.unwrap();
        assert_eq!(state.processed_count("t/a").await.unwrap(), 3);
        assert_eq!(state.processed("t/a", "e1").await.unwrap(), None, "the oldest are forgotten");
        assert_eq!(state.processed("t/a", "e6").await.unwrap(), Some(Processed::Completed));
        state.close().await;
        remove(&path);
    }
}
