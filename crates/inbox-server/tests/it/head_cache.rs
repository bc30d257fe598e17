//! The head cache: a conditional head check answers `304` from the node's memory while its
//! notifier is caught up, a publish on another node ends those answers within the notifier's
//! delay, and a node whose notifier cannot read signals answers every check from the database.

use std::time::{Duration, Instant};

use inbox_conformance::proxy::{Forwarder, Rewrite};
use inbox_conformance::{Backend, Harness};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{TestServer, both_backends, metric};
use crate::stream_clients::HINT_DEADLINE;

const AGENT: &str = "agent_heads";
const FROM_MEMORY: &str = "agent_inbox_head_checks_from_memory_total";

both_backends!(a_publish_on_one_node_ends_the_memory_304s_of_another);

/// The head's entity tag, from an unconditional check.
async fn etag(server: &TestServer, agent: &str) -> String {
    let response = server.request(Method::GET, "/v1/inbox/head", Some(agent), None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.headers()["etag"].to_str().unwrap().to_owned()
}

/// The status of a check naming `etag`.
async fn check(server: &TestServer, agent: &str, etag: &str) -> StatusCode {
    let request =
        server.request(Method::GET, "/v1/inbox/head", Some(agent), None).header("if-none-match", etag);
    request.send().await.unwrap().status()
}

async fn a_publish_on_one_node_ends_the_memory_304s_of_another(backend: Backend) {
    let a = TestServer::start(backend).await;
    let b = a.start_beside(|_| {}).await;
    let (publisher, agent) = (a.publisher("t1").await, a.agent("t1", AGENT).await);
    a.publish(&publisher, &[AGENT], json!({"n": 1})).await;
    let first = etag(&b, &agent).await;
    // Once b's notifier has vouched for its cache, b answers from memory.
    let deadline = Instant::now() + HINT_DEADLINE;
    while metric(&b, FROM_MEMORY).await == 0.0 {
        assert_eq!(check(&b, &agent, &first).await, StatusCode::NOT_MODIFIED);
        assert!(Instant::now() < deadline, "b never answered a head check from memory");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answered = metric(&b, FROM_MEMORY).await;
    for _ in 0..5 {
        assert_eq!(check(&b, &agent, &first).await, StatusCode::NOT_MODIFIED);
    }
    assert_eq!(metric(&b, FROM_MEMORY).await, answered + 5.0, "each check answered from memory");

    // A publish on a: b stops answering 304 within the notifier's delay.
    a.publish(&publisher, &[AGENT], json!({"n": 2})).await;
    let published = Instant::now();
    while check(&b, &agent, &first).await == StatusCode::NOT_MODIFIED {
        assert!(published.elapsed() < HINT_DEADLINE, "b kept answering 304 for a head that moved");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = etag(&b, &agent).await;
    assert_ne!(first, second);
    // And a publish on b itself is known at once, without the notifier.
    b.publish(&b.publisher("t1").await, &[AGENT], json!({"n": 3})).await;
    assert_eq!(check(&b, &agent, &second).await, StatusCode::OK, "b's own publish moved its cached head");
    b.stop().await;
    a.stop().await;
}

/// Node b reaches the database through a forwarder that breaks the notifier's reads of
/// `outbox_signal` (and nothing else): its notifier never catches up, so its cache is never
/// trusted, and a publish on a is seen by b's very next check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_notifier_is_cut_off_answers_from_the_database() {
    let db = std::sync::Arc::new(Harness::new(Backend::MySql).await);
    let a = TestServer::start_on_harness(db.clone()).await;
    let cut = Rewrite {
        from: " FROM outbox_signal WHERE outbox_id",
        to: " FROM outbox_signal_cut WHERE outbox_id",
    };
    let forwarder = Forwarder::rewriting(db.server_addr(), cut).await;
    let url = db.url_through(forwarder.addr);
    let b = a.start_beside(|config| config.database.url = url).await;
    let (publisher, agent) = (a.publisher("t1").await, a.agent("t1", AGENT).await);
    a.publish(&publisher, &[AGENT], json!({"n": 1})).await;
    let mut tag = etag(&b, &agent).await;
    for n in 2..6 {
        for _ in 0..3 {
            assert_eq!(check(&b, &agent, &tag).await, StatusCode::NOT_MODIFIED);
        }
        a.publish(&publisher, &[AGENT], json!({"n": n})).await;
        assert_eq!(check(&b, &agent, &tag).await, StatusCode::OK, "publish {n} seen at once");
        tag = etag(&b, &agent).await;
    }
    assert_eq!(metric(&b, FROM_MEMORY).await, 0.0, "nothing answered from an untrusted cache");
    assert!(metric(&b, "agent_inbox_signals_read_total").await == 0.0, "the notifier really was cut off");
    b.stop().await;
    a.stop().await;
}
