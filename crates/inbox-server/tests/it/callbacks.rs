//! Webhook callbacks end to end: challenge-response registration, signed thin hints, retries
//! that never touch the inbox, registration limits, secret rotation, and the SSRF defences
//! (refused address forms, DNS rebinding, redirects). Receivers are small axum servers on
//! 127.0.0.1, reached under the development setting that admits http to loopback; host names
//! are answered by a scripted resolver.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_server::{CallerKind, Config, Overrides, Resolver, ResolverOverride};
use inbox_trust::message_signatures::{RequestParts, VerifyingKey};
use inbox_trust::webhooks::{
    MATM_DELIVERY_ID, MATM_KEY_ID, MATM_NONCE, MATM_TIMESTAMP, challenge_response, verify_webhook,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(
    challenge_activates_a_registration_and_hints_arrive_signed,
    a_timing_out_callback_is_retried_and_the_event_stays_claimable,
    refused_address_forms_are_rejected_with_a_clear_error,
    dns_rebinding_cannot_reach_loopback,
    redirects_to_internal_addresses_are_not_followed,
    registration_limits_and_secret_rotation,
);

const SECRET: [u8; 32] = [0x5a; 32];

/// A request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    host: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn is_challenge(&self) -> bool {
        self.json()["signal_type"] == "callback.challenge"
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn parts(&self) -> RequestParts {
        let mut parts = RequestParts::new("POST", "https", &self.host, &self.path);
        for (name, value) in &self.headers {
            parts = parts.with_header(name, value);
        }
        parts
    }
}

#[derive(Default)]
struct ReceiverState {
    secret: Mutex<Vec<u8>>,
    requests: Mutex<Vec<Received>>,
    /// Hints that get no answer within the service's timeout before one is answered.
    hints_to_stall: AtomicUsize,
    /// Answer with a redirect here instead.
    redirect_to: Mutex<Option<String>>,
}

/// A webhook receiver on 127.0.0.1 that answers challenges with its secret.
#[derive(Clone)]
struct Receiver {
    state: Arc<ReceiverState>,
    addr: SocketAddr,
}

impl Receiver {
    async fn start(secret: &[u8]) -> Receiver {
        Self::start_on("127.0.0.1", secret).await
    }

    async fn start_on(ip: &str, secret: &[u8]) -> Receiver {
        let state = Arc::new(ReceiverState { secret: Mutex::new(secret.to_vec()), ..Default::default() });
        let app = axum::Router::new().fallback(receive).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { state, addr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> Vec<Received> {
        self.state.requests.lock().unwrap().clone()
    }

    fn hints(&self, path: &str) -> Vec<Received> {
        self.requests().into_iter().filter(|r| r.path == path && !r.is_challenge()).collect()
    }
}

async fn receive(
    State(state): State<Arc<ReceiverState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        path: uri.path().to_owned(),
        host: headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
            .collect(),
        body: body.to_vec(),
    };
    let is_challenge = received.is_challenge();
    let value = received.json();
    state.requests.lock().unwrap().push(received);
    if let Some(location) = state.redirect_to.lock().unwrap().clone() {
        return (AxumStatus::TEMPORARY_REDIRECT, [(header::LOCATION, location)]).into_response();
    }
    if is_challenge {
        let secret = state.secret.lock().unwrap().clone();
        let answer = challenge_response(&secret, value["challenge"].as_str().unwrap());
        return axum::Json(json!({"challenge_response": answer})).into_response();
    }
    let stall =
        state.hints_to_stall.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    if stall {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    AxumStatus::NO_CONTENT.into_response()
}

/// Answers scripted per host: the n-th lookup gets the n-th answer (the last one repeats).
#[derive(Debug, Default)]
struct ScriptedResolver {
    answers: HashMap<String, Vec<Vec<IpAddr>>>,
    lookups: Mutex<HashMap<String, usize>>,
}

impl ScriptedResolver {
    fn with(mut self, host: &str, answers: &[&[&str]]) -> Self {
        let answers = answers.iter().map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect()).collect();
        self.answers.insert(host.to_owned(), answers);
        self
    }
}

impl Resolver for ScriptedResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        _port: u16,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            let mut lookups = self.lookups.lock().unwrap();
            let n = lookups.entry(host.to_owned()).or_default();
            let answers = self
                .answers
                .get(host)
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))?;
            let answer = answers[(*n).min(answers.len() - 1)].clone();
            *n += 1;
            Ok(answer)
        })
    }
}

/// Development settings: http to loopback, short timeouts and retries, frequent passes.
fn development(config: &mut Config) {
    config.callbacks.allow_http_loopback = true;
    config.callbacks.timeout = Duration::from_millis(500);
    config.callbacks.retry_base = Duration::from_millis(100);
    config.callbacks.retry_max = Duration::from_millis(300);
    config.callbacks.poll_interval = Duration::from_millis(20);
}

async fn callback_agent(server: &TestServer, tenant: &str, agent: &str) -> String {
    let scope = "inbox.poll inbox.claim inbox.ack callback.register callback.rotate";
    server.token(tenant, agent, CallerKind::Agent, scope).await
}

async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The registration's delivery log, once an entry matches `found`.
async fn delivery_log_until(
    server: &TestServer,
    token: &str,
    id: &str,
    found: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, log) = server
            .call(Method::GET, &format!("/v1/callback-registrations/{id}/deliveries"), Some(token), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{log}");
        if log["attempts"].as_array().unwrap().iter().any(&found) {
            return log;
        }
        assert!(Instant::now() < deadline, "timed out waiting for a delivery attempt: {log}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn secret_b64(secret: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(secret)
}

fn verify_with(received: &Received, keys: &[(&str, &[u8])]) -> Result<String, String> {
    let now = inbox_api::time::now_ms() / 1000;
    verify_webhook(&received.parts(), &received.body, now, |keyid| {
        keys.iter().find(|(id, _)| *id == keyid).map(|(_, secret)| VerifyingKey::hmac_sha256(secret).unwrap())
    })
    .map(|verified| verified.keyid)
    .map_err(|e| e.to_string())
}

/// A registration with a secret is challenged at once and becomes active; deliveries are
/// the thin hint, signed with every header of seed 001. A registration whose receiver cannot
/// answer stays pending and receives nothing else.
async fn challenge_activates_a_registration_and_hints_arrive_signed(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let receiver = Receiver::start(&SECRET).await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;

    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({
                "callback_url": receiver.url("/hook/active"),
                "auth_mode": "hmac-sha256",
                "secret_id": "cbksec_2026_07",
                "secret": secret_b64(&SECRET),
                "delivery_scope": ["signal_only"],
                "max_rate_per_minute": 600
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    assert_eq!(registered["status"], "active", "{registered}");
    assert_eq!(registered["secret_id"], "cbksec_2026_07");
    assert!(registered.get("secret").is_none(), "a secret the tenant chose is never echoed");
    assert!(registered["challenge_delivery_id"].is_string() && registered["expires_at_utc"].is_string());
    let challenge =
        receiver.requests().into_iter().find(Received::is_challenge).expect("a challenge was sent");
    assert_eq!(verify_with(&challenge, &[("cbksec_2026_07", &SECRET)]), Ok("cbksec_2026_07".to_owned()));
    assert_eq!(challenge.json()["delivery_id"], registered["challenge_delivery_id"]);

    // A second registration whose receiver does not know the (generated) secret.
    let (status, pending) = server
        .post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/hook/pending")}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pending}");
    assert_eq!(pending["status"], "pending_verification");
    let generated = URL_SAFE_NO_PAD.decode(pending["secret"].as_str().unwrap()).unwrap();
    assert_eq!(generated.len(), 32);
    let pending_id = pending["registration_id"].as_str().unwrap().to_owned();
    let (status, still_pending) =
        server.post(&format!("/v1/callback-registrations/{pending_id}/verify"), &agent, json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(still_pending["status"], "pending_verification", "the receiver answered with another secret");
    assert!(still_pending["last_error"].as_str().unwrap().contains("challenge_response"), "{still_pending}");

    let published = server.publish(&publisher, &["alpha"], json!({"secret": "never in a hint"})).await;
    let hint = wait_for("a hint", || receiver.hints("/hook/active").into_iter().next()).await;
    for name in [
        MATM_DELIVERY_ID,
        MATM_TIMESTAMP,
        MATM_NONCE,
        MATM_KEY_ID,
        "content-digest",
        "signature-input",
        "signature",
    ] {
        assert!(hint.header(name).is_some(), "{name} is sent");
    }
    assert_eq!(hint.header(MATM_KEY_ID), Some("cbksec_2026_07"));
    assert_eq!(verify_with(&hint, &[("cbksec_2026_07", &SECRET)]), Ok("cbksec_2026_07".to_owned()));
    let body = hint.json();
    assert_eq!(body["signal_type"], "inbox.updated");
    assert_eq!((body["tenant_id"].clone(), body["recipient_id"].clone()), (json!("t1"), json!("alpha")));
    assert_eq!(body["head_seq"], published["deliveries"][0]["inbox_seq"]);
    assert_eq!(body["delivery_id"].as_str(), hint.header(MATM_DELIVERY_ID));
    assert!(!String::from_utf8_lossy(&hint.body).contains("never in a hint"), "hints carry no event data");
    assert!(receiver.hints("/hook/pending").is_empty(), "a pending registration gets nothing but challenges");

    // Once the receiver knows the secret, verifying activates it and it hears about the backlog.
    *receiver.state.secret.lock().unwrap() = generated.clone();
    let (_, verified) =
        server.post(&format!("/v1/callback-registrations/{pending_id}/verify"), &agent, json!({})).await;
    assert_eq!(verified["status"], "active", "{verified}");
    let backlog = wait_for("a hint to the newly verified callback", || {
        receiver.hints("/hook/pending").into_iter().next()
    })
    .await;
    assert_eq!(backlog.json()["head_seq"], 1);

    let (status, log) = server
        .call(Method::GET, &format!("/v1/callback-registrations/{pending_id}/deliveries"), Some(&agent), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let outcomes: Vec<&str> =
        log["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert!(outcomes.contains(&"verification_failed") && outcomes.contains(&"verified"), "{log}");
    let (status, listed) = server.call(Method::GET, "/v1/callback-registrations", Some(&agent), None).await;
    assert_eq!((status, listed["registrations"].as_array().unwrap().len()), (StatusCode::OK, 2));
    let other = callback_agent(&server, "t1", "beta").await;
    let hidden = server
        .call(Method::GET, &format!("/v1/callback-registrations/{pending_id}"), Some(&other), None)
        .await;
    assert_problem(&hidden, StatusCode::NOT_FOUND, "callback_registration_not_found");
    server.stop().await;
}

/// A callback that does not answer in time is retried with backoff until it does; every
/// attempt is logged; meanwhile the event is claimable as always.
async fn a_timing_out_callback_is_retried_and_the_event_stays_claimable(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let receiver = Receiver::start(&SECRET).await;
    receiver.state.hints_to_stall.store(2, Ordering::SeqCst);
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;
    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": receiver.url("/slow"), "secret": secret_b64(&SECRET)}),
        )
        .await;
    assert_eq!(
        (status, registered["status"].clone()),
        (StatusCode::CREATED, json!("active")),
        "{registered}"
    );
    let id = registered["registration_id"].as_str().unwrap().to_owned();

    let published = server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let event_id = published["deliveries"][0]["event_id"].as_str().unwrap().to_owned();
    let (status, claimed) = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    assert_eq!(claimed["claims"][0]["event_id"], event_id, "the inbox does not wait for the callback");
    let lease = claimed["claims"][0]["lease_token"].as_str().unwrap().to_owned();

    let log = delivery_log_until(&server, &agent, &id, |a| a["outcome"] == "delivered").await;
    let hints: Vec<&Value> =
        log["attempts"].as_array().unwrap().iter().filter(|a| a["kind"] == "hint").collect();
    let failed: Vec<&&Value> = hints.iter().filter(|a| a["outcome"] == "failed").collect();
    assert!(failed.len() >= 2, "two timed-out attempts before the delivery: {log}");
    assert!(failed.iter().all(|a| a["error"].as_str().unwrap().contains("no answer within")), "{log}");
    let attempts: Vec<u64> = hints.iter().map(|a| a["attempt"].as_u64().unwrap()).collect();
    assert!(attempts.contains(&3), "attempts count up while failing: {attempts:?}");
    assert!(receiver.hints("/slow").len() >= 3);

    let (status, acked) = server
        .post(
            "/v1/inbox/acknowledge",
            &agent,
            json!({"acks": [{"event_id": event_id, "lease_token": lease, "result": "completed"}]}),
        )
        .await;
    assert_eq!((status, acked["results"][0]["ack_state"].clone()), (StatusCode::OK, json!("acked")));
    server.stop().await;
}

/// Every refused form of callback URL is rejected at registration, naming the reason; the
/// operator's allow-list admits a named internal host, but never a metadata address.
async fn refused_address_forms_are_rejected_with_a_clear_error(backend: Backend) {
    let resolver = ScriptedResolver::default()
        .with("internal.example", &[&["10.1.2.3"]])
        .with("mixed.example", &[&["93.184.215.14", "127.0.0.1"]])
        .with("metadata.example", &[&["169.254.169.254"]])
        .with("mapped.example", &[&["::ffff:192.168.0.1"]])
        .with("allowed.internal", &[&["10.9.9.9"]])
        .with("metadata.internal", &[&["169.254.169.254"]]);
    let overrides = Overrides { callback_resolver: ResolverOverride::new(resolver) };
    let server = TestServer::start_overridden(backend, overrides, |config| {
        config.callbacks.allow_hosts = vec!["allowed.internal".to_owned(), "metadata.internal".to_owned()];
        config.callbacks.timeout = Duration::from_millis(300);
    })
    .await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let refused = [
        ("http://93.184.215.14/hook", "scheme"),
        ("ftp://93.184.215.14/hook", "scheme"),
        ("https://127.0.0.1/hook", "loopback"),
        ("https://[::1]/hook", "loopback"),
        ("https://localhost/hook", "names this machine"),
        ("https://10.0.0.1/hook", "private"),
        ("https://172.16.5.4/hook", "private"),
        ("https://192.168.1.1/hook", "private"),
        ("https://100.64.0.1/hook", "shared"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("https://[fd00:ec2::254]/latest", "metadata"),
        ("https://[fe80::1]/hook", "link-local"),
        ("https://[fc00::1]/hook", "private"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("https://224.0.0.1/hook", "multicast"),
        ("https://[::ffff:127.0.0.1]/hook", "IPv4-mapped"),
        ("https://2130706433/hook", "unusual spelling"),
        ("https://0x7f.1/hook", "unusual spelling"),
        ("https://127.1/hook", "unusual spelling"),
        ("https://user@93.184.215.14/hook", "user information"),
        ("https://internal.example/hook", "refused address"),
        ("https://mixed.example/hook", "refused address"),
        ("https://metadata.example/hook", "refused address"),
        ("https://mapped.example/hook", "refused address"),
        ("https://metadata.internal/hook", "refused address"),
    ];
    for (url, reason) in refused {
        let result = server.post("/v1/callback-registrations", &agent, json!({"callback_url": url})).await;
        assert_problem(&result, StatusCode::BAD_REQUEST, "callback_url_refused");
        let detail = result.1["detail"].as_str().unwrap().to_lowercase();
        assert!(detail.contains(&reason.to_lowercase()), "{url}: the detail names why ({reason}): {detail}");
    }
    let unknown = server
        .post("/v1/callback-registrations", &agent, json!({"callback_url": "https://nowhere.example/x"}))
        .await;
    assert_problem(&unknown, StatusCode::BAD_REQUEST, "callback_host_unresolvable");

    let (status, admitted) = server
        .post("/v1/callback-registrations", &agent, json!({"callback_url": "https://allowed.internal/hook"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "the allow-list admits a named internal host: {admitted}");
    assert_eq!(admitted["status"], "pending_verification");
    let (_, listed) = server.call(Method::GET, "/v1/callback-registrations", Some(&agent), None).await;
    assert_eq!(
        listed["registrations"].as_array().unwrap().len(),
        1,
        "refused registrations left nothing behind"
    );
    server.stop().await;
}

/// A name that resolves to a public address when registered and to 127.0.0.1 when the
/// challenge goes out never reaches loopback: every lookup is checked, and the connection
/// goes to the checked address. An answer listing both is refused outright.
async fn dns_rebinding_cannot_reach_loopback(backend: Backend) {
    let loopback = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = loopback.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((_stream, _)) = loopback.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let resolver = ScriptedResolver::default()
        .with("rebind.example", &[&["93.184.215.14"], &["127.0.0.1"]])
        .with("both.example", &[&["93.184.215.14", "127.0.0.1"]]);
    let overrides = Overrides { callback_resolver: ResolverOverride::new(resolver) };
    let server = TestServer::start_overridden(backend, overrides, |config| {
        config.callbacks.timeout = Duration::from_millis(500);
    })
    .await;
    let agent = callback_agent(&server, "t1", "alpha").await;

    let (status, registered) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": format!("https://rebind.example:{port}/hook"), "secret": secret_b64(&SECRET)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "the first answer was public: {registered}");
    assert_eq!(registered["status"], "pending_verification", "{registered}");
    let error = registered["last_error"].as_str().unwrap();
    assert!(error.contains("127.0.0.1") && error.contains("loopback"), "{error}");
    let both = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": format!("https://both.example:{port}/hook"), "secret": secret_b64(&SECRET)}),
        )
        .await;
    assert_problem(&both, StatusCode::BAD_REQUEST, "callback_url_refused");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing ever connected to loopback");

    // Pinning, seen from the other side: under the development setting a loopback name is
    // admitted, and the request reaches exactly the address the resolver answered and the
    // check passed (127.0.0.2, where no system resolver would send `pinned.localhost`), with
    // its name kept in `Host`.
    let receiver = Receiver::start_on("127.0.0.2", &SECRET).await;
    let resolver = ScriptedResolver::default().with("pinned.localhost", &[&["127.0.0.2"]]);
    let overrides = Overrides { callback_resolver: ResolverOverride::new(resolver) };
    let dev = TestServer::start_overridden(backend, overrides, |config| {
        development(config);
    })
    .await;
    let agent = callback_agent(&dev, "t1", "alpha").await;
    let url = format!("http://pinned.localhost:{}/hook", receiver.addr.port());
    let (status, pinned) = dev
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": url, "secret": secret_b64(&SECRET)}),
        )
        .await;
    assert_eq!((status, pinned["status"].clone()), (StatusCode::CREATED, json!("active")), "{pinned}");
    let challenge = receiver.requests().remove(0);
    assert_eq!(challenge.host, format!("pinned.localhost:{}", receiver.addr.port()));
    dev.stop().await;
    server.stop().await;
}

/// A receiver answering with a redirect to an internal address is not followed, neither
/// for the challenge nor for a hint; the attempt is recorded as failed.
async fn redirects_to_internal_addresses_are_not_followed(backend: Backend) {
    let server = TestServer::start_with(backend, development).await;
    let inside = Receiver::start(&SECRET).await;
    let receiver = Receiver::start(&SECRET).await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;
    *receiver.state.redirect_to.lock().unwrap() = Some(inside.url("/internal-admin"));
    let (status, redirected) = server
        .post(
            "/v1/callback-registrations",
            &agent,
            json!({"callback_url": receiver.url("/hook"), "secret": secret_b64(&SECRET)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(redirected["status"], "pending_verification");
    assert!(
        redirected["last_error"].as_str().unwrap().contains("redirects are never followed"),
        "{redirected}"
    );

    *receiver.state.redirect_to.lock().unwrap() = None;
    let id = redirected["registration_id"].as_str().unwrap().to_owned();
    let (_, verified) =
        server.post(&format!("/v1/callback-registrations/{id}/verify"), &agent, json!({})).await;
    assert_eq!(verified["status"], "active", "{verified}");
    *receiver.state.redirect_to.lock().unwrap() = Some(inside.url("/internal-admin"));
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let failed = wait_for("a failed hint attempt", || {
        let hints = receiver.hints("/hook");
        (!hints.is_empty()).then_some(hints)
    })
    .await;
    assert!(!failed.is_empty());
    let log = delivery_log_until(&server, &agent, &id, |a| a["kind"] == "hint").await;
    let hint = log["attempts"].as_array().unwrap().iter().find(|a| a["kind"] == "hint").unwrap().clone();
    assert_eq!(
        (hint["outcome"].clone(), hint["http_status"].clone()),
        (json!("failed"), json!(307)),
        "{log}"
    );
    assert!(inside.requests().is_empty(), "the redirect target was never contacted");
    server.stop().await;
}

/// Registrations per agent are capped (seed 000's alias counts too); a rotated secret signs
/// beside the old one through the overlap, so a receiver with either verifies.
async fn registration_limits_and_secret_rotation(backend: Backend) {
    let server = TestServer::start_with(backend, |config| {
        development(config);
        config.callbacks.per_recipient_max = 2;
    })
    .await;
    let receiver = Receiver::start(&SECRET).await;
    let agent = callback_agent(&server, "t1", "alpha").await;
    let publisher = server.publisher("t1").await;
    let (status, first) = server
        .post(
            "/api/v1/agents/alpha/callbacks",
            &agent,
            json!({"callback_url": receiver.url("/a"), "secret": secret_b64(&SECRET), "secret_id": "old"}),
        )
        .await;
    assert_eq!((status, first["status"].clone()), (StatusCode::CREATED, json!("active")), "{first}");
    assert_problem(
        &server
            .post("/api/v1/agents/beta/callbacks", &agent, json!({"callback_url": receiver.url("/b")}))
            .await,
        StatusCode::FORBIDDEN,
        "tenant_mismatch",
    );
    let (status, _) =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/b")})).await;
    assert_eq!(status, StatusCode::CREATED);
    let third =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/c")})).await;
    assert_problem(&third, StatusCode::CONFLICT, "callback_limit_reached");
    let no_scope = server.agent("t1", "alpha").await;
    assert_problem(
        &server
            .post("/v1/callback-registrations", &no_scope, json!({"callback_url": receiver.url("/d")}))
            .await,
        StatusCode::FORBIDDEN,
        "scope_missing",
    );

    let id = first["registration_id"].as_str().unwrap().to_owned();
    let new_secret = [0x77; 32];
    let (status, rotated) = server
        .post(
            &format!("/v1/callback-registrations/{id}/rotate"),
            &agent,
            json!({"secret_id": "new", "secret": secret_b64(&new_secret), "overlap_seconds": 3600}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    assert_eq!(
        (rotated["secret_id"].clone(), rotated["previous_secret_id"].clone()),
        (json!("new"), json!("old"))
    );
    server.publish(&publisher, &["alpha"], json!({"n": 1})).await;
    let hint = wait_for("a hint after the rotation", || receiver.hints("/a").into_iter().next()).await;
    assert_eq!(hint.header(MATM_KEY_ID), Some("new"));
    assert_eq!(verify_with(&hint, &[("new", &new_secret)]), Ok("new".to_owned()));
    assert_eq!(
        verify_with(&hint, &[("old", &SECRET)]),
        Ok("old".to_owned()),
        "the old secret still verifies"
    );
    assert!(verify_with(&hint, &[("old", &new_secret)]).is_err());

    let (status, _) =
        server.call(Method::DELETE, &format!("/v1/callback-registrations/{id}"), Some(&agent), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) =
        server.post("/v1/callback-registrations", &agent, json!({"callback_url": receiver.url("/c")})).await;
    assert_eq!(status, StatusCode::CREATED, "a deleted registration frees its place");
    server.stop().await;
}
