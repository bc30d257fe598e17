//! The SSRF defences of callbacks: refused address forms, DNS rebinding to loopback under a
//! scripted resolver, and redirects to internal addresses that are never followed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use inbox_server::{Overrides, ResolverOverride};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::callback_receivers::*;
use crate::harness::{TestServer, assert_problem, both_backends};
use inbox_conformance::Backend;

both_backends!(
    refused_address_forms_are_rejected_with_a_clear_error,
    dns_rebinding_cannot_reach_loopback,
    redirects_to_internal_addresses_are_not_followed,
);

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
