//! Shared by the binary's tests: start `agent-inbox serve` (through `inbox-testkit`, the one
//! way tests start servers), wait for it, issue tokens with the binary, call it; and what the
//! fault tests share: a private mariadbd, a private Galera cluster, network namespaces and cuts,
//! and a workload with the checker over its history.

#![allow(dead_code)]

pub mod galera;
pub mod mariadb;
pub mod network;
pub mod workload;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use inbox_testkit::{Serve, ServeChild};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_agent-inbox");

/// Starts `agent-inbox serve` on port 0 (with extra flags) and reads the address it prints.
/// `agent-inbox serve` on a SQLite file (its secrets key file beside it, made at the first
/// start) or the harness's database (with the harness's key file).
pub fn start(database_url: &str, flags: &[&str]) -> ServeChild {
    serve(Serve::new(BIN, database_url), flags)
}

/// `agent-inbox serve` on the harness's database, with its secrets key file.
pub fn start_on(db: &inbox_conformance::Harness, flags: &[&str]) -> ServeChild {
    serve(Serve::new(BIN, &db.url).arg_path("--secrets-key-file", &db.secrets_key_file), flags)
}

fn serve(serve: Serve, flags: &[&str]) -> ServeChild {
    serve
        .args(["--lease-default", "2s"])
        .args(flags)
        .env("AGENT_INBOX_SCAVENGE_INTERVAL", "200ms")
        .env("AGENT_INBOX_LOG", "warn")
        .spawn()
        .expect("start agent-inbox serve")
}

pub async fn wait_ready(client: &reqwest::Client, base: &str) {
    inbox_testkit::wait_ready(client, base, Duration::from_secs(30)).await;
}

/// An access token issued by the binary (`token issue`) for `subject` of tenant `acme`.
pub fn issue_token(database_url: &str, secrets_key_file: &Path, subject: &str, kind: &str) -> String {
    let out = Command::new(BIN)
        .args(["token", "issue", "--tenant", "acme", "--subject", subject, "--kind", kind])
        .args(["--database-url", database_url, "--secrets-key-file"])
        .arg(secrets_key_file)
        .output()
        .expect("token issue runs");
    assert!(out.status.success(), "token issue: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `dir/secrets.key`, made by `agent-inbox keys new-secrets-key` the first time: the key file
/// the nodes of a test on its own MariaDB share.
pub fn secrets_key_file(dir: &Path) -> PathBuf {
    let path = dir.join("secrets.key");
    if !path.exists() {
        let out =
            Command::new(BIN).args(["keys", "new-secrets-key"]).output().expect("keys new-secrets-key runs");
        assert!(out.status.success(), "keys new-secrets-key: {}", String::from_utf8_lossy(&out.stderr));
        inbox_conformance::write_private(&path, &out.stdout);
    }
    path
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
