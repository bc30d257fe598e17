//! Stdin and stdout for the protocol, with one addition: input that is not a JSON-RPC message
//! gets the JSON-RPC 2.0 error for it instead of silence, so a client that sent a broken message
//! learns so: a line that is not JSON gets Parse error (-32700, id null), a JSON value that is
//! not a request, notification or response gets Invalid Request (-32600, with its id when it has
//! a usable one). The line is dropped and the server reads on. Messages go to the MCP service
//! untouched, except that `subscriptions/listen` requests and their acknowledgements pass
//! through `task_listen.rs` (the `taskIds` rmcp does not carry); its answers and these errors
//! leave on stdout one whole line at a time, so they never interleave.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::task_listen::TaskListens;

const PIPE_BYTES: usize = 256 * 1024;

/// The service's ends of the filtered stdio, and the task that writes stdout: await it after
/// the service stops so its last answers are flushed.
#[derive(Debug)]
pub struct FilteredStdio {
    pub input: DuplexStream,
    pub output: DuplexStream,
    pub writer: JoinHandle<()>,
}

pub fn filtered_stdio(listens: Arc<TaskListens>) -> FilteredStdio {
    filtered(tokio::io::stdin(), tokio::io::stdout(), listens)
}

fn filtered(
    source: impl AsyncRead + Unpin + Send + 'static,
    sink: impl AsyncWrite + Unpin + Send + 'static,
    listens: Arc<TaskListens>,
) -> FilteredStdio {
    let (input, feed) = tokio::io::duplex(PIPE_BYTES);
    let (output, answers) = tokio::io::duplex(PIPE_BYTES);
    let (errors, refusals) = mpsc::channel::<String>(16);
    tokio::spawn(read(source, feed, errors, listens.clone()));
    let writer = tokio::spawn(write(answers, refusals, sink, listens));
    FilteredStdio { input, output, writer }
}

/// Passes JSON lines on; answers the others. Ends (closing the service's input) at end of file.
async fn read(
    source: impl AsyncRead + Unpin,
    mut feed: DuplexStream,
    errors: mpsc::Sender<String>,
    listens: Arc<TaskListens>,
) {
    let mut source = BufReader::new(source);
    let mut line = Vec::new();
    loop {
        line.clear();
        match source.read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) => {
                tracing::error!(error = %err, "cannot read stdin");
                return;
            }
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        if let Some(refusal) = refusal(text) {
            tracing::warn!(bytes = text.len(), "stdin carried something that is not a JSON-RPC message");
            if errors.send(refusal).await.is_err() {
                return;
            }
            continue;
        }
        if let Some(refusal) = listens.on_request(text) {
            if errors.send(refusal).await.is_err() {
                return;
            }
            continue;
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        if feed.write_all(&line).await.is_err() {
            return;
        }
    }
}

/// The JSON-RPC error for a line that is not a message, or `None` to pass it on. Batches (JSON
/// arrays) are the service's to refuse.
fn refusal(line: &[u8]) -> Option<String> {
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(value) => value,
        Err(err) => {
            return Some(error(Value::Null, -32700, &format!("Parse error: the line is not JSON ({err})")));
        }
    };
    let Value::Object(message) = &value else {
        if value.is_array() {
            return None;
        }
        return Some(error(Value::Null, -32600, "Invalid Request: a JSON-RPC message is a JSON object"));
    };
    let is_message = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (message.get("method").is_some_and(Value::is_string)
            || message.contains_key("result")
            || message.contains_key("error"));
    if is_message {
        return None;
    }
    let id = match message.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    Some(error(id, -32600, "Invalid Request: expected \"jsonrpc\": \"2.0\" and a \"method\" (or a response)"))
}

fn error(id: Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

/// Copies the service's lines and the parse errors to stdout until the service closes.
async fn write(
    answers: DuplexStream,
    mut refusals: mpsc::Receiver<String>,
    mut sink: impl AsyncWrite + Unpin,
    listens: Arc<TaskListens>,
) {
    let mut answers = BufReader::new(answers);
    let mut line = Vec::new();
    loop {
        tokio::select! {
            read = answers.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let rewritten = listens.on_output(&line);
                let out = rewritten.as_deref().unwrap_or(&line);
                if sink.write_all(out).await.is_err() || sink.flush().await.is_err() {
                    return;
                }
                line.clear();
            }
            Some(refusal) = refusals.recv() => {
                if sink.write_all(format!("{refusal}\n").as_bytes()).await.is_err() || sink.flush().await.is_err() {
                    return;
                }
            }
        }
    }
    while let Ok(refusal) = refusals.try_recv() {
        let _ = sink.write_all(format!("{refusal}\n").as_bytes()).await;
    }
    let _ = sink.flush().await;
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;

    #[tokio::test]
    async fn json_lines_pass_and_other_lines_get_a_parse_error() {
        let (mut client_in, source) = tokio::io::duplex(4096);
        let (sink, mut client_out) = tokio::io::duplex(4096);
        let stdio = filtered(source, sink, Arc::new(TaskListens::new(None)));
        client_in
            .write_all(b"not json\n{\"id\":9}\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        drop(client_in);

        let mut service_in = String::new();
        let mut input = stdio.input;
        input.read_to_string(&mut service_in).await.unwrap();
        assert_eq!(service_in, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");

        let mut output = stdio.output;
        output.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").await.unwrap();
        drop(output);
        stdio.writer.await.unwrap();
        let mut written = String::new();
        client_out.read_to_string(&mut written).await.unwrap();
        let lines: Vec<Value> = written.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{written}");
        let code = |id: Value| lines.iter().find(|l| l["id"] == id).map(|l| l["error"]["code"].clone());
        assert_eq!(code(Value::Null), Some((-32700).into()));
        assert_eq!(code(9.into()), Some((-32600).into()));
        assert!(lines.iter().any(|l| l["id"] == 1 && l["result"].is_object()));
    }

    #[test]
    fn messages_pass_and_batches_are_left_to_the_service() {
        for message in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        ] {
            assert_eq!(refusal(message.as_bytes()), None, "{message}");
        }
        assert!(refusal(b"3").unwrap().contains("-32600"));
        assert!(refusal(br#"{"jsonrpc":"1.0","id":"a","method":"x"}"#).unwrap().contains(r#""id":"a""#));
    }
}
