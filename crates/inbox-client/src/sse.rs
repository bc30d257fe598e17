//! The `text/event-stream` wire format: an incremental parser fed raw bytes as they arrive,
//! yielding complete events. Pure, so chunk boundaries anywhere (inside a line, inside a UTF-8
//! character, between `\r` and `\n`) are tested directly.
//!
//! Hand-written on purpose, after checking the crates that parse this format:
//! `eventsource-stream` 0.2 (last release 2022) drops a block that sets only `retry:` and
//! forgets the retry advice of every block, and buffers lines without a limit;
//! `sse-stream` 0.2 fails the whole stream on an unknown field, a line without a colon, an
//! unparsable `retry:` or invalid UTF-8 (the spec ignores or replaces them), does not carry
//! the last `id:` over to later events, has no line limit, and reads only from an
//! `http_body::Body`. Each would change what the tests below pin down.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:`; `message` when absent.
    pub event: String,
    pub data: String,
    /// The last `id:` seen on the stream so far, as the spec defines it.
    pub id: Option<String>,
    /// `retry:` advice in milliseconds, if this event carried one.
    pub retry_ms: Option<u64>,
}

/// Longest line accepted; a stream sending longer lines is broken or hostile.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    /// A `\r` ended the previous chunk: a `\n` starting the next one belongs to it.
    after_cr: bool,
    event: String,
    data: Vec<String>,
    last_id: Option<String>,
    retry_ms: Option<u64>,
    /// Something was set since the last dispatch (a `retry:`-only block still counts).
    pending: bool,
}

/// The stream is not valid SSE.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event stream sent a line longer than {LINE_BYTES_MAX} bytes")]
pub struct LineTooLong;

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.buffer);
                    if let Some(event) = self.line(&String::from_utf8_lossy(&line)) {
                        events.push(event);
                    }
                }
                _ => {
                    if self.buffer.len() >= LINE_BYTES_MAX {
                        return Err(LineTooLong);
                    }
                    self.buffer.push(byte);
                }
            }
        }
        Ok(events)
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => self.data.push(value.to_owned()),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            "retry" => {
                if let Ok(ms) = value.parse() {
                    self.retry_ms = Some(ms);
                }
            }
            _ => return None,
        }
        self.pending = true;
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        if !self.pending {
            return None;
        }
        self.pending = false;
        let event = SseEvent {
            event: match std::mem::take(&mut self.event) {
                name if name.is_empty() => "message".to_owned(),
                name => name,
            },
            data: std::mem::take(&mut self.data).join("\n"),
            id: self.last_id.clone(),
            retry_ms: self.retry_ms.take(),
        };
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_services_hint_and_heartbeat_frames() {
        let mut parser = SseParser::new();
        let stream = "retry: 3000\n\nevent: inbox.updated\nid: 7\ndata: {\"head_seq\":7}\n\n\
                      event: heartbeat\ndata: {}\n\n";
        let events = parser.feed(stream.as_bytes()).unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].retry_ms, Some(3000));
        assert_eq!(events[1].event, "inbox.updated");
        assert_eq!(events[1].id.as_deref(), Some("7"));
        assert_eq!(events[1].data, "{\"head_seq\":7}");
        assert_eq!(events[2].event, "heartbeat");
        assert_eq!(events[2].id.as_deref(), Some("7"), "the last id carries over");
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        let stream = "event: inbox.updated\r\nid: 12\r\ndata: line one\r\ndata: line two é\r\n\r\n: comment\n\ndata:x\n\n";
        let whole = SseParser::new().feed(stream.as_bytes()).unwrap();
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].data, "line one\nline two é");
        assert_eq!(whole[1].event, "message");
        assert_eq!(whole[1].data, "x");
        for size in 1..8 {
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            for chunk in stream.as_bytes().chunks(size) {
                events.extend(parser.feed(chunk).unwrap());
            }
            assert_eq!(events, whole, "chunks of {size}");
        }
    }

    #[test]
    fn comments_alone_dispatch_nothing_and_long_lines_are_refused() {
        let mut parser = SseParser::new();
        assert!(parser.feed(b": keep-alive\n\n\n").unwrap().is_empty());
        let long = vec![b'a'; LINE_BYTES_MAX + 1];
        assert_eq!(SseParser::new().feed(&long), Err(LineTooLong));
    }
}
