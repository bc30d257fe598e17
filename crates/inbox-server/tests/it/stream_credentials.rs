//! How browsers authenticate streams without a bearer token in a URL: single-use stream
//! tickets (valid on any node), the SameSite stream cookie, and subscribe with its recommended
//! transport and session heartbeats.

use futures_util::StreamExt as _;
use inbox_conformance::Backend;
use inbox_server::CallerKind;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};

use crate::harness::{TestServer, assert_problem, both_backends, read};
use crate::stream_clients::{HINT_DEADLINE, Sse};

both_backends!(
    stream_tickets_work_once_on_any_node,
    the_stream_cookie_authenticates_streams_of_this_origin,
    subscribe_recommends_a_transport_and_sessions_stay_alive,
);

async fn stream_tickets_work_once_on_any_node(backend: Backend) {
    let a = TestServer::start_with(backend, |c| c.limits.waiters_per_agent = 2).await;
    let b = a.start_beside(|c| c.limits.waiters_per_agent = 2).await;
    let publisher = a.publisher("t1").await;
    let agent = a.agent("t1", "agent_alpha").await;
    let (status, minted) = a.post("/v1/streams/tickets", &agent, json!({"ttl_seconds": 30})).await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let ticket = minted["ticket"].as_str().unwrap().to_owned();
    assert!(ticket.starts_with("st_") && ticket.len() == 67);
    assert_eq!(minted["expires_in"], 30);
    assert_eq!(minted["sse_url"], format!("/v1/streams/sse?ticket={ticket}"));
    assert!(minted["websocket_url"].as_str().unwrap().starts_with("ws://"), "{minted}");

    // Minted on A, redeemed on B, without any Authorization header.
    let mut stream = Sse::open(&b, minted["sse_url"].as_str().unwrap(), None, &[]).await;
    a.publish(&publisher, &["agent_alpha"], json!({})).await;
    assert_eq!(stream.wait_for_head(1).await["head_seq"], 1);
    let again =
        read(b.request(Method::GET, minted["sse_url"].as_str().unwrap(), None, None).send().await.unwrap())
            .await;
    assert_problem(&again, StatusCode::UNAUTHORIZED, "invalid_ticket");
    let forged = a.call(Method::GET, "/v1/streams/sse?ticket=st_nope", None, None).await;
    assert_problem(&forged, StatusCode::UNAUTHORIZED, "invalid_ticket");
    assert_problem(
        &a.call(Method::GET, "/v1/streams/sse", None, None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );

    // The WebSocket takes a ticket too.
    let (_, for_ws) = a.post("/v1/streams/tickets", &agent, json!({})).await;
    assert_eq!(for_ws["expires_in"], 60);
    let (mut socket, _) =
        tokio_tungstenite::connect_async(for_ws["websocket_url"].as_str().unwrap()).await.unwrap();
    let first = tokio::time::timeout(HINT_DEADLINE, socket.next()).await.unwrap().unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("\"head_seq\":1"), "the head at connect: {first}");

    // Node A's two slots for this agent: the WebSocket and one more stream. A third is refused.
    let second = Sse::open(&a, "/v1/streams/sse", Some(&agent), &[]).await;
    let full = a.call(Method::GET, "/v1/streams/sse", Some(&agent), None).await;
    assert_problem(&full, StatusCode::TOO_MANY_REQUESTS, "too_many_waiters");
    drop((socket, second));

    let no_scope = a.token("t1", "agent_alpha", CallerKind::Agent, "inbox.poll").await;
    assert_problem(
        &a.post("/v1/streams/tickets", &no_scope, json!({})).await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );
    assert_problem(
        &a.call(Method::GET, "/v1/streams/sse", Some(&no_scope), None).await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );
    assert_problem(
        &a.post("/v1/streams/tickets", &agent, json!({"ttl_seconds": 61})).await,
        StatusCode::BAD_REQUEST,
        "invalid_field",
    );
    assert_problem(
        &a.post("/v1/streams/tickets", &agent, json!({"session_id": "sess_unknown"})).await,
        StatusCode::NOT_FOUND,
        "session_not_found",
    );
    drop(stream);
    b.stop().await;
    a.stop().await;
}

async fn the_stream_cookie_authenticates_streams_of_this_origin(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", "agent_alpha").await;
    let response =
        server.request(Method::POST, "/v1/streams/cookie", Some(&agent), None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=900"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let (_, body) = read(response).await;
    assert!(body.get("ticket").is_none(), "the credential is only in the cookie: {body}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    server.publish(&publisher, &["agent_alpha"], json!({})).await;
    for _ in 0..2 {
        let mut stream = Sse::open(&server, "/v1/streams/sse", None, &[("cookie", &cookie)]).await;
        assert_eq!(stream.next_hint(HINT_DEADLINE).await.unwrap()["head_seq"], 1, "reusable, for reconnects");
    }
    let ws_url = server.base.replace("http://", "ws://") + "/v1/streams/ws";
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("cookie", cookie.parse().unwrap());
    request.headers_mut().insert("origin", "https://evil.example".parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), StatusCode::FORBIDDEN),
        other => panic!("a cross-origin cookie WebSocket was accepted: {other:?}"),
    }
    // The same host and port under another scheme is another origin.
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("cookie", cookie.parse().unwrap());
    request.headers_mut().insert("origin", server.base.replace("http://", "https://").parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), StatusCode::FORBIDDEN),
        other => panic!("a cookie WebSocket from another scheme was accepted: {other:?}"),
    }
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("cookie", cookie.parse().unwrap());
    let origin = server.base.clone();
    request.headers_mut().insert("origin", origin.parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_ok(), "same origin is fine");
    let bad = server.call(Method::GET, "/v1/streams/sse", None, None).await;
    assert_problem(&bad, StatusCode::UNAUTHORIZED, "unauthorized");
    let stale = read(
        server
            .request(Method::GET, "/v1/streams/sse", None, None)
            .header("cookie", "agent_inbox_stream=sc_00")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_problem(&stale, StatusCode::UNAUTHORIZED, "invalid_stream_cookie");
    server.stop().await;
}

async fn subscribe_recommends_a_transport_and_sessions_stay_alive(backend: Backend) {
    let server = TestServer::start(backend).await;
    let agent = server.agent("t1", "agent_alpha").await;
    let subscribe = |transports: Value, token: String| {
        let server = &server;
        async move {
            server
                .post("/v1/agent-sessions/subscribe", &token, json!({"device_id": "desktop_01", "supported_transports": transports, "last_seen_seq": 0}))
                .await
        }
    };
    let (status, all) = subscribe(json!(["sse", "websocket", "long-poll", "poll"]), agent.clone()).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let session = all["session_id"].as_str().unwrap().to_owned();
    assert_eq!(all["recommended_transport"], "sse");
    assert_eq!(all["sse_url"], format!("/v1/streams/sse?session_id={session}"));
    let ws = all["websocket_url"].as_str().unwrap();
    assert!(
        ws.starts_with("ws://127.0.0.1:") && ws.ends_with(&format!("/v1/streams/ws?session_id={session}")),
        "{ws}"
    );
    assert_eq!(all["heartbeat_interval_seconds"], 30);
    assert_eq!(
        subscribe(json!(["websocket", "poll"]), agent.clone()).await.1["recommended_transport"],
        "websocket"
    );
    assert_eq!(
        subscribe(json!(["long-poll", "poll"]), agent.clone()).await.1["recommended_transport"],
        "long-poll"
    );
    let polling_only = server.token("t1", "agent_alpha", CallerKind::Agent, "inbox.poll").await;
    let (_, no_streams) = subscribe(json!(["sse", "long-poll"]), polling_only).await;
    assert_eq!(no_streams["recommended_transport"], "long-poll", "no stream.subscribe, no SSE");
    assert!(no_streams["sse_url"].is_null());

    // The stream follows the session URL, and keeps the session alive.
    let mut stream = Sse::open(&server, all["sse_url"].as_str().unwrap(), Some(&agent), &[]).await;
    stream.next(HINT_DEADLINE).await.unwrap();
    let transport = server
        .db
        .scalar("SELECT COUNT(*) AS n FROM agent_session WHERE session_id = ? AND transport = 'sse' AND status = 'active'", &[&session])
        .await;
    assert_eq!(transport, 1);
    let (status, beat) = server
        .post(&format!("/v1/agent-sessions/{session}/heartbeat"), &agent, json!({"last_seen_seq": 0}))
        .await;
    assert_eq!(status, StatusCode::OK, "{beat}");
    assert_eq!(
        (beat["status"].as_str(), beat["heartbeat_interval_seconds"].as_u64()),
        (Some("active"), Some(30))
    );
    let empty =
        server.request(Method::POST, &format!("/v1/agent-sessions/{session}/heartbeat"), Some(&agent), None);
    assert_eq!(empty.send().await.unwrap().status(), StatusCode::OK, "the body is optional");
    let other = server.agent("t1", "agent_beta").await;
    let stranger = server.post(&format!("/v1/agent-sessions/{session}/heartbeat"), &other, json!({})).await;
    assert_problem(&stranger, StatusCode::NOT_FOUND, "session_not_found");
    let theirs =
        server.call(Method::GET, &format!("/v1/streams/sse?session_id={session}"), Some(&other), None).await;
    assert_problem(&theirs, StatusCode::NOT_FOUND, "session_not_found");
    let bad = server.post("/v1/agent-sessions/bad%20id/heartbeat", &agent, json!({})).await;
    assert_problem(&bad, StatusCode::BAD_REQUEST, "invalid_field");
    drop(stream);
    server.stop().await;
}
