//! A node's limits on streams: `streams_max` refuses a stream past it with `503
//! streams_at_capacity` and `Retry-After` (never a hang), and a client that stops reading is
//! disconnected after `write_stall_timeout` instead of holding its slots for ever. Neither
//! depends on the database, so they run on SQLite only.

use std::time::{Duration, Instant};

use inbox_conformance::Backend;
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

use crate::harness::{TestServer, assert_problem, metric, read};
use crate::stream_clients::{HINT_DEADLINE, Sse, ws_connect};

async fn wait_for_metric(server: &TestServer, series: &str, value: f64, within: Duration) {
    let deadline = Instant::now() + within;
    while metric(server, series).await != value {
        assert!(Instant::now() < deadline, "{series} never became {value}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_streams_max_a_stream_is_refused_with_503_and_retry_after() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.limits.streams_max = 2).await;
    let (alpha, beta, gamma) = (
        server.agent("t1", "agent_alpha").await,
        server.agent("t1", "agent_beta").await,
        server.agent("t1", "agent_gamma").await,
    );
    let first = Sse::open(&server, "/v1/streams/sse", Some(&alpha), &[]).await;
    let _second = ws_connect(&server, &beta).await;

    let refused = server.request(Method::GET, "/v1/streams/sse", Some(&gamma), None).send().await.unwrap();
    let retry_after = refused.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let refused = read(refused).await;
    assert_problem(&refused, StatusCode::SERVICE_UNAVAILABLE, "streams_at_capacity");
    assert_eq!(retry_after.as_deref(), Some("5"), "Retry-After tells the client when to come back");
    let ws_url = server.base.replace("http://", "ws://") + "/v1/streams/ws";
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws_url).unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {gamma}").parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE)
        }
        other => panic!("a WebSocket past streams_max is refused before the upgrade: {other:?}"),
    }
    assert_eq!(
        metric(&server, "agent_inbox_streams_refused_total{transport=\"sse\",code=\"streams_at_capacity\"}")
            .await,
        1.0
    );
    assert_eq!(
        metric(
            &server,
            "agent_inbox_streams_refused_total{transport=\"websocket\",code=\"streams_at_capacity\"}"
        )
        .await,
        1.0
    );
    // A long poll is not a stream: it is still served at capacity.
    let (status, _) =
        server.post("/v1/inbox/poll-after-cursor", &gamma, json!({"after_seq": 0, "wait_seconds": 0})).await;
    assert_eq!(status, StatusCode::OK);

    drop(first);
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}", 0.0, HINT_DEADLINE).await;
    let _third = Sse::open(&server, "/v1/streams/sse", Some(&gamma), &[]).await;
    server.stop().await;
}

/// Opens a stream with a tiny receive window and never reads from it.
async fn stalled(server: &TestServer, request: String) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(2048).unwrap();
    let mut stream =
        socket.connect(server.base.trim_start_matches("http://").parse().unwrap()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_reads_nothing_is_disconnected_after_the_write_stall_timeout() {
    let stall = Duration::from_secs(1);
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.http.write_stall_timeout = stall;
        // This test publishes as fast as it can; rates are not what it is about.
        c.limits.agent_requests_per_second = 100_000;
        c.limits.agent_requests_burst = 100_000;
        c.limits.tenant_requests_per_second = 100_000;
        c.limits.tenant_requests_burst = 100_000;
    })
    .await;
    let publisher = server.publisher("t1").await;
    let (alpha, beta, gamma) = (
        server.agent("t1", "agent_alpha").await,
        server.agent("t1", "agent_beta").await,
        server.agent("t1", "agent_gamma").await,
    );
    let sse = stalled(
        &server,
        format!("GET /v1/streams/sse HTTP/1.1\r\nhost: test\r\naccept: text/event-stream\r\nauthorization: Bearer {alpha}\r\n\r\n"),
    )
    .await;
    let ws = stalled(
        &server,
        format!(
            "GET /v1/streams/ws HTTP/1.1\r\nhost: test\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
             sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nauthorization: Bearer {beta}\r\n\r\n"
        ),
    )
    .await;
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}", 1.0, HINT_DEADLINE).await;
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"websocket\"}", 1.0, HINT_DEADLINE)
        .await;
    let mut reader = Sse::open(&server, "/v1/streams/sse", Some(&gamma), &[]).await;

    // Hints flow until both stalled streams' buffers are full and stay full past the timeout:
    // the node then drops them, while the client that reads keeps up.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut published = 0u64;
    while metric(&server, "agent_inbox_connections_closed_stalled_total").await < 2.0 {
        assert!(Instant::now() < deadline, "the stalled streams were not dropped within 60 s");
        for _ in 0..20 {
            published += 1;
            server
                .publish(&publisher, &["agent_alpha", "agent_beta", "agent_gamma"], json!({"n": published}))
                .await;
        }
        assert_eq!(reader.wait_for_head(published).await["head_seq"], published, "the reader keeps up");
    }
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"sse\"}", 1.0, HINT_DEADLINE).await;
    wait_for_metric(&server, "agent_inbox_connected_streams{transport=\"websocket\"}", 0.0, HINT_DEADLINE)
        .await;
    // What the stalled clients find when they read again: what was in flight, then the end.
    for mut stream in [sse, ws] {
        let mut total = 0usize;
        let mut chunk = [0u8; 4096];
        loop {
            match tokio::time::timeout(HINT_DEADLINE, stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => total += n,
                Err(_) => panic!("the dropped stream is closed, not left open"),
            }
        }
        assert!(total < 4 * 1024 * 1024, "never more than the socket buffers ({total} bytes)");
    }
    server.stop().await;
}
