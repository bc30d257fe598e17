//! What `listen` shows while it runs. On a terminal: one line per finished event and a live
//! status line redrawn in place (transport, counts, cursor). Otherwise (a service, a pipe):
//! plain structured log lines, as text or JSON, for journald and log collectors. Never a token.

use std::io::{IsTerminal as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_client::{Observer, Outcome, Progress, TransportStatus};

/// Counts and state behind the status line.
#[derive(Debug, Default)]
struct Status {
    transport: Option<TransportStatus>,
    acked: u64,
    failed: u64,
    released: u64,
    quarantined: u64,
    deduplicated: u64,
    unconfirmed: u64,
    running: u64,
    cursor: u64,
    head_seq: u64,
    trouble: Option<String>,
}

#[derive(Debug)]
pub struct Reporter {
    tty: bool,
    started: Instant,
    status: Mutex<Status>,
}

impl Reporter {
    /// Sets up logging for `listen` and returns the observer to hand to the agent.
    pub fn start(log_json: bool) -> Arc<Reporter> {
        let tty = std::io::stderr().is_terminal();
        // On a terminal the status line tells the story; logs are for warnings.
        let level = if tty { "warn" } else { "info" };
        let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_INBOX_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        if log_json && !tty {
            builder.json().init();
        } else {
            builder.with_ansi(tty).init();
        }
        let reporter = Arc::new(Reporter { tty, started: Instant::now(), status: Mutex::default() });
        if tty {
            let ticker = Arc::downgrade(&reporter);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    match ticker.upgrade() {
                        Some(reporter) => reporter.redraw(&reporter.status.lock().expect("status lock")),
                        None => return,
                    }
                }
            });
        }
        reporter
    }

    /// Leaves the terminal clean.
    pub fn finish(&self) {
        if self.tty {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
    }

    fn redraw(&self, status: &Status) {
        let transport = match status.transport {
            Some(TransportStatus { kind, connected: true }) => format!("● {}", kind.as_str()),
            Some(TransportStatus { kind, connected: false }) => format!("○ {} (connecting)", kind.as_str()),
            None => "○ starting".to_owned(),
        };
        let mut line = format!(
            "{transport} · {} acked · {} failed · {} retried · {} quarantined · {} deduplicated · {} running · cursor {}/{} · up {}s",
            status.acked,
            status.failed,
            status.released,
            status.quarantined,
            status.deduplicated,
            status.running,
            status.cursor,
            status.head_seq,
            self.started.elapsed().as_secs(),
        );
        if let Some(trouble) = &status.trouble {
            line.push_str(" · ");
            line.push_str(trouble);
        }
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[2K{}", truncate(&line, 160));
        let _ = stderr.flush();
    }

    /// Prints a line above the status line.
    fn say(&self, status: &Status, text: &str) {
        {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "\r\x1b[2K{text}");
        }
        self.redraw(status);
    }
}

impl Observer for Reporter {
    fn progress(&self, progress: &Progress<'_>) {
        let mut status = self.status.lock().expect("status lock");
        match progress {
            Progress::Subscribed { session_id, recipient_id, cursor, head_seq } => {
                status.cursor = *cursor;
                status.head_seq = *head_seq;
                tracing::info!(%session_id, %recipient_id, cursor, head_seq, "subscribed");
            }
            Progress::Transport(now) => {
                status.transport = Some(*now);
                status.trouble = None;
                tracing::info!(transport = now.kind.as_str(), connected = now.connected, "transport");
            }
            Progress::Disconnected { error, retry_in } => {
                let retry_in_ms = retry_in.as_millis() as u64;
                status.trouble = Some(format!("unreachable, retrying in {}s", retry_in.as_secs()));
                tracing::warn!(error = %error, retry_in_ms, "service unreachable");
            }
            Progress::Scanned { cursor, head_seq } => {
                status.cursor = *cursor;
                status.head_seq = *head_seq;
                status.trouble = None;
            }
            Progress::Started { event } => {
                status.running += 1;
                tracing::debug!(event_id = %event.event_id, event_type = %event.event_type, "started");
            }
            Progress::Finished { event, outcome, elapsed } => {
                status.running = status.running.saturating_sub(1);
                let (label, detail) = match outcome {
                    Outcome::Acked => {
                        status.acked += 1;
                        ("acked", String::new())
                    }
                    Outcome::Failed { reason } => {
                        status.failed += 1;
                        ("failed", reason.clone())
                    }
                    Outcome::Released { reason, .. } => {
                        status.released += 1;
                        ("released", reason.clone())
                    }
                    Outcome::Quarantined { reason, class } => {
                        status.quarantined += 1;
                        ("quarantined", format!("{}: {reason}", class.as_str()))
                    }
                    Outcome::Deduplicated { result } => {
                        status.deduplicated += 1;
                        ("deduplicated", format!("acknowledged as {} from the local record", result.as_str()))
                    }
                    Outcome::Unconfirmed { error } => {
                        status.unconfirmed += 1;
                        ("unconfirmed", error.clone())
                    }
                };
                let elapsed_ms = elapsed.as_millis() as u64;
                if self.tty {
                    let mark = match label {
                        "acked" | "deduplicated" => "✓",
                        "released" => "↻",
                        "quarantined" => "⚠",
                        _ => "✗",
                    };
                    let text = format!(
                        "{mark} {label:<12} {} #{} {} ({elapsed_ms} ms){}",
                        event.event_type,
                        event.inbox_seq,
                        event.event_id,
                        if detail.is_empty() { String::new() } else { format!(": {detail}") }
                    );
                    self.say(&status, &text);
                    return;
                }
                tracing::info!(
                    event_id = %event.event_id,
                    event_type = %event.event_type,
                    inbox_seq = event.inbox_seq,
                    outcome = label,
                    detail = %detail,
                    elapsed_ms,
                    "event finished"
                );
            }
            Progress::LeaseLost { event_id } => {
                tracing::warn!(%event_id, "lease lost while the command ran; its result will be deduplicated");
            }
            Progress::Resynced { snapshot } => {
                tracing::warn!(
                    head_seq = snapshot.head_seq,
                    resume_after_seq = snapshot.resume_after_seq,
                    open_events = snapshot.open_events.len(),
                    "cursor reset: resynced"
                );
            }
            Progress::ClockJumped(jump) => {
                tracing::info!(?jump, "clock jump: reconnecting and resyncing");
            }
        }
        if self.tty {
            self.redraw(&status);
        }
    }
}

fn truncate(line: &str, chars: usize) -> String {
    line.chars().take(chars).collect()
}
