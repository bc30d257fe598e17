//! What browsers need from the transport: HTTPS with HTTP/2 by ALPN (and HTTP/1.1), cleartext
//! HTTP/2 with prior knowledge, SSE, long poll and WebSocket over HTTP/2, a certificate
//! re-read without a restart, clear refusals of bad certificate files, and CORS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt as _;
use inbox_conformance::Backend;
use reqwest::{Method, StatusCode, Version};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::harness::TestServer;
use crate::stream_clients::Sse;

/// A certificate for 127.0.0.1 and localhost, written as PEM files to a fresh directory.
struct TestCertificate {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    cert_pem: String,
}

impl TestCertificate {
    fn new(name: &str) -> TestCertificate {
        let dir = std::env::temp_dir().join(format!("agent-inbox-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = TestCertificate { dir, cert, key, cert_pem: String::new() };
        made.renew()
    }

    /// A new key and certificate in the same files.
    fn renew(mut self) -> TestCertificate {
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("a test certificate");
        self.cert_pem = made.cert.pem();
        std::fs::write(&self.key, made.signing_key.serialize_pem()).unwrap();
        std::fs::write(&self.cert, &self.cert_pem).unwrap();
        self
    }

    /// A client that trusts only this certificate.
    fn client(&self, http1_only: bool) -> reqwest::Client {
        let root = reqwest::Certificate::from_pem(self.cert_pem.as_bytes()).unwrap();
        let builder = reqwest::Client::builder().add_root_certificate(root).tls_built_in_root_certs(false);
        let builder = if http1_only { builder.http1_only() } else { builder };
        builder.build().unwrap()
    }
}

impl Drop for TestCertificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn tls_server(
    certificate: &TestCertificate,
    tune: impl FnOnce(&mut inbox_server::Config),
) -> TestServer {
    let (cert, key) = (certificate.cert.clone(), certificate.key.clone());
    TestServer::start_with(Backend::Sqlite, move |c| {
        c.tls.cert = Some(cert);
        c.tls.key = Some(key);
        tune(c);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn https_offers_http2_and_http1_and_streams_work_over_both() {
    let certificate = TestCertificate::new("h2");
    let mut server = tls_server(&certificate, |_| {}).await;
    assert!(server.base.starts_with("https://"));

    let h1 = certificate.client(true).get(format!("{}/healthz", server.base)).send().await.unwrap();
    assert_eq!(h1.version(), Version::HTTP_11, "a client offering only http/1.1 gets it");
    let h2 = certificate.client(false).get(format!("{}/healthz", server.base)).send().await.unwrap();
    assert_eq!(h2.version(), Version::HTTP_2, "ALPN picks h2");
    assert_eq!(h2.status(), StatusCode::OK);

    let agent = server.agent("acme", "agent_h2").await;
    let publisher = server.publisher("acme").await;
    for http1_only in [false, true] {
        server.client = certificate.client(http1_only);
        let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
        let published = server.publish(&publisher, &["agent_h2"], json!({ "n": 1 })).await;
        let head = published["deliveries"][0]["inbox_seq"].as_u64().unwrap();
        let hint = stream.wait_for_head(head).await;
        assert_eq!(hint["head_seq"], head, "a hint over TLS: {published}");
        drop(stream);
        let waiting = server.post(
            "/v1/inbox/poll-after-cursor",
            &agent,
            json!({ "after_seq": head, "wait_seconds": 10 }),
        );
        let publishing = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            server.publish(&publisher, &["agent_h2"], json!({ "n": 2 })).await
        };
        let ((status, polled), _) = tokio::join!(waiting, publishing);
        assert_eq!(status, StatusCode::OK, "{polled}");
        assert_eq!(polled["events"][0]["payload"]["n"], 2, "the long poll was released: {polled}");
        // Done with this inbox's events for the next round.
        let (status, claimed) = server.post("/v1/inbox/claim", &agent, json!({ "limit": 10 })).await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        let acks: Vec<Value> = claimed["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| json!({ "event_id": e["event_id"], "lease_token": e["lease_token"], "result": "completed" }))
            .collect();
        let (status, body) = server.post("/v1/inbox/acknowledge", &agent, json!({ "acks": acks })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cleartext_http2_with_prior_knowledge_is_served() {
    let mut server = TestServer::start(Backend::Sqlite).await;
    server.client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let response = server.request(Method::GET, "/healthz", None, None).send().await.unwrap();
    assert_eq!(response.version(), Version::HTTP_2, "h2c for a TLS-terminating proxy");
    assert_eq!(response.status(), StatusCode::OK);
    let agent = server.agent("acme", "agent_h2c").await;
    let publisher = server.publisher("acme").await;
    let mut stream = Sse::open(&server, "/v1/streams/sse", Some(&agent), &[]).await;
    server.publish(&publisher, &["agent_h2c"], json!({})).await;
    assert!(stream.next_hint(Duration::from_secs(5)).await.is_some(), "SSE over h2c");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_websocket_opens_over_http2_with_extended_connect() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio_tungstenite::tungstenite::protocol::Role;

    let certificate = TestCertificate::new("ws-h2");
    let server = tls_server(&certificate, |_| {}).await;
    let agent = server.agent("acme", "agent_ws").await;
    let publisher = server.publisher("acme").await;

    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    let der = certificate_der(&certificate.cert_pem);
    roots.add(der).unwrap();
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut tls = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let addr = server.base.trim_start_matches("https://").to_owned();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls)).connect(name, tcp).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(hyper::Method::CONNECT)
        .uri(format!("https://{addr}/v1/streams/ws"))
        .extension(hyper::ext::Protocol::from_static("websocket"))
        .header("sec-websocket-version", "13")
        .header("authorization", format!("Bearer {agent}"))
        .body(String::new())
        .unwrap();
    let mut response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), hyper::StatusCode::OK, "RFC 8441: 200 opens the socket");
    let upgraded = hyper::upgrade::on(&mut response).await.expect("an upgraded stream");
    let mut socket =
        tokio_tungstenite::WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
    server.publish(&publisher, &["agent_ws"], json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("a hint over the HTTP/2 WebSocket")
            .expect("the socket stays open")
            .unwrap();
        if let Ok(text) = message.to_text() {
            let signal: Value = serde_json::from_str(text).unwrap_or_default();
            if signal["signal_type"] == "inbox.updated" {
                assert_eq!(signal["head_seq"], 1);
                break;
            }
        }
    }
    server.stop().await;
}

fn certificate_der(pem: &str) -> tokio_rustls::rustls::pki_types::CertificateDer<'static> {
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let first = TestCertificate::new("reload");
    let server = tls_server(&first, |_| {}).await;
    let trusts_first = first.client(false);
    let url = format!("{}/healthz", server.base);
    assert!(trusts_first.get(&url).send().await.is_ok());

    let second = first.renew();
    let trusts_second = second.client(false);
    let deadline = Instant::now() + Duration::from_secs(15);
    while trusts_second.get(&url).send().await.is_err() {
        assert!(Instant::now() < deadline, "the renewed certificate was never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reloads(&server, "loaded").await, 1.0);

    std::fs::write(&second.cert, "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while reloads(&server, "refused").await < 1.0 {
        assert!(Instant::now() < deadline, "the broken file was never looked at");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let response = trusts_second.get(&url).send().await.expect("the previous certificate still serves");
    assert_eq!(response.status(), StatusCode::OK);
    server.stop().await;
}

async fn reloads(server: &TestServer, result: &str) -> f64 {
    let text =
        server.request(Method::GET, "/metrics", None, None).send().await.unwrap().text().await.unwrap();
    let series = format!("agent_inbox_tls_reloads_total{{result=\"{result}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn bad_certificate_files_refuse_to_start_naming_the_file() {
    let certificate = TestCertificate::new("refusals");
    let other = TestCertificate::new("refusals-other");
    let missing = certificate.dir.join("missing.pem");
    let garbage = certificate.dir.join("garbage.pem");
    std::fs::write(&garbage, "not pem at all").unwrap();
    let cases: [(&Path, &Path, &str); 4] = [
        (&missing, &certificate.key, "missing.pem: cannot be read"),
        (&certificate.cert, &missing, "tls_key"),
        (&garbage, &certificate.key, "garbage.pem: holds no PEM CERTIFICATE block"),
        (&certificate.cert, &other.key, "does not match the certificate"),
    ];
    for (cert, key, expected) in cases {
        let mut config = inbox_server::Config::default();
        config.database.url = format!("sqlite://{}", certificate.dir.join("never.db").display());
        config.tls.cert = Some(cert.to_owned());
        config.tls.key = Some(key.to_owned());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = inbox_server::run(config, listener, async {}).await.expect_err("refused");
        assert!(err.to_string().contains(expected), "{expected:?} in {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cors_answers_listed_origins_only() {
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.http.cors_origins = vec!["http://127.0.0.1:5555".into()]
    })
    .await;
    let preflight = |origin: &'static str| {
        server
            .request(Method::OPTIONS, "/v1/inbox/claim", None, None)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization, content-type")
            .send()
    };
    let approved = preflight("http://127.0.0.1:5555").await.unwrap();
    assert!(approved.status().is_success(), "{}", approved.status());
    assert_eq!(approved.headers()["access-control-allow-origin"], "http://127.0.0.1:5555");
    assert_eq!(approved.headers()["access-control-allow-credentials"], "true");
    let allowed_headers = approved.headers()["access-control-allow-headers"].to_str().unwrap().to_owned();
    assert!(allowed_headers.contains("authorization") && allowed_headers.contains("content-type"));

    let refused = preflight("http://evil.example:5555").await.unwrap();
    assert!(refused.headers().get("access-control-allow-origin").is_none(), "{:?}", refused.headers());

    let agent = server.agent("acme", "agent_cors").await;
    let listed = server
        .request(Method::GET, "/v1/inbox/head", Some(&agent), None)
        .header("origin", "http://127.0.0.1:5555")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.headers()["access-control-allow-origin"], "http://127.0.0.1:5555");
    let exposed = listed.headers()["access-control-expose-headers"].to_str().unwrap();
    assert!(exposed.contains("etag") && exposed.contains("retry-after"), "{exposed}");
    let unlisted = server
        .request(Method::GET, "/v1/inbox/head", Some(&agent), None)
        .header("origin", "http://localhost:5555")
        .send()
        .await
        .unwrap();
    assert!(unlisted.headers().get("access-control-allow-origin").is_none());

    let default = TestServer::start(Backend::Sqlite).await;
    let none = default
        .request(Method::GET, "/healthz", None, None)
        .header("origin", "http://127.0.0.1:5555")
        .send()
        .await
        .unwrap();
    assert!(none.headers().get("access-control-allow-origin").is_none(), "no CORS by default");
    default.stop().await;
    server.stop().await;
}

/// A listed origin may read its requests' timings (`nextHopProtocol` among them); an unlisted
/// one, or a request with no origin, is told nothing, and `*` is never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timing_allow_origin_names_listed_origins_only() {
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.http.cors_origins = vec!["http://127.0.0.1:5555".into()]
    })
    .await;
    let agent = server.agent("acme", "agent_timing").await;
    let head = |origin: Option<&'static str>| {
        let request = server.request(Method::GET, "/v1/inbox/head", Some(&agent), None);
        match origin {
            Some(origin) => request.header("origin", origin),
            None => request,
        }
        .send()
    };
    let listed = head(Some("http://127.0.0.1:5555")).await.unwrap();
    assert!(listed.status().is_success(), "{}", listed.status());
    assert_eq!(listed.headers()["timing-allow-origin"], "http://127.0.0.1:5555");
    for origin in [Some("http://localhost:5555"), None] {
        let answer = head(origin).await.unwrap();
        assert!(answer.headers().get("timing-allow-origin").is_none(), "{origin:?}: {:?}", answer.headers());
    }
    server.stop().await;
}
