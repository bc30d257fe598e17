//! Running a handler command (`listen --exec`, `--on-resync`) with `sh -c`: the input on its
//! stdin, its stderr passed through to ours as it comes, and what `listen` needs back — the
//! exit code and the last line the command wrote to stderr (a quarantine's reason).

use std::pin::pin;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::ChildStderr;

/// Longest reason the service keeps.
pub use inbox_core::limits::REASON_BYTES_MAX;
/// Bytes of the current stderr line kept while it is being written; the rest of a longer line
/// is still passed through, only not remembered.
const LINE_BYTES_KEPT: usize = 4 * 1024;
/// How long stderr is read after the command exited: a background process it started may hold
/// the pipe open for ever.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// `None`: killed by a signal.
    pub code: Option<i32>,
    /// The last non-blank line of its stderr, made fit for a reason: control characters as
    /// spaces, trimmed, at most [`REASON_BYTES_MAX`] bytes.
    pub last_stderr_line: Option<String>,
}

/// `sh -c command`, without our credentials in its environment.
pub fn shell(command: &str) -> tokio::process::Command {
    let mut child = tokio::process::Command::new("sh");
    child
        .arg("-c")
        .arg(command)
        // The handler gets the event, not our credentials.
        .env_remove("AGENT_INBOX_TOKEN")
        .env_remove("AGENT_INBOX_ADMIN_TOKEN")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A group of its own, so that a run cut short stops the command itself and not only `sh`
    // (which may run it as a child rather than exec it): see `GroupGuard`.
    #[cfg(unix)]
    child.process_group(0);
    child
}

/// Kills a command's process group when its run is cut short (the future dropped: the
/// shutdown grace ended, the agent stopped). Otherwise a command that `sh` ran as its child
/// would live on after `sh` is killed, still working on an event that was released to be run
/// again elsewhere. A run that completes leaves alone what the command started in the
/// background.
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(group) = self.0 {
            // The shell's own `kill`, which takes a group: no unsafe code, no dependency.
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("kill -KILL -{group} 2>/dev/null"))
                .status();
        }
    }
}

/// Runs `command` with `input` on its stdin until it exits.
pub async fn run_with_stdin(command: tokio::process::Command, input: String) -> std::io::Result<Finished> {
    run_with_stdin_lines(command, input, None).await
}

/// [`run_with_stdin`], sending each line the command writes to its stdout to `lines` as it
/// comes (`listen --batch` reads its outcomes so), when given.
pub async fn run_with_stdin_lines(
    mut command: tokio::process::Command,
    input: String,
    lines: Option<tokio::sync::mpsc::UnboundedSender<String>>,
) -> std::io::Result<Finished> {
    if lines.is_some() {
        command.stdout(Stdio::piped());
    }
    let mut child = command.spawn()?;
    let mut group = GroupGuard(child.id());
    if let (Some(stdout), Some(lines)) = (child.stdout.take(), lines) {
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt as _;
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if lines.send(line).is_err() {
                    return;
                }
            }
        });
    }
    let stdin = child.stdin.take();
    let mut stderr = child.stderr.take();
    let exited = async {
        if let Some(mut stdin) = stdin {
            // A command that does not read its input closes the pipe early; that is its business.
            match stdin.write_all(input.as_bytes()).await {
                Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => return Err(err),
                _ => {}
            }
            drop(stdin);
        }
        child.wait().await
    };
    let mut exited = pin!(exited);
    let mut last = LastLine::default();
    let mut buffer = [0u8; 4096];
    let status = loop {
        tokio::select! {
            status = &mut exited => break status?,
            read = read_some(&mut stderr, &mut buffer) => pass_through(&mut stderr, read, &buffer, &mut last).await,
        }
    };
    group.disarm();
    let _ = tokio::time::timeout(STDERR_DRAIN, async {
        while stderr.is_some() {
            let read = read_some(&mut stderr, &mut buffer).await;
            pass_through(&mut stderr, read, &buffer, &mut last).await;
        }
    })
    .await;
    Ok(Finished { code: status.code(), last_stderr_line: last.finish() })
}

/// Reads from the command's stderr; never completes once it is closed.
async fn read_some(stderr: &mut Option<ChildStderr>, buffer: &mut [u8]) -> std::io::Result<usize> {
    match stderr {
        Some(stderr) => stderr.read(buffer).await,
        None => std::future::pending().await,
    }
}

/// Copies what the command wrote to our stderr and remembers its lines; closes on end or error.
async fn pass_through(
    stderr: &mut Option<ChildStderr>,
    read: std::io::Result<usize>,
    buffer: &[u8],
    last: &mut LastLine,
) {
    match read {
        Ok(0) | Err(_) => *stderr = None,
        Ok(n) => {
            let _ = tokio::io::stderr().write_all(&buffer[..n]).await;
            last.feed(&buffer[..n]);
        }
    }
}

/// The last non-blank line of a byte stream, bounded in memory.
#[derive(Debug, Default)]
struct LastLine {
    current: Vec<u8>,
    last: Vec<u8>,
}

impl LastLine {
    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                if !self.current.iter().all(u8::is_ascii_whitespace) {
                    self.last = std::mem::take(&mut self.current);
                }
                self.current.clear();
            } else if self.current.len() < LINE_BYTES_KEPT {
                self.current.push(byte);
            }
        }
    }

    fn finish(self) -> Option<String> {
        let line = if self.current.iter().all(u8::is_ascii_whitespace) { self.last } else { self.current };
        let text: String =
            String::from_utf8_lossy(&line).chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let text = truncate_bytes(text.trim(), REASON_BYTES_MAX).trim_end();
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate_bytes(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_line(chunks: &[&[u8]]) -> Option<String> {
        let mut last = LastLine::default();
        for chunk in chunks {
            last.feed(chunk);
        }
        last.finish()
    }

    #[test]
    fn the_last_non_blank_line_is_kept_across_chunks() {
        assert_eq!(last_line(&[b"first\nsec", b"ond line\n\n  \n"]), Some("second line".into()));
        assert_eq!(last_line(&[b"one\nunterminated"]), Some("unterminated".into()));
        assert_eq!(last_line(&[b"\tcontrol\x1b[31m chars\r\n"]), Some("control [31m chars".into()));
        assert_eq!(last_line(&[b"", b"\n \n"]), None);
    }

    #[test]
    fn a_long_line_is_cut_to_a_reason_at_a_character_boundary() {
        let long = "é".repeat(300);
        let kept = last_line(&[long.as_bytes()]).unwrap();
        assert_eq!(kept.len(), 200);
        assert!(kept.chars().all(|c| c == 'é'));
        let huge = vec![b'x'; 10 * LINE_BYTES_KEPT];
        assert_eq!(last_line(&[&huge]).unwrap().len(), REASON_BYTES_MAX);
    }

    #[tokio::test]
    async fn a_command_gets_its_input_and_its_stderr_is_remembered() {
        let finished =
            run_with_stdin(shell("read line; echo \"got $line\" >&2; echo bye >&2; exit 65"), "hi\n".into())
                .await
                .unwrap();
        assert_eq!(finished, Finished { code: Some(65), last_stderr_line: Some("bye".into()) });
        let quiet = run_with_stdin(shell("exit 0"), String::new()).await.unwrap();
        assert_eq!(quiet, Finished { code: Some(0), last_stderr_line: None });
    }

    #[tokio::test]
    async fn a_background_process_holding_stderr_does_not_hold_the_event() {
        let started = std::time::Instant::now();
        let finished = run_with_stdin(shell("echo why >&2; (sleep 5 >/dev/null &) ; exit 65"), String::new())
            .await
            .unwrap();
        assert_eq!(finished.code, Some(65));
        assert_eq!(finished.last_stderr_line.as_deref(), Some("why"));
        assert!(started.elapsed() < Duration::from_secs(3), "waited for the background process");
    }
}
