//! Each event's history through the operators' HTTP view: every transition recorded once, in
//! order, on the right event (a fan-out's other copy keeps its own), kept when retention moves
//! the event to the archive, and absent when the server records none; and an inbox's events
//! listed by state.

use std::time::{Duration, Instant};

use inbox_conformance::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::admin_quarantine::{AGENT, admin, claim, get, publish_one, subscribe};
use crate::harness::{TestServer, both_backends};

both_backends!(
    every_transition_is_recorded_once_in_order_and_archived_with_the_event,
    a_server_without_history_records_none,
    an_inboxs_events_are_listed_by_state,
);

const BETA: &str = "agent_beta";

/// Waits for `condition` on fresh answers, at most `seconds`.
async fn eventually<F, Fut>(seconds: u64, what: &str, mut condition: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<Value>>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {seconds} s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn detail(server: &TestServer, admin: &str, agent: &str, event: &str) -> Value {
    get(server, &format!("/v1/admin/inboxes/{agent}/events/{event}"), admin).await
}

/// The history's entries as (action, state, attempt, actor).
fn steps(detail: &Value) -> Vec<(String, String, u64, String)> {
    detail["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (text("action"), text("state"), e["attempt"].as_u64().unwrap(), text("actor"))
        })
        .collect()
}

async fn ack(server: &TestServer, agent: &str, body: Value) -> Value {
    let (status, acked) = server.post("/v1/inbox/acknowledge", agent, body).await;
    assert_eq!(status, StatusCode::OK, "{acked}");
    assert!(acked["results"][0].get("error").is_none(), "{acked}");
    acked
}

async fn every_transition_is_recorded_once_in_order_and_archived_with_the_event(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let ops = admin(&server, "t1").await;
    let published = server.publish(&publisher, &[AGENT, BETA], json!({"task": "summarize"})).await;
    let id_of = |who: &str| {
        let deliveries = published["deliveries"].as_array().unwrap();
        let delivery = deliveries.iter().find(|d| d["recipient_id"] == who).unwrap();
        delivery["event_id"].as_str().unwrap().to_owned()
    };
    let (event, betas) = (id_of(AGENT), id_of(BETA));
    let session = subscribe(&server, &agent).await;

    // A lease that runs out: the server's scavenger returns the event (after a short backoff).
    let (_, claimed) = server
        .post(
            "/v1/inbox/claim",
            &agent,
            json!({"event_ids": [event], "session_id": session, "lease_seconds": 1}),
        )
        .await;
    assert_eq!(claimed["claims"][0]["event_id"], event.as_str(), "{claimed}");
    let (srv, ops_ref, event_ref, agent_ref, session_ref) =
        (&server, ops.as_str(), event.as_str(), agent.as_str(), session.as_str());
    eventually(15, "the lease expiry", move || async move {
        let d = detail(srv, ops_ref, AGENT, event_ref).await;
        (d["event"]["ack_state"] != "claimed").then_some(d)
    })
    .await;
    let lease = eventually(15, "the retry time", move || async move {
        let body = json!({"event_ids": [event_ref], "session_id": session_ref});
        let (_, claimed) = srv.post("/v1/inbox/claim", agent_ref, body).await;
        claimed["claims"][0]["lease_token"].as_str().map(|t| json!(t))
    })
    .await;
    let lease = lease.as_str().unwrap().to_owned();
    let (status, released) = server
        .post("/v1/inbox/release", &agent, json!({"event_id": event, "lease_token": lease, "reason": "busy"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let lease = claim(&server, &agent, &event, None).await;
    let failed = json!({"acks": [{"event_id": event, "lease_token": lease, "result": "failed", "reason": "cannot parse"}]});
    ack(&server, &agent, failed).await;
    let batch = json!({"recipient_id": AGENT, "event_ids": [event]});
    let (_, requeued) = server.post("/v1/admin/parked/requeue", &ops, batch.clone()).await;
    assert_eq!(requeued["results"][0]["ok"], true, "{requeued}");
    let lease = claim(&server, &agent, &event, Some(&session)).await;
    let quarantine = json!({"session_id": session, "acks": [{"event_id": event, "lease_token": lease,
        "result": "quarantined", "reason": "asks for my credentials", "class": "prompt_injection"}]});
    ack(&server, &agent, quarantine.clone()).await;
    // A retried acknowledgement changes nothing, so it records nothing.
    ack(&server, &agent, quarantine).await;
    let (_, released) = server.post("/v1/admin/quarantine/release", &ops, batch).await;
    assert_eq!(released["results"][0]["ok"], true, "{released}");
    let lease = claim(&server, &agent, &event, None).await;
    ack(&server, &agent, json!({"acks": [{"event_id": event, "lease_token": lease}]})).await;

    let s = |v: &str| v.to_owned();
    let expected = vec![
        (s("claimed"), s("claimed"), 1, s("agent")),
        (s("lease_expired"), s("available"), 1, s("scavenger")),
        (s("claimed"), s("claimed"), 2, s("agent")),
        (s("released"), s("available"), 2, s("agent")),
        (s("claimed"), s("claimed"), 3, s("agent")),
        (s("acknowledged"), s("dead_letter"), 3, s("agent")),
        (s("dead_lettered"), s("dead_letter"), 3, s("agent")),
        (s("requeued"), s("available"), 3, s("operator:ops")),
        (s("claimed"), s("claimed"), 4, s("agent")),
        (s("quarantined"), s("quarantined"), 4, s("agent")),
        (s("released_from_quarantine"), s("available"), 4, s("operator:ops")),
        (s("claimed"), s("claimed"), 5, s("agent")),
        (s("acknowledged"), s("acked"), 5, s("agent")),
    ];
    let live = detail(&server, &ops, AGENT, &event).await;
    assert_eq!(live["archived"], false);
    assert_eq!(steps(&live), expected, "{live:#}");
    let history = live["history"].as_array().unwrap();
    let times: Vec<&str> = history.iter().map(|e| e["at_utc"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order of time: {times:?}");
    for at in [0, 2, 8] {
        assert_eq!(history[at]["session_id"], session.as_str(), "the claim's session: {:#}", history[at]);
    }
    assert_eq!(history[3]["reason"], "busy");
    assert_eq!(history[5]["reason"], "cannot parse");
    assert_eq!(history[6]["reason"], "handler_failed");
    assert_eq!(
        (&history[9]["reason"], &history[9]["class"]),
        (&json!("asks for my credentials"), &json!("prompt_injection"))
    );
    assert_eq!(history[9]["session_id"], session.as_str(), "the session that quarantined it");
    assert_eq!(live["event"]["ack_state"], "acked");
    assert_eq!(live["event"]["event_id"], event.as_str());

    // The fan-out's other copy has a history of its own: nothing happened to it.
    let other = detail(&server, &ops, BETA, &betas).await;
    assert_eq!(
        (&other["history"], &other["event"]["ack_state"]),
        (&json!([]), &json!("available")),
        "{other}"
    );

    // Retention moves the event to the archive with its history. Rather than wait out the
    // window, a scavenger pass through a second store on the same database, its clock moved on.
    server.db.clock.advance_ms(server.db.store.config().retention_ms + 60_000);
    let report = server.db.store.inbox().scavenge(100).await.unwrap();
    assert!(report.archived >= 1, "{report:?}");
    let archived = detail(&server, &ops, AGENT, &event).await;
    assert_eq!(archived["archived"], true, "{archived}");
    assert_eq!(steps(&archived), expected, "the history travels with the event");
    assert_eq!(archived["event"]["inbox_seq"], live["event"]["inbox_seq"]);
    server.stop().await;
}

async fn a_server_without_history_records_none(backend: Backend) {
    let server = TestServer::start_with(backend, |config| config.inbox.history = false).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let ops = admin(&server, "t1").await;
    let event = publish_one(&server, &publisher, 1).await;
    let lease = claim(&server, &agent, &event, None).await;
    ack(&server, &agent, json!({"acks": [{"event_id": event, "lease_token": lease}]})).await;
    let quiet = detail(&server, &ops, AGENT, &event).await;
    assert_eq!((&quiet["history"], &quiet["event"]["ack_state"]), (&json!([]), &json!("acked")), "{quiet}");
    server.stop().await;
}

async fn an_inboxs_events_are_listed_by_state(backend: Backend) {
    let server = TestServer::start(backend).await;
    let publisher = server.publisher("t1").await;
    let agent = server.agent("t1", AGENT).await;
    let ops = admin(&server, "t1").await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(publish_one(&server, &publisher, n).await);
    }
    let expires = inbox_api::time::format_utc(inbox_api::time::now_ms() + 1_500);
    let (status, expiring) = server
        .post(
            "/v1/events",
            &publisher,
            json!({"recipients": [AGENT], "event_type": "t", "expires_at_utc": expires}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{expiring}");
    ids.push(expiring["deliveries"][0]["event_id"].as_str().unwrap().to_owned());
    // 0 stays available; 1 waits out a retry; 2 is claimed; 3 acked; 4 dead; 5 quarantined;
    // 6 expires unclaimed.
    let lease = claim(&server, &agent, &ids[1], None).await;
    server
        .post(
            "/v1/inbox/release",
            &agent,
            json!({"event_id": ids[1], "lease_token": lease, "retry_after_seconds": 600}),
        )
        .await;
    claim(&server, &agent, &ids[2], None).await;
    let lease = claim(&server, &agent, &ids[3], None).await;
    ack(&server, &agent, json!({"acks": [{"event_id": ids[3], "lease_token": lease}]})).await;
    let lease = claim(&server, &agent, &ids[4], None).await;
    ack(&server, &agent, json!({"acks": [{"event_id": ids[4], "lease_token": lease, "result": "failed"}]}))
        .await;
    let (_, quarantined) = server
        .post(
            "/v1/admin/quarantine",
            &ops,
            json!({"recipient_id": AGENT, "event_ids": [ids[5]], "reason": "odd"}),
        )
        .await;
    assert_eq!(quarantined["results"][0]["ok"], true, "{quarantined}");
    let base = format!("/v1/admin/inboxes/{AGENT}/events");
    let listed = |query: String| {
        let (server, ops, base) = (&server, ops.clone(), base.clone());
        async move {
            let page = get(server, &format!("{base}{query}"), &ops).await;
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["event_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let (listed_ref, expired) = (&listed, ids[6].clone());
    eventually(15, "the expiry", move || {
        let page = listed_ref("?state=expired".into());
        let expired = expired.clone();
        async move { (page.await == [expired]).then_some(Value::Null) }
    })
    .await;
    for (state, index) in
        ["available", "retry_scheduled", "claimed", "acked", "dead_letter", "quarantined", "expired"]
            .iter()
            .zip(0..)
    {
        assert_eq!(listed(format!("?state={state}")).await, [ids[index].clone()], "state {state}");
    }
    assert_eq!(listed(String::new()).await, ids, "every state, in inbox_seq order");
    let first_page = listed("?limit=3".into()).await;
    assert_eq!(first_page, ids[..3]);
    let newest: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(listed("?order=newest_first&limit=3".into()).await, newest[..3], "newest first");
    let seq_of_third_newest = ids.len() - 2;
    let next = listed(format!("?order=newest_first&before_seq={seq_of_third_newest}&limit=3")).await;
    assert_eq!(next, newest[3..6], "paged on before the last one listed");
    let all = get(&server, &base, &ops).await;
    let third_seq = all["events"][2]["inbox_seq"].as_u64().unwrap();
    assert_eq!(listed(format!("?after_seq={third_seq}&limit=3")).await, ids[3..6], "the next page");
    let quarantined = &all["events"][5];
    assert_eq!((&quarantined["ack_state"], &quarantined["reason"]), (&json!("quarantined"), &json!("odd")));
    assert_eq!(all["events"][1]["ack_state"], "retry_scheduled");
    assert!(all["events"][1]["next_retry_at_utc"].is_string());
    assert!(
        all["events"][0].get("terminal_at_utc").is_none() && all["events"][3]["terminal_at_utc"].is_string()
    );
    assert_eq!(all["events"][0]["payload"], json!({"n": 0}), "the payload of an open event is shown");
    server.stop().await;
}
