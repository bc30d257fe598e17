//! A2A's JSON-RPC binding on HTTP: the [`RpcCall`] extractor (the JSON-RPC envelope, the
//! `A2A-Version` service parameter, the method, a stream's `Last-Event-ID`), and the answers:
//! a result or a JSON-RPC error (HTTP 200, as the binding says), an SSE stream of results, or,
//! for a caller not authenticated or allowed and a node that cannot serve, the service's own
//! problem. Every answer says `A2A-Version: 1.0`.
//!
//! Version negotiation follows the specification: `A2A-Version` (the header, or a query
//! parameter of that name) is matched by `Major.Minor`; an absent one means 0.3, which this
//! server does not speak: -32009, naming the version to send.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use inbox_api::a2a::A2A_PROTOCOL_VERSION;
use serde::Serialize;
use serde_json::{Value, json};

use crate::http::extract::read_body;
use crate::http::stream_params::forwarded_https;
use crate::node::AppState;
use crate::ops::a2a::follow::Frame;
use crate::ops::a2a::{A2aError, RpcError};

/// The service parameter naming the protocol version.
pub const VERSION_HEADER: &str = "a2a-version";

/// The methods of A2A's JSON-RPC binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    GetExtendedAgentCard,
}

impl Method {
    const ALL: [Method; 11] = [
        Method::SendMessage,
        Method::SendStreamingMessage,
        Method::GetTask,
        Method::ListTasks,
        Method::CancelTask,
        Method::SubscribeToTask,
        Method::CreateTaskPushNotificationConfig,
        Method::GetTaskPushNotificationConfig,
        Method::ListTaskPushNotificationConfigs,
        Method::DeleteTaskPushNotificationConfig,
        Method::GetExtendedAgentCard,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::SendMessage => "SendMessage",
            Method::SendStreamingMessage => "SendStreamingMessage",
            Method::GetTask => "GetTask",
            Method::ListTasks => "ListTasks",
            Method::CancelTask => "CancelTask",
            Method::SubscribeToTask => "SubscribeToTask",
            Method::CreateTaskPushNotificationConfig => "CreateTaskPushNotificationConfig",
            Method::GetTaskPushNotificationConfig => "GetTaskPushNotificationConfig",
            Method::ListTaskPushNotificationConfigs => "ListTaskPushNotificationConfigs",
            Method::DeleteTaskPushNotificationConfig => "DeleteTaskPushNotificationConfig",
            Method::GetExtendedAgentCard => "GetExtendedAgentCard",
        }
    }
}

/// One JSON-RPC call, read from the request: its id (echoed in the answer), method and params,
/// and the stream cursor a resuming client sends.
#[derive(Debug)]
pub struct RpcCall {
    pub id: Value,
    pub method: Method,
    pub params: Value,
    /// `Last-Event-ID`: the update a stream resumes after.
    pub last_event_id: Option<u64>,
}

/// A call refused before any method ran: the JSON-RPC error, with the id when it was read.
#[derive(Debug)]
pub struct Refused(Value, RpcError);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        rpc_answer(&self.0, Err(self.1))
    }
}

impl FromRequest<AppState> for RpcCall {
    type Rejection = Refused;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Refused> {
        let null = || Value::Null;
        let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let json = content_type.is_none_or(|v| {
            let media = v.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("application/json")
                || media.eq_ignore_ascii_case("application/a2a+json")
        });
        if !json {
            return Err(Refused(
                null(),
                RpcError::invalid_request("send the call as JSON with 'Content-Type: application/json'"),
            ));
        }
        let version = asked_version(request.headers(), request.uri().query());
        let last_event_id = request
            .headers()
            .get("last-event-id")
            .map(|v| v.to_str().unwrap_or("\u{fffd}").trim().to_owned());
        let bytes = read_body(request.into_body(), state.body_bytes_limit())
            .await
            .map_err(|err| Refused(null(), RpcError::invalid_request(err.detail)))?;
        let body: Value =
            serde_json::from_slice(&bytes).map_err(|err| Refused(null(), RpcError::parse_error(err)))?;
        let Value::Object(mut members) = body else {
            let what = if body.is_array() {
                "batch requests are not supported; send one call"
            } else {
                "the body must be a JSON-RPC request object"
            };
            return Err(Refused(null(), RpcError::invalid_request(what)));
        };
        let id = match members.remove("id") {
            None | Some(Value::Null) => Value::Null,
            Some(id @ (Value::String(_) | Value::Number(_))) => id,
            Some(other) => {
                return Err(Refused(
                    null(),
                    RpcError::invalid_request(format!("id is {other}; send a string, a number or null")),
                ));
            }
        };
        if members.get("jsonrpc") != Some(&json!("2.0")) {
            return Err(Refused(id, RpcError::invalid_request("jsonrpc must be exactly \"2.0\"")));
        }
        let Some(Value::String(name)) = members.remove("method") else {
            return Err(Refused(
                id,
                RpcError::invalid_request("method is required: a string such as \"SendMessage\""),
            ));
        };
        if !version_supported(&version) {
            return Err(Refused(id, RpcError::version_not_supported(&version)));
        }
        let Some(method) = Method::ALL.into_iter().find(|m| m.as_str() == name) else {
            return Err(Refused(id, RpcError::method_not_found(&name)));
        };
        let last_event_id = match last_event_id.as_deref() {
            None | Some("") => None,
            Some(text) => match text.parse::<u64>() {
                Ok(seq) if seq <= i64::MAX as u64 => Some(seq),
                _ => {
                    let error = RpcError::invalid_params(
                        "Last-Event-ID",
                        format!(
                            "is {text:?}; send the id of the last event received (a task's update sequence)"
                        ),
                    );
                    return Err(Refused(id, error));
                }
            },
        };
        let params = members.remove("params").unwrap_or(Value::Null);
        Ok(RpcCall { id, method, params, last_event_id })
    }
}

/// The version a request asks for: the header, else the query parameter, else none (0.3).
fn asked_version(headers: &HeaderMap, query: Option<&str>) -> String {
    if let Some(value) = headers.get(VERSION_HEADER) {
        return value.to_str().unwrap_or("\u{fffd}").trim().to_owned();
    }
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| {
            pair.split_once('=')
                .filter(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default()
}

/// Whether `asked` is this server's `Major.Minor` (a patch is ignored).
fn version_supported(asked: &str) -> bool {
    let mut parts = asked.split('.');
    let (Some(major), minor) = (parts.next(), parts.next()) else { return false };
    let ours: Vec<&str> = A2A_PROTOCOL_VERSION.split('.').collect();
    major == ours[0]
        && minor.unwrap_or("0") == ours[1]
        && parts.all(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

fn version_header() -> (HeaderName, HeaderValue) {
    (HeaderName::from_static(VERSION_HEADER), HeaderValue::from_static(A2A_PROTOCOL_VERSION))
}

/// A JSON-RPC answer: the result, or the error (HTTP 200 either way).
fn rpc_answer(id: &Value, answer: Result<Value, RpcError>) -> Response {
    let body = match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error_object(error)}),
    };
    let headers = [(header::CONTENT_TYPE, HeaderValue::from_static("application/json")), version_header()];
    (StatusCode::OK, headers, body.to_string()).into_response()
}

fn error_object(error: RpcError) -> Value {
    json!({"code": error.code, "message": error.message, "data": error.data})
}

/// A use case's answer to call `id`.
pub fn answer<T: Serialize>(id: &Value, outcome: Result<T, A2aError>) -> Response {
    match outcome {
        Ok(result) => match serde_json::to_value(result) {
            Ok(result) => rpc_answer(id, Ok(result)),
            Err(err) => {
                tracing::error!(error = %err, "an a2a answer did not serialize");
                rpc_answer(id, Err(RpcError::internal()))
            }
        },
        Err(A2aError::Rpc(error)) => rpc_answer(id, Err(error)),
        Err(A2aError::Http(problem)) => {
            let mut response = problem.into_response();
            let (name, value) = version_header();
            response.headers_mut().insert(name, value);
            response
        }
    }
}

/// A stream's answer to call `id`: each event a JSON-RPC result in an SSE `data:`, its `id:`
/// the task's update sequence; comments keep a quiet stream open.
pub fn stream<S>(id: &Value, outcome: Result<S, A2aError>) -> Response
where
    S: Stream<Item = Frame> + Send + 'static,
{
    let frames = match outcome {
        Ok(frames) => frames,
        Err(error) => return answer::<Value>(id, Err(error)),
    };
    let id = id.clone();
    let body = frames.map(move |frame| {
        Ok::<_, Infallible>(match frame {
            Frame::KeepAlive => Bytes::from_static(b": keep-alive\n\n"),
            Frame::Event { seq, response } => {
                let data = json!({"jsonrpc": "2.0", "id": id, "result": response});
                Bytes::from(format!("id: {seq}\ndata: {data}\n\n"))
            }
        })
    });
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
        version_header(),
    ];
    (headers, Body::from_stream(body)).into_response()
}

/// `https://host[:port]` (or `http://`) the client reached this node by, from its Host header:
/// the card's interface URL is under it. `None` when the header is missing or not a plain
/// authority.
pub fn origin(headers: &HeaderMap, tls: bool) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let plain = !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !plain {
        return None;
    }
    let scheme = if tls || forwarded_https(headers) { "https" } else { "http" };
    Some(format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_match_by_major_and_minor() {
        for ok in ["1.0", "1.0.0", "1.0.7", "1"] {
            assert!(version_supported(ok), "{ok}");
        }
        for refused in ["", "0.3", "1.1", "2.0", "1.0.x", "one"] {
            assert!(!version_supported(refused), "{refused:?}");
        }
        let mut headers = HeaderMap::new();
        assert_eq!(asked_version(&headers, Some("a=1&A2A-Version=1.0")), "1.0");
        headers.insert(VERSION_HEADER, HeaderValue::from_static("0.3"));
        assert_eq!(asked_version(&headers, Some("A2A-Version=1.0")), "0.3", "the header first");
    }

    #[test]
    fn the_origin_follows_the_host_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(origin(&headers, false), None);
        headers.insert(header::HOST, HeaderValue::from_static("agents.example.net:8443"));
        assert_eq!(origin(&headers, false).as_deref(), Some("http://agents.example.net:8443"));
        assert_eq!(origin(&headers, true).as_deref(), Some("https://agents.example.net:8443"));
        headers.insert(header::HOST, HeaderValue::from_static("evil/path"));
        assert_eq!(origin(&headers, false), None);
    }
}
