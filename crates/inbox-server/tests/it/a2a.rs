//! The A2A face over HTTP, as a JSON-RPC client sees it: the card; who may call (401, 403
//! before anything is judged); the version, envelope and params refusals with A2A's codes; a
//! message kept for an agent that is away and answered idempotently; the runner's lease-fenced
//! report through the inbox's acknowledgement; `GetTask`, `ListTasks`, `CancelTask`;
//! `SubscribeToTask` from durable state and resumed after `Last-Event-ID`; push notifications
//! through the callback sender.

use std::time::{Duration, Instant};

use inbox_conformance::Backend;
use inbox_server::CallerKind;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::callback_receivers::{Receiver, SECRET, development, verify_with, wait_for};
use crate::harness::{TestServer, assert_problem, both_backends};

both_backends!(card_and_refusals, a_message_waits_for_its_agent, following_and_canceling, push_notifications);

const PATH: &str = "/a2a/t1/alpha";

async fn client(server: &TestServer) -> String {
    server.token("t1", "client_app", CallerKind::Publisher, "a2a.send").await
}

/// One JSON-RPC call (with `A2A-Version: 1.0`): the HTTP status and the body.
async fn rpc(server: &TestServer, token: &str, method: &str, params: Value) -> (StatusCode, Value) {
    let response = server
        .request(
            reqwest::Method::POST,
            PATH,
            Some(token),
            Some(json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})),
        )
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["a2a-version"], "1.0");
    crate::harness::read(response).await
}

async fn result(server: &TestServer, token: &str, method: &str, params: Value) -> Value {
    let (status, body) = rpc(server, token, method, params).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("error").is_none(), "{method}: {body}");
    assert_eq!(body["id"], 7);
    body["result"].clone()
}

async fn error(server: &TestServer, token: &str, method: &str, params: Value) -> Value {
    let (status, body) = rpc(server, token, method, params).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["error"].clone()
}

fn send_params(message_id: &str, text: &str) -> Value {
    json!({
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": true},
    })
}

/// What the agent's runner does: claims the next event and acknowledges it with a report.
async fn run_agent(server: &TestServer, report: Value) -> Value {
    let agent = server.agent("t1", "alpha").await;
    let (status, body) = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let claim = body["claims"][0].clone();
    assert_eq!(claim["event"]["event_type"], "a2a.message", "{body}");
    let ack = json!({"acks": [{"event_id": claim["event_id"], "lease_token": claim["lease_token"], "a2a": report}]});
    let (status, body) = server.post("/v1/inbox/acknowledge", &agent, ack).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"][0]["ack_state"], "acked", "{body}");
    claim
}

fn answer(text: &str) -> Value {
    json!({"message": {"role": "ROLE_AGENT", "parts": [{"text": "done"}]}, "artifacts": [{"name": "answer", "parts": [{"text": text}]}]})
}

async fn card_and_refusals(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (status, card) =
        server.call(reqwest::Method::GET, "/a2a/t1/alpha/.well-known/agent-card.json", None, None).await;
    assert_eq!(status, StatusCode::OK, "{card}");
    let interface = &card["supportedInterfaces"][0];
    assert_eq!(interface["url"], format!("{}{PATH}", server.base));
    assert_eq!(
        (interface["protocolBinding"].as_str(), interface["protocolVersion"].as_str()),
        (Some("JSONRPC"), Some("1.0"))
    );
    assert_eq!(card["securitySchemes"]["agentInboxBearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": true, "extendedAgentCard": false})
    );
    let (status, _) =
        server.call(reqwest::Method::GET, "/a2a/t1/no%20agent/.well-known/agent-card.json", None, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Who may: a token, of the path's tenant, with a2a.send; each refused before any field.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {}}});
    let unauthenticated = server.call(reqwest::Method::POST, PATH, None, Some(call.clone())).await;
    assert_problem(&unauthenticated, StatusCode::UNAUTHORIZED, "unauthorized");
    let other_tenant = server.token("t2", "client_app", CallerKind::Publisher, "a2a.send").await;
    let refused = server
        .request(reqwest::Method::POST, PATH, Some(&other_tenant), Some(call.clone()))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_problem(&crate::harness::read(refused).await, StatusCode::FORBIDDEN, "tenant_mismatch");
    let agent = server.agent("t1", "beta").await;
    let refused = server
        .request(reqwest::Method::POST, PATH, Some(&agent), Some(call.clone()))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    let refused = crate::harness::read(refused).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
    assert_eq!(refused.1["scope"], "a2a.send");

    // The version: none is 0.3, which this server does not speak; 1.0 by header or query.
    let token = client(&server).await;
    for version in [None, Some("0.3"), Some("2.0")] {
        let mut request = server.request(reqwest::Method::POST, PATH, Some(&token), Some(call.clone()));
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        let (status, body) = crate::harness::read(request.send().await.unwrap()).await;
        assert_eq!(
            (status, body["error"]["code"].as_i64()),
            (StatusCode::OK, Some(-32009)),
            "{version:?}: {body}"
        );
        assert_eq!(body["id"], 1);
    }
    let by_query = server
        .request(
            reqwest::Method::POST,
            &format!("{PATH}?A2A-Version=1.0"),
            Some(&token),
            Some(json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "x"}})),
        )
        .send()
        .await
        .unwrap();
    let (_, body) = crate::harness::read(by_query).await;
    assert_eq!(body["error"]["code"], -32001, "a version by query is taken: {body}");

    // The envelope and the params, each with its code and the refused field.
    let raw = |body: &'static str| {
        server
            .client
            .post(format!("{}{PATH}", server.base))
            .bearer_auth(&token)
            .header("A2A-Version", "1.0")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let (_, body) = crate::harness::read(raw("{not json").await.unwrap()).await;
    assert_eq!(body["error"]["code"], -32700, "{body}");
    let (_, body) = crate::harness::read(raw("[]").await.unwrap()).await;
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let (_, body) =
        crate::harness::read(raw(r#"{"jsonrpc": "1.0", "id": 3, "method": "GetTask"}"#).await.unwrap()).await;
    assert_eq!((body["error"]["code"].as_i64(), body["id"].as_i64()), (Some(-32600), Some(3)), "{body}");
    assert_eq!(error(&server, &token, "tasks/get", json!({})).await["code"], -32601);
    let refused = error(
        &server,
        &token,
        "SendMessage",
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
    )
    .await;
    assert_eq!(refused["code"], -32602, "{refused}");
    assert_eq!(refused["data"][1]["fieldViolations"][0]["field"], "params.message.parts", "{refused}");
    let refused = error(
        &server,
        &token,
        "SendMessage",
        json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}}),
    )
    .await;
    assert_eq!(refused["data"][1]["fieldViolations"][0]["field"], "params.message.role", "{refused}");
    let refused = error(&server, &token, "SendMessage", json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x", "url": "https://x"}]}})).await;
    assert_eq!(refused["data"][1]["fieldViolations"][0]["field"], "params.message.parts[0]", "{refused}");
    let refused = error(&server, &token, "SendMessage", json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": "nope"}})).await;
    assert_eq!(refused["code"], -32001, "a task id that names no task: {refused}");
    assert_eq!(
        error(&server, &token, "GetTask", json!({"id": "0197f0ab-44f7-7f1a-b0ef-1f5d0f9a1c70"})).await["code"],
        -32001
    );
    assert_eq!(error(&server, &token, "ListTasks", json!({"pageSize": 1000})).await["code"], -32602);
    assert_eq!(error(&server, &token, "ListTasks", json!({"pageToken": "garbage"})).await["code"], -32602);
    assert_eq!(error(&server, &token, "GetExtendedAgentCard", json!({})).await["code"], -32004);
    server.stop().await;
}

async fn a_message_waits_for_its_agent(backend: Backend) {
    let server = TestServer::start(backend).await;
    let token = client(&server).await;
    let sent = result(&server, &token, "SendMessage", send_params("m-1", "what is 6 x 7?")).await;
    let task = &sent["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{sent}");
    let task_id = task["id"].as_str().unwrap().to_owned();
    assert_eq!(task["history"][0]["parts"][0]["text"], "what is 6 x 7?");
    assert_eq!(task["history"][0]["taskId"], task_id.as_str());
    let again = result(&server, &token, "SendMessage", send_params("m-1", "what is 6 x 7?")).await;
    assert_eq!(again["task"]["id"], task_id.as_str(), "the same messageId answers the same task");

    // A blocking send to an agent that is away answers within a few seconds, still submitted.
    let started = Instant::now();
    let blocking =
        json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "later"}]}});
    let waited = result(&server, &token, "SendMessage", blocking).await;
    assert_eq!(waited["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

    // The agent comes back: two events, the first carrying the task and its message.
    let agent = server.agent("t1", "alpha").await;
    let (_, polled) = server.post("/v1/inbox/poll-after-cursor", &agent, json!({})).await;
    assert_eq!(polled["events"].as_array().unwrap().len(), 2, "{polled}");
    let payload = &polled["events"][0]["payload"];
    assert_eq!(
        (payload["task_id"].as_str(), payload["sender_id"].as_str()),
        (Some(task_id.as_str()), Some("client_app"))
    );

    // A report by a foreign lease changes nothing; a report of an event with no task is refused.
    let (_, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    let claim = &claimed["claims"][0];
    let foreign = json!({"acks": [{"event_id": claim["event_id"], "lease_token": "lease_0123456789abcdef0123456789abcdef", "a2a": answer("x")}]});
    let (_, body) = server.post("/v1/inbox/acknowledge", &agent, foreign).await;
    assert_eq!(body["results"][0]["error"]["code"], "lease_mismatch", "{body}");
    let bad = json!({"acks": [{"event_id": claim["event_id"], "lease_token": claim["lease_token"], "a2a": {"artifacts": [{"parts": []}]}}]});
    let refused = server.post("/v1/inbox/acknowledge", &agent, bad).await;
    assert_problem(&refused, StatusCode::BAD_REQUEST, "invalid_field");
    assert_eq!(refused.1["field"], "acks[0].a2a.artifacts[0].parts", "{}", refused.1);
    let with_state = json!({"acks": [{"event_id": claim["event_id"], "lease_token": claim["lease_token"], "result": "failed", "reason": "x", "a2a": {"state": "input_required"}}]});
    let refused = server.post("/v1/inbox/acknowledge", &agent, with_state).await;
    assert_eq!(refused.1["field"], "acks[0].a2a.state", "{}", refused.1);
    let got = result(&server, &token, "GetTask", json!({"id": task_id})).await;
    assert_eq!(got["status"]["state"], "TASK_STATE_WORKING", "the claim made it working: {got}");

    let done = json!({"acks": [{"event_id": claim["event_id"], "lease_token": claim["lease_token"], "a2a": answer("42")}]});
    let (_, body) = server.post("/v1/inbox/acknowledge", &agent, done).await;
    assert_eq!(body["results"][0]["ack_state"], "acked", "{body}");
    let got = result(&server, &token, "GetTask", json!({"id": task_id, "historyLength": 1})).await;
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(got["artifacts"][0]["parts"][0]["text"], "42");
    assert_eq!(got["status"]["message"]["parts"][0]["text"], "done");
    assert_eq!(got["history"].as_array().unwrap().len(), 1, "historyLength keeps the newest");

    // Only its sender sees a task; an operator sees every one.
    let stranger = server.token("t1", "someone_else", CallerKind::Publisher, "a2a.send").await;
    assert_eq!(error(&server, &stranger, "GetTask", json!({"id": task_id})).await["code"], -32001);
    let listed = result(&server, &token, "ListTasks", json!({"pageSize": 1})).await;
    assert_eq!((listed["totalSize"].as_i64(), listed["pageSize"].as_i64()), (Some(2), Some(1)), "{listed}");
    assert!(listed["tasks"][0].get("artifacts").is_none(), "artifacts only when asked: {listed}");
    let next = result(
        &server,
        &token,
        "ListTasks",
        json!({"pageSize": 1, "pageToken": listed["nextPageToken"], "includeArtifacts": true}),
    )
    .await;
    assert_eq!(next["nextPageToken"], "", "{next}");
    let completed = result(
        &server,
        &token,
        "ListTasks",
        json!({"status": "TASK_STATE_COMPLETED", "includeArtifacts": true}),
    )
    .await;
    assert_eq!(completed["tasks"][0]["artifacts"][0]["parts"][0]["text"], "42", "{completed}");
    assert_eq!(result(&server, &stranger, "ListTasks", json!({})).await["totalSize"], 0);
    let operator = server.token("t1", "ops", CallerKind::Admin, "admin").await;
    assert_eq!(result(&server, &operator, "ListTasks", json!({})).await["totalSize"], 2);

    // A follow-up message for a finished task is refused; a new one starts a new task.
    let follow_up = json!({"message": {"messageId": "m-3", "role": "ROLE_USER", "taskId": task_id, "parts": [{"text": "and 7 x 8?"}]}, "configuration": {"returnImmediately": true}});
    assert_eq!(error(&server, &token, "SendMessage", follow_up).await["code"], -32004);
    server.stop().await;
}

/// Reads SSE events (`id`, JSON-RPC result) from a streaming call until the stream ends.
async fn events(response: reqwest::Response) -> Vec<(u64, Value)> {
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut response = response;
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Some(chunk) =
        tokio::time::timeout_at(deadline, response.chunk()).await.expect("the stream ends").unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text.split("\n\n")
        .filter_map(|frame| {
            let id = frame.lines().find_map(|l| l.strip_prefix("id: "))?.parse().unwrap();
            let data: Value =
                serde_json::from_str(frame.lines().find_map(|l| l.strip_prefix("data: "))?).unwrap();
            assert_eq!(data["id"], 7);
            Some((id, data["result"].clone()))
        })
        .collect()
}

fn kind(result: &Value) -> String {
    let (name, body) = result.as_object().unwrap().iter().next().unwrap();
    let state = body["status"]["state"].as_str().unwrap_or("");
    format!("{name}:{state}")
}

async fn subscribe(
    server: &TestServer,
    token: &str,
    task_id: &str,
    last_event_id: Option<u64>,
) -> reqwest::Response {
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task_id}});
    let mut request = server
        .request(reqwest::Method::POST, PATH, Some(token), Some(call))
        .header("A2A-Version", "1.0")
        .header("accept", "text/event-stream");
    if let Some(seq) = last_event_id {
        request = request.header("Last-Event-ID", seq.to_string());
    }
    request.send().await.unwrap()
}

async fn following_and_canceling(backend: Backend) {
    let server = TestServer::start(backend).await;
    let token = client(&server).await;
    let sent = result(&server, &token, "SendMessage", send_params("m-1", "work")).await;
    let task_id = sent["task"]["id"].as_str().unwrap().to_owned();
    // Followed while the agent is away; the agent comes back and finishes it.
    let followed = subscribe(&server, &token, &task_id, None).await;
    let streaming = tokio::spawn(events(followed));
    run_agent(&server, answer("result")).await;
    let seen = streaming.await.unwrap();
    let kinds: Vec<String> = seen.iter().map(|(_, r)| kind(r)).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("task:TASK_STATE_SUBMITTED"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("statusUpdate:TASK_STATE_COMPLETED"), "{kinds:?}");
    assert!(kinds.contains(&"artifactUpdate:".to_owned()), "{kinds:?}");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "ids count up: {seen:?}");

    // Finished: following again is refused; resuming after an id replays what came after it.
    assert_eq!(events_or_error(subscribe(&server, &token, &task_id, None).await).await, Err(-32004));
    let resumed = events(subscribe(&server, &token, &task_id, Some(1)).await).await;
    let replayed: Vec<String> = resumed.iter().skip(1).map(|(_, r)| kind(r)).collect();
    assert_eq!(resumed[0].0, 4, "the task first, at its newest id");
    assert_eq!(
        replayed,
        vec!["statusUpdate:TASK_STATE_WORKING", "artifactUpdate:", "statusUpdate:TASK_STATE_COMPLETED"]
    );

    // SendStreamingMessage: the task, then its updates, until it ends.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage", "params": send_params("m-2", "stream it")});
    let response = server
        .request(reqwest::Method::POST, PATH, Some(&token), Some(call))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    let streaming = tokio::spawn(events(response));
    run_agent(&server, answer("streamed")).await;
    let kinds: Vec<String> = streaming.await.unwrap().iter().map(|(_, r)| kind(r)).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("task:TASK_STATE_SUBMITTED"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("statusUpdate:TASK_STATE_COMPLETED"), "{kinds:?}");

    // Canceled before any agent took it: never delivered.
    let waiting = result(&server, &token, "SendMessage", send_params("m-3", "never mind")).await;
    let waiting_id = waiting["task"]["id"].as_str().unwrap();
    let canceled = result(&server, &token, "CancelTask", json!({"id": waiting_id})).await;
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    let again = result(&server, &token, "CancelTask", json!({"id": waiting_id})).await;
    assert_eq!(again["status"]["state"], "TASK_STATE_CANCELED", "canceling is idempotent");
    let agent = server.agent("t1", "alpha").await;
    let (_, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 10})).await;
    assert_eq!(claimed["claims"].as_array().unwrap().len(), 0, "{claimed}");
    assert_eq!(error(&server, &token, "CancelTask", json!({"id": task_id})).await["code"], -32002);
    server.stop().await;
}

async fn events_or_error(response: reqwest::Response) -> Result<Vec<(u64, Value)>, i64> {
    if response.headers()["content-type"] == "application/json" {
        let body: Value = response.json().await.unwrap();
        return Err(body["error"]["code"].as_i64().unwrap());
    }
    Ok(events(response).await)
}

async fn push_notifications(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let receiver = Receiver::start(&SECRET).await;
    let token = client(&server).await;
    let mut params = send_params("m-1", "tell me later");
    params["configuration"]["taskPushNotificationConfig"] = json!({
        "url": receiver.url("/a2a-hook"), "token": "tok-123",
        "authentication": {"scheme": "Bearer", "credentials": "hook-secret"}
    });
    let sent = result(&server, &token, "SendMessage", params).await;
    let task_id = sent["task"]["id"].as_str().unwrap().to_owned();
    let configs =
        result(&server, &token, "ListTaskPushNotificationConfigs", json!({"taskId": task_id})).await;
    let config = &configs["configs"][0];
    assert_eq!(
        (config["url"].as_str(), config["token"].as_str()),
        (Some(receiver.url("/a2a-hook").as_str()), Some("tok-123"))
    );
    assert!(
        config["authentication"].get("credentials").is_none(),
        "credentials are never answered: {config}"
    );
    let refused = error(
        &server,
        &token,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task_id, "url": "ftp://x/"}),
    )
    .await;
    assert_eq!(refused["data"][1]["fieldViolations"][0]["field"], "params.url", "{refused}");

    run_agent(&server, answer("pushed")).await;
    let hooks = wait_for("the completed task's notification", || {
        let hooks = receiver.hints("/a2a-hook");
        hooks
            .iter()
            .any(|h| h.json()["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
            .then_some(hooks)
    })
    .await;
    let kinds: Vec<String> = hooks.iter().map(|h| kind(&h.json())).collect();
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("statusUpdate:TASK_STATE_COMPLETED"),
        "in order: {kinds:?}"
    );
    let last = hooks.last().unwrap();
    assert_eq!(last.header("authorization"), Some("Bearer hook-secret"));
    assert_eq!(last.header("x-a2a-notification-token"), Some("tok-123"));
    assert_eq!(last.header("content-type"), Some("application/a2a+json"));
    // Signed with a key any receiver that knows its token makes: SHA-256 of a label and the token.
    use sha2::Digest as _;
    let key: [u8; 32] = sha2::Sha256::new()
        .chain_update(b"agent-inbox a2a push v1\0")
        .chain_update(b"tok-123")
        .finalize()
        .into();
    let config_id = config["id"].as_str().unwrap();
    assert_eq!(verify_with(last, &[(config_id, &key)]).as_deref(), Ok(config_id), "signed");

    let id = config["id"].as_str().unwrap();
    let got =
        result(&server, &token, "GetTaskPushNotificationConfig", json!({"taskId": task_id, "id": id})).await;
    assert_eq!(got["id"], id);
    assert_eq!(
        result(&server, &token, "DeleteTaskPushNotificationConfig", json!({"taskId": task_id, "id": id}))
            .await,
        json!({})
    );
    assert_eq!(
        result(&server, &token, "DeleteTaskPushNotificationConfig", json!({"taskId": task_id, "id": id}))
            .await,
        json!({})
    );
    assert_eq!(
        error(&server, &token, "GetTaskPushNotificationConfig", json!({"taskId": task_id, "id": id})).await["code"],
        -32001
    );
    server.stop().await;
}
