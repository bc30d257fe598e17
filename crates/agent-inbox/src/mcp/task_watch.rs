//! The look-out of one server process for its live `inbox_wait` tasks, so that each finishes
//! the moment it should (work claimable, or its end passing) and not when a client next asks:
//! a task's outcome is then fixed, and a claim right after it cannot take it back. Every task
//! of a process waits on the same inbox, so one long poll serves them all, whatever their
//! number; it runs only while a task is live.
//!
//! A task made by an earlier server process has no look-out until a `tasks/get` or
//! `tasks/cancel` names it here (`server.rs` adopts it then); one whose end passed while no
//! process watched it is judged by that first look.
//!
//! Every task that finishes here, by the look-out, a look or a cancellation, is announced on
//! [`TaskWatch::changes`], which is what the tasks extension's pushed status notifications
//! (`notifications/tasks`) are sent from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inbox_client::schedule::Backoff;
use inbox_client::{Api, wait_for_work};
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;

use super::calls::{WAIT_BACKOFF, wait_answer};
use super::outcome::from_error;
use super::task_store::{Outcome, PLACES_MAX};
use super::tasks::{Tasks, WaitTask};

/// Finished tasks announced before a slow receiver lags.
const FINISHED_QUEUED: usize = 256;
/// The pause after the service refused the look or an outcome could not be kept.
const AGAIN: Backoff = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(15) };

/// Owns the look-out task; dropping it stops the look-out.
#[derive(Debug)]
pub struct TaskWatch {
    inner: Arc<Inner>,
    looking: JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    api: Api,
    tasks: Arc<Tasks>,
    live: Mutex<HashMap<String, WaitTask>>,
    /// A task came (its end may be nearer than the one the look waits for).
    changed: Notify,
    /// The ids of tasks that finished, as they finish.
    finished: broadcast::Sender<String>,
}

impl TaskWatch {
    /// Starts the look-out (idle until a task is watched). Needs a Tokio runtime.
    pub fn start(api: Api, tasks: Arc<Tasks>) -> TaskWatch {
        let (finished, _) = broadcast::channel(FINISHED_QUEUED);
        let inner = Arc::new(Inner { api, tasks, live: Mutex::default(), changed: Notify::new(), finished });
        TaskWatch { looking: tokio::spawn(look_out(inner.clone())), inner }
    }

    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// The tasks, for a task of its own that outlives this borrow.
    pub fn shared_tasks(&self) -> Arc<Tasks> {
        self.inner.tasks.clone()
    }

    /// Watches a task until it finishes; `false` when this process watches as many as a home
    /// keeps (the task is then judged at each `tasks/get`).
    pub fn watch(&self, task_id: &str, task: WaitTask) -> bool {
        let mut live = self.inner.live.lock().expect("live tasks lock");
        if live.len() >= PLACES_MAX && !live.contains_key(task_id) {
            return false;
        }
        live.insert(task_id.to_owned(), task);
        drop(live);
        self.inner.changed.notify_one();
        true
    }

    pub fn is_watching(&self, task_id: &str) -> bool {
        self.inner.live.lock().expect("live tasks lock").contains_key(task_id)
    }

    /// Stops watching a task that finished otherwise (cancelled, or judged by a look), and
    /// announces it.
    pub fn forget(&self, task_id: &str) {
        self.inner.live.lock().expect("live tasks lock").remove(task_id);
        self.announce(task_id);
    }

    /// Says that a task finished. A receiver that lags has missed some: it reads the states
    /// of all the tasks it follows again.
    pub fn announce(&self, task_id: &str) {
        let _ = self.inner.finished.send(task_id.to_owned());
    }

    /// The ids of tasks as they finish here.
    pub fn changes(&self) -> broadcast::Receiver<String> {
        self.inner.finished.subscribe()
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        self.looking.abort();
    }
}

/// Waits for work while tasks are live, finishing them: all of them when work is claimable,
/// each at its end otherwise (with the service's refusal, if it refused the look).
async fn look_out(inner: Arc<Inner>) {
    let mut setbacks = 0;
    loop {
        let changed = inner.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let nearest_end = inner.live.lock().expect("live tasks lock").values().map(|task| task.ends_ms).min();
        let Some(nearest_end) = nearest_end else {
            changed.await;
            continue;
        };
        let until_end = Duration::from_millis(nearest_end.saturating_sub(now_ms()));
        let found = tokio::select! {
            found = wait_for_work(&inner.api, until_end, WAIT_BACKOFF) => found,
            () = &mut changed => continue,
        };
        let work = matches!(found, Ok(Some(_)));
        let finishing: Vec<(String, WaitTask)> = {
            let live = inner.live.lock().expect("live tasks lock");
            live.iter()
                .filter(|(_, task)| work || task.ended())
                .map(|(id, task)| (id.clone(), *task))
                .collect()
        };
        if finishing.is_empty() && found.is_ok() {
            continue;
        }
        let answer = match found {
            Ok(found) => wait_answer(&inner.api, found).await.unwrap_or_else(|refusal| refusal),
            Err(err) => from_error(&err),
        };
        let refused = answer.is_error == Some(true);
        let mut kept_all = true;
        for (task_id, task) in finishing {
            match inner.tasks.finish(&task_id, &task, Outcome::completed(&answer)) {
                Ok(_) => {
                    inner.live.lock().expect("live tasks lock").remove(&task_id);
                    let _ = inner.finished.send(task_id);
                }
                Err(err) if task.expired() => {
                    tracing::warn!(error = %err, "cannot keep a task's outcome; it expired, so it is dropped");
                    inner.live.lock().expect("live tasks lock").remove(&task_id);
                }
                Err(err) => {
                    // It stays working, and is finished by a later look.
                    tracing::warn!(error = %err, "cannot keep a task's outcome; trying again");
                    kept_all = false;
                }
            }
        }
        if refused || !kept_all {
            setbacks += 1;
            let pause = AGAIN.delay(setbacks, 0.5);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = &mut changed => {}
            }
        } else {
            setbacks = 0;
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
