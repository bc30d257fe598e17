//! `login`, then `wait` and `listen` on the stored profile: the refresh token is rotated on
//! every use, kept in a 0600 file here (no OS secret store in tests), and never printed.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use inbox_server::CallerKind;
use serde_json::json;

use crate::support::{AGENT, BIN, Listen, Server, TempDir, wait_until};

/// Runs the binary with `home` as its config directory and the file secret store.
pub fn agent_inbox(home: &TempDir, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env("AGENT_INBOX_HOME", &home.0)
        .env("AGENT_INBOX_SECRET_STORE", "file")
        .env_remove("AGENT_INBOX_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_keeps_a_rotating_refresh_token_that_wait_and_listen_use() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let (agent, refresh) =
        server.token(AGENT, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, true).await;
    let refresh = refresh.unwrap();
    let home = TempDir::new("login");
    let token_file = home.path("default.refresh-token");

    let out = agent_inbox(&home, &["login", "--server", &server.base], Some(&format!("{refresh}\n")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("as agent_alpha (tenant t1)"), "{stdout}");
    assert!(!stdout.contains(&refresh));
    let stored = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    assert_ne!(stored, refresh, "login spends the pasted token and keeps its successor");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // `wait` refreshes with the stored token (rotating it) and finds nothing.
    let out = agent_inbox(&home, &["wait", "--timeout", "1s"], None);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let rotated = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    assert_ne!(rotated, stored, "every refresh stores the next token");

    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    let out = agent_inbox(&home, &["wait", "--timeout", "20s"], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1 event(s) waiting");

    // `listen` on the profile handles it; its logs never show a token.
    let mut command = Command::new(BIN);
    command
        .args(["listen", "--log-json", "--exec"])
        .arg(format!("echo \"$AGENT_INBOX_EVENT_ID\" >> '{}'", home.path("handled").display()))
        .args(crate::support::QUICK)
        .env("AGENT_INBOX_HOME", &home.0)
        .env("AGENT_INBOX_LOG", "debug")
        .env_remove("AGENT_INBOX_TOKEN");
    let mut listen = Listen::spawn_command(command);
    wait_until("the event is handled", Duration::from_secs(20), || async {
        home.lines("handled") == vec![id.clone()]
    })
    .await;
    let status = listen.terminate();
    assert!(status.success(), "SIGTERM stops listen cleanly: {status:?}\n{}", listen.dump());
    let log = listen.dump();
    let current = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    for secret in [&refresh, &stored, &rotated, &current, &agent] {
        assert!(!log.contains(secret.as_str()), "a token leaked into the log");
    }
    assert_ne!(current, rotated);

    // The pasted token worked once; presenting it again is reuse, which revokes the login.
    let spent = server
        .client
        .post(format!("{}/v1/auth/refresh", server.base))
        .json(&json!({"refresh_token": refresh}))
        .send()
        .await
        .unwrap();
    assert_eq!(spent.status(), 401, "the pasted token works once");

    let out = agent_inbox(&home, &["logout"], None);
    assert!(out.status.success());
    assert!(!token_file.exists());
    let out = agent_inbox(&home, &["wait", "--timeout", "1s"], None);
    assert_eq!(out.status.code(), Some(2), "an error is not 'no work'");
    assert!(String::from_utf8_lossy(&out.stderr).contains("agent-inbox login"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_as_soon_as_work_arrives() {
    let server = Server::start(&[]).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let home = TempDir::new("wait");
    let mut waiting = Command::new(BIN)
        .args(["wait", "--server", &server.base, "--timeout", "60s"])
        .env("AGENT_INBOX_HOME", &home.0)
        .env("AGENT_INBOX_TOKEN", &agent)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The long poll is open once the service counts a waiter; then publish.
    wait_until("wait holds a long poll", Duration::from_secs(20), || async {
        let metrics =
            server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
        metrics.lines().any(|l| {
            l.starts_with("agent_inbox_connected_streams") && l.contains("long-poll") && !l.ends_with(" 0")
        })
    })
    .await;
    let started = std::time::Instant::now();
    server.publish(&publisher, AGENT, "task", json!({})).await;
    let status = tokio::task::spawn_blocking(move || waiting.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(10), "woken by the publish, not a timeout");
}
