//! Shared by the binary's tests: start `agent-inbox serve` on port 0, wait for it, call it.

#![allow(dead_code)]

pub mod mariadb;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct Server {
    pub child: Child,
    pub base: String,
}

/// Starts `agent-inbox serve` on port 0 (with extra flags) and reads the address it prints.
pub fn start(database_url: &str, flags: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", database_url, "--lease-default", "2s"])
        .args(flags)
        .env("AGENT_INBOX_SCAVENGE_INTERVAL", "200ms")
        .env("AGENT_INBOX_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agent-inbox serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines.next().expect("the server prints its address").expect("read stderr");
        if let Some(rest) = line.strip_prefix("agent-inbox listening on ") {
            break rest.split_whitespace().next().expect("an address").to_owned();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, base }
}

pub async fn wait_ready(client: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server at {base} did not become ready");
}

pub async fn post(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let response = client
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// Every event of the agent's inbox, paging after the cursor.
pub async fn poll_all(client: &reqwest::Client, base: &str, token: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) = post(
            client,
            base,
            token,
            "/v1/inbox/poll-after-cursor",
            json!({"after_seq": after, "limit": 500}),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        events.extend(page["events"].as_array().unwrap().iter().cloned());
        after = page["next_cursor"].as_u64().unwrap();
        if page["more_available"] != true {
            return events;
        }
    }
}
