//! The service's log on stderr: one line per request (`info`, the default) and the service's
//! own events. Lines are formatted where they happen but written by a thread of their own, so a
//! slow terminal, pipe or journal never holds a request. The queue is bounded: when the writer
//! falls that far behind, new lines are dropped rather than waited for, and counted
//! (`agent_inbox_log_lines_dropped_total`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

/// Lines queued for the writer at most; past this they are dropped and counted.
pub const QUEUED_LINES_MAX: usize = 64 * 1024;

/// The counter of dropped lines, once the log is set up.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the writer thread; dropping it writes what is queued and stops the thread.
#[must_use = "dropping the guard stops the log's writer"]
pub struct LogGuard {
    _writer: WorkerGuard,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogGuard")
    }
}

/// Sets up the log: `AGENT_INBOX_LOG` (an `EnvFilter`, such as `warn` or
/// `info,inbox_server=debug`) or else `default_level`; JSON lines or text, coloured only for a
/// person at a terminal. Keep the guard until the process ends.
pub fn init(json: bool, default_level: &str) -> LogGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_INBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES_MAX)
        .finish(std::io::stderr());
    let _ = DROPPED.set(writer.error_counter());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi && !json);
    let installed = if json { builder.json().try_init() } else { builder.try_init() };
    if let Err(err) = installed {
        eprintln!("the log is already set up: {err}");
    }
    LogGuard { _writer: guard }
}

/// Dropped lines already handed to [`take_dropped`]'s callers.
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// Lines dropped because the writer fell behind, since the previous call (for a counter).
pub fn take_dropped() -> u64 {
    let dropped = DROPPED.get().map_or(0, |counter| counter.dropped_lines() as u64);
    dropped.saturating_sub(TAKEN.swap(dropped, Ordering::Relaxed))
}
