//! Signed critical calls from the agent side, against a tenant that requires them: the SDK
//! with a registered key claims, heartbeats, releases and acknowledges every event; without a
//! key its claims are refused with the precise code; acknowledgements whose answers are lost
//! are retried with fresh nonces and go through; and `login` registers a key that `listen`
//! signs with and `logout` retires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inbox_client::schedule::PollSchedule;
use inbox_client::{
    Agent, AgentConfig, Api, ContinueAfterReset, Credentials, Event, HandlerError, LocalState,
    RequestSigningKey, RunSummary, Secret,
};
use inbox_conformance::Backend;
use inbox_server::CallerKind;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::login::agent_inbox;
use crate::proxy::Proxy;
use crate::support::{AGENT, BIN, Listen, Server, TempDir, wait_until};

fn quick_config() -> AgentConfig {
    AgentConfig {
        poll: PollSchedule {
            interval_min: Duration::from_millis(100),
            interval_max: Duration::from_secs(2),
            ..PollSchedule::default()
        },
        concurrency: 4,
        shutdown_grace: Duration::from_secs(2),
        ..AgentConfig::default()
    }
}

/// Turns on the tenant's `signatures_required` policy with an operator token.
async fn require_signatures(server: &Server) {
    server.set_tenant_policy(json!({"signatures_required": true})).await;
}

/// An SDK connection for the agent at `base`, signing with a freshly registered key.
async fn signed_api(base: &str, token: &str) -> Api {
    let api = Api::new(base, Credentials::access_token(Secret::new(token))).unwrap();
    let key = RequestSigningKey::generate_ed25519().unwrap();
    let registered = api.register_signing_key(&key).await.unwrap();
    assert_eq!(registered.key_id.as_str(), key.key_id());
    assert_eq!(registered.public_key, key.public_key());
    api.with_signing_key(key)
}

type Running = tokio::task::JoinHandle<Result<RunSummary, inbox_client::ClientError>>;

/// Runs an agent in this process that records every event it handles; the sender stops it.
fn run_agent<H: inbox_client::Handler>(
    api: Api,
    state: &LocalState,
    config: AgentConfig,
    handler: H,
) -> (oneshot::Sender<()>, Running) {
    let (stop, stopped) = oneshot::channel::<()>();
    let agent = Agent::new(api, state.clone(), config);
    let running = tokio::spawn(agent.run(handler, ContinueAfterReset, async move {
        let _ = stopped.await;
    }));
    (stop, running)
}

/// Counts per event id and runs of the handler.
type Handled = Arc<Mutex<HashMap<String, u32>>>;

fn counted(handled: &Handled, event: &Event) -> u32 {
    let mut handled = handled.lock().unwrap();
    let runs = handled.entry(event.event_id().to_string()).or_default();
    *runs += 1;
    *runs
}

async fn signature_metrics(server: &Server) -> (u64, u64) {
    let text =
        server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    let count = |result: &str| {
        text.lines()
            .filter(|l| l.starts_with("agent_inbox_signature_verifications_total") && l.contains(result))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    (count("\"valid\""), count("\"refused\""))
}

/// Every critical call the runner makes (claim, heartbeat during a long handler, release of a
/// retried event, acknowledge) is signed, so a tenant that requires signatures gets all its
/// work done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_agent_with_a_registered_key_handles_every_event_under_required_signatures() {
    let server = Server::start_on(Backend::MySql, &[]).await;
    require_signatures(&server).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let api = signed_api(&server.base, &agent).await;
    let dir = TempDir::new("signed-sdk");
    let state = LocalState::open(&dir.path("state.db"), 100).await.unwrap();
    let handled: Handled = Arc::default();
    let handler = {
        let handled = handled.clone();
        move |event: Event| {
            let handled = handled.clone();
            async move {
                let runs = counted(&handled, &event);
                match event.event_type() {
                    // Longer than the 2 s lease: only signed heartbeats keep it.
                    "slow" => tokio::time::sleep(Duration::from_secs(3)).await,
                    "flaky" if runs == 1 => {
                        return Err(HandlerError::retry(Duration::ZERO, "first try fails"));
                    }
                    _ => {}
                }
                Ok(())
            }
        }
    };
    let (stop, running) = run_agent(api, &state, quick_config(), handler);
    let mut published = Vec::new();
    for (n, event_type) in ["slow", "flaky"].into_iter().chain(std::iter::repeat_n("task", 10)).enumerate() {
        published.push(server.publish(&publisher, AGENT, event_type, json!({"n": n})).await);
    }
    wait_until("every event is acknowledged", Duration::from_secs(40), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    stop.send(()).unwrap();
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.acked, summary.released, summary.failed), (12, 1, 0));
    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 12);
    let runs = |type_index: usize| handled[&published[type_index]];
    assert_eq!((runs(0), runs(1)), (1, 2), "the slow event kept its lease; the flaky one ran twice");
    let events = server.events(&agent).await;
    assert_eq!(events[&published[0]]["delivery_attempts"], 1, "heartbeats were accepted");
    let (valid, refused) = signature_metrics(&server).await;
    // At least 12 acks, a release, a heartbeat and a claim.
    assert!(valid >= 15, "claims, heartbeats, the release and the acks were verified: {valid}");
    assert_eq!(refused, 0);
    state.close().await;
}

/// Without a key, the runner's first claim is refused with `signature_required` and the agent
/// stops with that error (nothing is claimed); a key the service does not know is refused as
/// `unknown_signing_key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_registered_key_claims_are_refused_with_the_precise_code() {
    let server = Server::start(&[]).await;
    require_signatures(&server).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    let dir = TempDir::new("unsigned-sdk");
    let state = LocalState::open(&dir.path("state.db"), 100).await.unwrap();
    let never = |_event: Event| async { Err::<(), _>(HandlerError::permanent("no event may be handled")) };

    let unsigned = Api::new(&server.base, Credentials::access_token(Secret::new(agent.as_str()))).unwrap();
    let (_stop, running) = run_agent(unsigned.clone(), &state, quick_config(), never);
    let err = tokio::time::timeout(Duration::from_secs(20), running).await.unwrap().unwrap().unwrap_err();
    assert_eq!(
        (err.status(), err.code().map(inbox_api::ProblemCode::as_str)),
        (Some(401), Some("signature_required")),
        "{err}"
    );

    let unregistered = unsigned.with_signing_key(RequestSigningKey::generate_ed25519().unwrap());
    let (_stop, running) = run_agent(unregistered, &state, quick_config(), never);
    let err = tokio::time::timeout(Duration::from_secs(20), running).await.unwrap().unwrap().unwrap_err();
    assert_eq!(
        (err.status(), err.code().map(inbox_api::ProblemCode::as_str)),
        (Some(401), Some("unknown_signing_key")),
        "{err}"
    );

    let event = server.events(&agent).await.remove(&id).unwrap();
    assert_eq!(
        (event["ack_state"].as_str(), event["delivery_attempts"].as_u64()),
        (Some("available"), Some(0))
    );
    state.close().await;
}

/// The service applies an acknowledgement whose answer the network then loses; the runner
/// retries it, signed anew with a fresh nonce, so the retry is accepted (as a repeat of an
/// ack) instead of refused as a replay. Every event is acknowledged and handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_retried_after_lost_answers_carry_fresh_nonces() {
    let server = Server::start(&[]).await;
    require_signatures(&server).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let proxy = Proxy::start(server.port).await;
    proxy.lose_answers("POST /v1/inbox/acknowledge ", 2);
    let api = signed_api(&proxy.base, &agent).await;
    let dir = TempDir::new("lost-acks");
    let state = LocalState::open(&dir.path("state.db"), 100).await.unwrap();
    let handled: Handled = Arc::default();
    let handler = {
        let handled = handled.clone();
        move |event: Event| {
            let handled = handled.clone();
            async move {
                counted(&handled, &event);
                Ok(())
            }
        }
    };
    let config = AgentConfig { concurrency: 1, ..quick_config() };
    let (stop, running) = run_agent(api, &state, config, handler);
    let mut published = Vec::new();
    for n in 0..4 {
        published.push(server.publish(&publisher, AGENT, "task", json!({"n": n})).await);
    }
    wait_until("every event is acknowledged", Duration::from_secs(30), || {
        server.all_in_state(&agent, &published, "acked")
    })
    .await;
    assert_eq!(proxy.answers_to_lose(), 0, "two acknowledgements lost their answers");
    stop.send(()).unwrap();
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.acked, summary.unconfirmed), (4, 0), "the retries were confirmed");
    assert!(handled.lock().unwrap().values().all(|runs| *runs == 1));
    let (_, refused) = signature_metrics(&server).await;
    assert_eq!(refused, 0, "no retry was refused as a replay");
    state.close().await;
}

/// `login` registers a key when the tenant requires signatures and keeps it in a 0600 file;
/// `listen` signs with it; a second login keeps it; `logout` retires it at the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_registers_a_signing_key_that_listen_uses_and_logout_retires() {
    let server = Server::start(&[]).await;
    require_signatures(&server).await;
    let publisher = server.publisher_token().await;
    let agent = server.agent_token(AGENT).await;
    let home = TempDir::new("signing-login");
    let key_file = home.path("default.signing-key");
    let login = |refresh: String| {
        let home = &home;
        let base = server.base.clone();
        async move {
            let out = agent_inbox(home, &["login", "--server", &base], Some(&format!("{refresh}\n")));
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let refresh = || async {
        server.token(AGENT, CallerKind::Agent, inbox_server::tokens::AGENT_SCOPES, true).await.1.unwrap()
    };

    let stdout = login(refresh().await).await;
    assert!(stdout.contains("registered signing key ak_"), "{stdout}");
    let stored = std::fs::read_to_string(&key_file).unwrap();
    let key_id = stored.split('/').nth(1).unwrap().to_owned();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(!stdout.contains(stored.trim().rsplit('/').next().unwrap()), "the private key is never printed");

    let id = server.publish(&publisher, AGENT, "task", json!({})).await;
    let mut command = std::process::Command::new(BIN);
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
    wait_until("the event is acknowledged", Duration::from_secs(20), || {
        server.all_in_state(&agent, std::slice::from_ref(&id), "acked")
    })
    .await;
    assert!(listen.terminate().success(), "{}", listen.dump());
    assert!(
        listen.logged("listening", &[("signing_key_id", Value::from(key_id.as_str()))]),
        "{}",
        listen.dump()
    );
    assert!(
        !listen.dump().contains(stored.trim().rsplit('/').next().unwrap()),
        "the key never reaches the log"
    );

    let stdout = login(refresh().await).await;
    assert!(stdout.contains(&format!("signed with the profile's signing key {key_id}")), "{stdout}");
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), stored, "a second login keeps the key");

    let out = agent_inbox(&home, &["logout"], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("signing key {key_id} retired")), "{stdout}");
    assert!(!key_file.exists());
    let keys: Value = server
        .client
        .get(format!("{}/v1/agent-keys", server.base))
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(keys["keys"], json!([]), "{keys}");
    assert_eq!(keys["signatures_required"], true);
    let stdout = login(refresh().await).await;
    assert!(
        stdout.contains("registered signing key ak_"),
        "after logout a new key can be registered: {stdout}"
    );
}
