//! The binary as an operator uses it: `token issue` prints working tokens, bad settings are
//! named, and SIGTERM lets a waiting long poll answer before the process exits cleanly.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use common::{post, start, start_on, wait_ready};

fn agent_inbox(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agent-inbox")).args(args).output().expect("run agent-inbox")
}

fn temp_database(name: &str) -> (String, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("agent-inbox-cli-{name}-{}.db", std::process::id()));
    (format!("sqlite://{}", path.display()), path)
}

fn remove_database(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_tokens_work_and_refresh_rotates() {
    let (url, path) = temp_database("tokens");
    let issued = agent_inbox(&[
        "token",
        "issue",
        "--database-url",
        &url,
        "--tenant",
        "demo",
        "--subject",
        "agent_alpha",
        "--refresh",
    ]);
    assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
    let stdout = String::from_utf8(issued.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "an access token and a refresh token: {stdout}");
    assert_eq!(lines[0].split('.').count(), 3, "a JWT");
    assert!(lines[1].starts_with("rt_"));

    let mut server = start(&url, &[]);
    let client = reqwest::Client::new();
    wait_ready(&client, &server.base).await;
    let head =
        client.get(format!("{}/v1/inbox/head", server.base)).bearer_auth(lines[0]).send().await.unwrap();
    assert_eq!(head.status(), 200);
    let refreshed = client
        .post(format!("{}/v1/auth/refresh", server.base))
        .json(&json!({"refresh_token": lines[1]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refreshed.status(), 200);
    let publisher = agent_inbox(&[
        "token",
        "issue",
        "--database-url",
        &url,
        "--tenant",
        "demo",
        "--subject",
        "app",
        "--kind",
        "publisher",
    ]);
    let publisher = String::from_utf8(publisher.stdout).unwrap().trim().to_owned();
    let body = json!({"recipients": ["agent_alpha"], "event_type": "task.assigned"});
    let (status, _) = post(&client, &server.base, &publisher, "/v1/events", body).await;
    assert_eq!(status, 201);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    remove_database(&path);
}

#[test]
fn bad_settings_and_arguments_are_named() {
    let (url, path) = temp_database("bad");
    let out = agent_inbox(&[
        "token",
        "issue",
        "--database-url",
        &url,
        "--tenant",
        "demo",
        "--subject",
        "a",
        "--kind",
        "robot",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kind must be agent, publisher or admin"));
    let out = agent_inbox(&[
        "token",
        "issue",
        "--database-url",
        &url,
        "--tenant",
        "demo",
        "--subject",
        "a",
        "--scope",
        "inbox.everything",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown scope \"inbox.everything\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = agent_inbox(&["serve", "--database-url", &url, "--lease-default", "2h"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lease_default must be between"));
    let out = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["migrate", "--database-url", &url])
        .env("AGENT_INBOX_RETENTION", "forever")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"forever\" is not a duration"));
    remove_database(&path);
}

/// A fresh empty directory under the system's temporary one.
fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-inbox-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// In a directory without the server's database, an operator command does not make a new
/// one (whose keys would sign tokens the running server refuses): it says where it looked
/// and how to point it at the right one, and creates only when told to.
#[test]
fn operator_commands_refuse_to_create_a_database_silently() {
    let dir = temp_dir("no-database");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
            .args(args)
            .current_dir(&dir)
            .env_remove("AGENT_INBOX_DATABASE_URL")
            .env_remove("AGENT_INBOX_CONFIG")
            .output()
            .unwrap()
    };
    let issue = ["token", "issue", "--tenant", "demo", "--subject", "agent_alpha"];
    for args in [&issue[..], &["keys", "list"], &["keys", "rotate"], &["migrate"]] {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
        let looked_at = dir.join("data/agent-inbox.db");
        assert!(stderr.contains(&looked_at.display().to_string()), "{args:?}: {stderr}");
        assert!(stderr.contains("--database-url") && stderr.contains("--create-database"), "{stderr}");
    }
    assert!(!dir.join("data").exists(), "nothing was created");
    let out = run(&[&issue[..], &["--create-database"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.join("data/agent-inbox.db").exists());
    let out = run(&issue);
    assert!(out.status.success(), "an existing database is used: {}", String::from_utf8_lossy(&out.stderr));
    // A bare number is seconds, as in the server's settings; a misspelt setting is named.
    let out = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args([&issue[..], &["--ttl", "900"]].concat())
        .current_dir(&dir)
        .env("AGENT_INBOX_ACCESS_TOKEN_TTLL", "1h")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("AGENT_INBOX_ACCESS_TOKEN_TTLL is not a setting and is ignored; did you mean AGENT_INBOX_ACCESS_TOKEN_TTL?"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--help` of the operator commands lists only what they use, with a line for every flag
/// and the default scopes spelled out.
#[test]
fn operator_help_lists_only_the_flags_used() {
    for command in [&["migrate"][..], &["token", "issue"], &["keys", "list"], &["keys", "rotate"]] {
        let out = agent_inbox(&[command, &["--help"]].concat());
        let help = String::from_utf8(out.stdout).unwrap();
        for flag in ["--listen", "--lease-default", "--tls-cert", "--cors-origins", "--log-json"] {
            assert!(!help.contains(flag), "{command:?} --help lists {flag}:\n{help}");
        }
        assert!(help.contains("--database-url") && help.contains("--create-database"), "{help}");
    }
    let help = String::from_utf8(agent_inbox(&["token", "issue", "--help"]).stdout).unwrap();
    assert!(help.contains("inbox.poll inbox.claim inbox.ack"), "{help}");
    for command in [&["serve"][..], &["listen"], &["wait"], &["login"], &["service", "install"], &["mcp"]] {
        let help = String::from_utf8(agent_inbox(&[command, &["--help"]].concat()).stdout).unwrap();
        let mut lines = help.lines().peekable();
        while let Some(line) = lines.next() {
            let flag = line.trim_start();
            if flag.starts_with("--") || flag.starts_with("-h") {
                let described = flag.split("  ").filter(|s| !s.trim().is_empty()).count() > 1
                    || lines
                        .peek()
                        .is_some_and(|next| next.starts_with("          ") && !next.trim().starts_with('-'));
                assert!(described, "{command:?}: {flag} has no help line:\n{help}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_waiting_long_polls_and_exits_cleanly() {
    let (url, path) = temp_database("sigterm");
    let token = agent_inbox(&[
        "token",
        "issue",
        "--database-url",
        &url,
        "--tenant",
        "demo",
        "--subject",
        "agent_alpha",
    ]);
    let token = String::from_utf8(token.stdout).unwrap().trim().to_owned();
    let mut server = start(&url, &[]);
    let client = reqwest::Client::new();
    wait_ready(&client, &server.base).await;
    let started = Instant::now();
    let waiting = tokio::spawn({
        let (client, base, token) = (client.clone(), server.base.clone(), token.clone());
        async move {
            post(
                &client,
                &base,
                &token,
                "/v1/inbox/poll-after-cursor",
                json!({"after_seq": 0, "wait_seconds": 25}),
            )
            .await
        }
    });
    // Wait until the long poll is in flight (the node counts it as waiting), then signal.
    let metrics = format!("{}/metrics", server.base);
    let waiting_poll = |text: &str| {
        text.lines().any(|l| {
            l.starts_with("agent_inbox_connected_streams{transport=\"long-poll\"} ") && !l.ends_with(" 0")
        })
    };
    for _ in 0..200 {
        let text = client.get(&metrics).send().await.unwrap().text().await.unwrap();
        if waiting_poll(&text) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let (status, page) = waiting.await.unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the long poll was answered at shutdown, not at its deadline"
    );
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "clean exit: {exit:?}");
    remove_database(&path);
}

/// Logs written to a pipe or a file (a journal, `2> serve.log`) carry no ANSI colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_pipe_have_no_colour_codes() {
    use std::io::{BufRead, BufReader};
    let (url, path) = temp_database("no-colour");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", &url])
        .env("AGENT_INBOX_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (sender, lines) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut base = None;
    while Instant::now() < deadline {
        let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) else {
            if let Some(base) = &base {
                let _ = reqwest::get(format!("{base}/healthz")).await;
            }
            continue;
        };
        if let Some(rest) = line.strip_prefix("agent-inbox listening on ") {
            base = rest.split_whitespace().next().map(str::to_owned);
            let _ = reqwest::get(format!("{}/healthz", base.as_deref().unwrap())).await;
        }
        let done = line.contains("request done");
        seen.push(line);
        if done {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    remove_database(&path);
    assert!(seen.iter().any(|l| l.contains("request done")), "no request log line: {seen:?}");
    assert!(seen.iter().all(|l| !l.contains('\u{1b}')), "colour codes in a piped log: {seen:?}");
}

/// `serve` on an engine whose `FOR UPDATE SKIP LOCKED` does not skip (simulated by a forwarder
/// in front of the real MariaDB that drops the clause) exits at once with a sentence naming the
/// engine and the property, instead of waiting for a database that will never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_an_engine_whose_skip_locked_does_not_skip() {
    use inbox_conformance::proxy::{Forwarder, Rewrite};
    use inbox_conformance::{Backend, Harness};
    let h = Harness::new(Backend::MySql).await;
    let forwarder =
        Forwarder::rewriting(h.server_addr(), Rewrite { from: " FOR UPDATE SKIP LOCKED", to: "" }).await;
    let url = h.url_through(forwarder.addr);
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", &url, "--secrets-key-file"])
        .arg(&h.secrets_key_file)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), child)
        .await
        .expect("serve stops by itself within 30 s")
        .expect("serve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve must refuse the engine: {stderr}");
    assert!(
        stderr.contains("cannot run agent-inbox")
            && stderr.contains("MariaDB")
            && stderr.contains("SKIP LOCKED"),
        "the refusal names the engine and the property: {stderr}"
    );
    // The same server reached directly is accepted.
    let mut server = start_on(&h, &[]);
    wait_ready(&reqwest::Client::new(), &server.base).await;
    let _ = server.child.kill();
    let _ = server.child.wait();
}

/// `archive export` writes the rows archived before the cut to a gzip JSON Lines file, prints
/// their count and digest, and deletes exactly those rows; rows archived later stay. A write
/// that fails (here the file-size limit kills the exporter mid-write) deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_export_deletes_exactly_what_it_wrote() {
    use inbox_conformance::{Backend, Harness, archive_acknowledged};
    use std::io::Read as _;
    const DAY_MS: u64 = 86_400_000;
    let h = Harness::new(Backend::MySql).await;
    // Archived 70 days ago (old), then 40 days ago (recent).
    h.clock.set(h.store.now().minus_ms(100 * DAY_MS));
    let old = archive_acknowledged(&h, &["alpha", "beta"], 60).await;
    let recent = archive_acknowledged(&h, &["gamma"], 150).await - old;
    let count = |sql: &'static str| {
        let h = &h;
        async move { h.scalar(sql, &[]).await }
    };
    assert_eq!((old, recent), (120, 150));

    let dir = std::env::temp_dir().join(format!("agent-inbox-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // A write that fails deletes nothing: a 1 KiB file-size limit stops the exporter.
    let failed_file = dir.join("failed.jsonl.gz");
    let failed = Command::new("sh")
        .args(["-c", "ulimit -f 1 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_agent-inbox")])
        .args(["archive", "export", "--database-url", &h.url, "--before", "30d", "--to"])
        .arg(&failed_file)
        .output()
        .unwrap();
    eprintln!("the limited export: {:?} {}", failed.status, String::from_utf8_lossy(&failed.stderr));
    assert!(!failed.status.success(), "the export must fail: {}", String::from_utf8_lossy(&failed.stdout));
    assert_eq!(count("SELECT COUNT(*) AS n FROM agent_inbox_archive").await, old + recent, "nothing deleted");

    let file = dir.join("old.jsonl.gz");
    let out = agent_inbox(&[
        "archive",
        "export",
        "--database-url",
        &h.url,
        "--before",
        "55d",
        "--to",
        file.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap()).read_to_string(&mut lines).unwrap();
    let exported: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(exported.len() as i64, old, "every old row is in the file");
    assert!(exported.iter().all(|e| e["recipient_id"] != "gamma"), "no recent row is in the file");
    assert!(stdout.contains(&format!("exported {old} event(s)")), "{stdout}");
    assert!(stdout.contains(&format!("deleted {old} row(s)")), "{stdout}");
    use sha2::Digest as _;
    let digest: String = sha2::Sha256::digest(lines.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert!(stdout.contains(&digest), "the printed digest is the lines' SHA-256: {stdout}");
    assert_eq!(
        count("SELECT COUNT(*) AS n FROM agent_inbox_archive").await,
        recent,
        "exported rows are deleted"
    );
    assert_eq!(
        count("SELECT COUNT(*) AS n FROM agent_inbox_archive WHERE recipient_id = 'gamma'").await,
        recent,
        "recent rows stay"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The systemd unit shipped in `deploy/` passes `systemd-analyze verify` without a single
/// warning (unknown keys and bad values are only warnings there), with its `ExecStart` pointed
/// at the binary just built.
#[test]
fn the_shipped_systemd_unit_verifies_cleanly() {
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/agent-inbox.service"))
            .expect("deploy/agent-inbox.service exists");
    assert!(unit.contains("ExecStart=/usr/local/bin/agent-inbox serve"), "the unit runs serve");
    let dir = std::env::temp_dir().join(format!("agent-inbox-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agent-inbox.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/agent-inbox", env!("CARGO_BIN_EXE_agent-inbox")))
        .unwrap();
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze runs (scripts/test.sh installs the systemd package when it is missing)");
    let _ = std::fs::remove_dir_all(&dir);
    let complaints =
        String::from_utf8_lossy(&verified.stderr).into_owned() + &String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );
}

/// The secrets key as an operator handles it: `serve` on a new SQLite database makes its key
/// file beside it, `keys new-secrets-key` prints another, `keys rewrap` moves every secret
/// under it (the old file still in place), and after the switch the old key alone is refused,
/// naming the file, while tokens issued before keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secrets_key_is_made_rewrapped_and_checked() {
    let dir = temp_dir("secrets-key");
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    let key_file = dir.join("inbox.db.secrets-key");
    let mut server = start(&url, &[]);
    let client = reqwest::Client::new();
    wait_ready(&client, &server.base).await;
    assert!(key_file.exists(), "serve made the key file beside the database");
    let old_key = std::fs::read_to_string(&key_file).unwrap();
    let issue =
        || agent_inbox(&["token", "issue", "--database-url", &url, "--tenant", "demo", "--subject", "a1"]);
    let issued = issue();
    assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
    let token = String::from_utf8(issued.stdout).unwrap().trim().to_owned();
    let _ = server.child.kill();
    let _ = server.child.wait();

    let made = agent_inbox(&["keys", "new-secrets-key"]);
    assert!(made.status.success());
    let new_key = String::from_utf8(made.stdout).unwrap();
    assert!(new_key.contains("agent-inbox-secrets-key:v1:"), "{new_key}");
    let new_file = dir.join("new.key");
    std::fs::write(&new_file, &new_key).unwrap();
    let rewrap = agent_inbox(&["keys", "rewrap", "--database-url", &url, "--new-secrets-key-file"]);
    assert!(!rewrap.status.success(), "--new-secrets-key-file needs a value");
    let rewrap = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["keys", "rewrap", "--database-url", &url, "--new-secrets-key-file"])
        .arg(&new_file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&rewrap.stdout);
    assert!(rewrap.status.success(), "{}", String::from_utf8_lossy(&rewrap.stderr));
    assert!(
        said.contains("resealed 1 secret(s) under key sk_") && said.contains("may now drop key(s) sk_"),
        "{said}"
    );

    // The old key alone no longer opens the database's secrets: refused, naming the file.
    let refused = issue();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the old key file was accepted");
    assert!(stderr.contains(&key_file.display().to_string()) && stderr.contains("sealed under"), "{stderr}");
    // The new key in its place: the token issued before verifies, new ones are issued.
    std::fs::write(&key_file, &new_key).unwrap();
    let mut server = start(&url, &[]);
    wait_ready(&client, &server.base).await;
    let head = client.get(format!("{}/v1/inbox/head", server.base)).bearer_auth(&token).send().await.unwrap();
    assert_eq!(head.status(), 200, "a token issued before the rewrap");
    assert!(issue().status.success());
    let _ = server.child.kill();
    let _ = server.child.wait();

    // A wrong key file stops serve with its name.
    std::fs::write(&key_file, &old_key).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent-inbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(&key_file.display().to_string()), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
