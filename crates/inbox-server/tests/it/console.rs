//! The web console's HTTP side (`/console`): sign-in with an admin token only, the session
//! cookie's attributes and lifetime (`Secure` under HTTPS), the CSRF token on every change, the
//! same-origin rule, the Content-Security-Policy on every answer, the admin API reached through
//! `/console/api/*` within the tenant, and the live stream. The page itself is tested in
//! Chromium (`tests/console`, `scripts/test-console.sh`).

use std::time::Duration;

use inbox_core::{RecipientId, TenantId};
use inbox_server::CallerKind;
use reqwest::header::{self, HeaderMap};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{TestServer, assert_problem, both_backends, read};

both_backends!(
    signing_in_sets_a_strict_cookie_and_reaches_the_admin_api,
    changes_need_the_csrf_token,
    signing_out_ends_the_sign_in_on_every_node,
);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A browser-like client of one server: never follows redirects (the sign-in's Set-Cookie is
/// on the 303), sends the page's Origin on posts.
struct Browser {
    base: String,
    client: reqwest::Client,
}

/// A signed-in console: its cookie header and its CSRF token.
struct Signed {
    cookie: String,
    csrf: String,
}

impl Browser {
    fn new(server: &TestServer) -> Browser {
        Self::trusting(server, None)
    }

    /// A browser that trusts `root_pem` (a test server's certificate) for HTTPS.
    fn trusting(server: &TestServer, root_pem: Option<&str>) -> Browser {
        let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = root_pem {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap());
        }
        Browser { base: server.base.clone(), client: builder.build().unwrap() }
    }

    async fn sign_in_raw(&self, token: &str, origin: Option<&str>) -> reqwest::Response {
        let mut request =
            self.client.post(format!("{}/console/sign-in", self.base)).form(&[("token", token)]);
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        request.send().await.unwrap()
    }

    /// Signs in and returns the cookie and the CSRF token the page would read.
    async fn sign_in(&self, token: &str) -> Signed {
        let response = self.sign_in_raw(token, Some(&self.base)).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{:?}", response.text().await);
        let cookie = cookie_pair(response.headers());
        let (status, session) =
            self.call(Method::GET, "/console/api/session", Some(&cookie), None, None).await;
        assert_eq!(status, StatusCode::OK, "{session}");
        Signed { cookie, csrf: session["csrf_token"].as_str().unwrap().to_owned() }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        cookie: Option<&str>,
        csrf: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        read(self.request(method, path, cookie, csrf, body).send().await.unwrap()).await
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        cookie: Option<&str>,
        csrf: Option<&str>,
        body: Option<Value>,
    ) -> reqwest::RequestBuilder {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        if let Some(csrf) = csrf {
            request = request.header("x-csrf-token", csrf);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request
    }
}

/// `agent_inbox_console=...` from the answer's Set-Cookie.
fn cookie_pair(headers: &HeaderMap) -> String {
    let set_cookie = set_cookie(headers).expect("a Set-Cookie header");
    set_cookie.split(';').next().unwrap().trim().to_owned()
}

fn set_cookie(headers: &HeaderMap) -> Option<String> {
    headers.get(header::SET_COOKIE).map(|v| v.to_str().unwrap().to_owned())
}

fn max_age(set_cookie: &str) -> u64 {
    set_cookie
        .split(';')
        .find_map(|attribute| attribute.trim().strip_prefix("Max-Age="))
        .expect("Max-Age")
        .parse()
        .unwrap()
}

async fn admin(server: &TestServer, tenant: &str, ttl: Option<Duration>) -> String {
    server
        .tokens
        .issue(
            &TenantId::new(tenant).unwrap(),
            &RecipientId::new("ops_ana").unwrap(),
            CallerKind::Admin,
            inbox_server::tokens::ADMIN_SCOPES,
            ttl,
            false,
        )
        .await
        .unwrap()
        .access_token
}

/// Publishes one event to `agent`, claims it and acknowledges it as failed: dead-lettered.
async fn dead_letter(server: &TestServer, tenant: &str, agent: &str) -> String {
    let publisher = server.publisher(tenant).await;
    let published = server.publish(&publisher, &[agent], json!({"n": 1})).await;
    let event_id = published["deliveries"][0]["event_id"].as_str().unwrap().to_owned();
    let token = server.agent(tenant, agent).await;
    let (status, claimed) = server.post("/v1/inbox/claim", &token, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let claim = &claimed["claims"][0];
    assert_eq!(claim["event_id"], event_id.as_str());
    let ack =
        json!({"acks": [{"event_id": event_id, "lease_token": claim["lease_token"], "result": "failed"}]});
    let (status, acked) = server.post("/v1/inbox/acknowledge", &token, ack).await;
    assert_eq!(
        (status, acked["results"][0]["ack_state"].as_str()),
        (StatusCode::OK, Some("dead_letter")),
        "{acked}"
    );
    event_id
}

async fn signing_in_sets_a_strict_cookie_and_reaches_the_admin_api(backend: inbox_conformance::Backend) {
    let server = TestServer::start(backend).await;
    let browser = Browser::new(&server);

    // An admin token good for 10 h signs in for the console's 8 h at most.
    let long = admin(&server, "t1", Some(Duration::from_secs(10 * 3600))).await;
    let response = browser.sign_in_raw(&long, Some(&server.base)).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[header::LOCATION], "/console");
    let set = set_cookie(response.headers()).unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.split("; ").any(|a| a == attribute), "{attribute} in {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: no Secure flag ({set})");
    assert_eq!(max_age(&set), 8 * 3600);
    let console_token = cookie_pair(response.headers()).split_once('=').unwrap().1.to_owned();
    assert_ne!(console_token, long, "the cookie holds a token of its own, not the admin token");

    // A short admin token gives a sign-in no longer than itself.
    let short = admin(&server, "t1", Some(Duration::from_secs(600))).await;
    let response = browser.sign_in_raw(&short, Some(&server.base)).await;
    let age = max_age(&set_cookie(response.headers()).unwrap());
    assert!((590..=600).contains(&age), "Max-Age {age} for a token of 600 s");

    let signed = browser.sign_in(&long).await;
    let (status, session) =
        browser.call(Method::GET, "/console/api/session", Some(&signed.cookie), None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((session["tenant_id"].as_str(), session["subject"].as_str()), (Some("t1"), Some("ops_ana")));
    assert!(session["expires_at_utc"].as_str().is_some_and(|t| t.ends_with('Z')), "{session}");

    // The admin API answers through the console, within the admin's tenant only.
    let publisher = server.publisher("t1").await;
    server.publish(&publisher, &["agent_alpha"], json!({"n": 1})).await;
    let other = server.publisher("t2").await;
    server.publish(&other, &["agent_of_t2"], json!({"n": 2})).await;
    let (status, body) =
        browser.call(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let agents: Vec<&str> =
        body["inboxes"].as_array().unwrap().iter().map(|i| i["recipient_id"].as_str().unwrap()).collect();
    assert_eq!(agents, ["agent_alpha"], "another tenant's inboxes stay invisible");
    assert_eq!(body["inboxes"][0]["depth"], 1);
    let (status, body) =
        browser.call(Method::GET, "/console/api/parked?limit=10", Some(&signed.cookie), None, None).await;
    assert_eq!((status, body["events"].as_array().map(Vec::len)), (StatusCode::OK, Some(0)), "{body}");

    // The admin API's own validation and problems come through unchanged.
    let refused =
        browser.call(Method::GET, "/console/api/parked?limit=x", Some(&signed.cookie), None, None).await;
    assert_problem(&refused, StatusCode::BAD_REQUEST, "invalid_query");
    let refused =
        browser.call(Method::GET, "/console/api/no-such-thing", Some(&signed.cookie), None, None).await;
    assert_problem(&refused, StatusCode::NOT_FOUND, "route_not_found");
    // Only admin routes are reachable, whatever the path says.
    let refused =
        browser.call(Method::GET, "/console/api/%2e%2e/inbox/head", Some(&signed.cookie), None, None).await;
    assert_problem(&refused, StatusCode::NOT_FOUND, "route_not_found");
    server.stop().await;
}

async fn changes_need_the_csrf_token(backend: inbox_conformance::Backend) {
    let server = TestServer::start(backend).await;
    let browser = Browser::new(&server);
    let event_id = dead_letter(&server, "t1", "agent_alpha").await;
    let signed = browser.sign_in(&admin(&server, "t1", None).await).await;
    let requeue = json!({"recipient_id": "agent_alpha", "event_ids": [event_id]});

    let refused = browser
        .call(Method::POST, "/console/api/parked/requeue", Some(&signed.cookie), None, Some(requeue.clone()))
        .await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "csrf_mismatch");
    let other = browser.sign_in(&admin(&server, "t1", None).await).await;
    assert_ne!(other.csrf, signed.csrf, "each sign-in has its own CSRF token");
    let refused = browser
        .call(
            Method::POST,
            "/console/api/parked/requeue",
            Some(&signed.cookie),
            Some(&other.csrf),
            Some(requeue.clone()),
        )
        .await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "csrf_mismatch");
    let (_, parked) =
        browser.call(Method::GET, "/console/api/parked", Some(&signed.cookie), None, None).await;
    assert_eq!(parked["events"][0]["event_id"], event_id.as_str(), "a refused change changed nothing");

    let (status, body) = browser
        .call(
            Method::POST,
            "/console/api/parked/requeue",
            Some(&signed.cookie),
            Some(&signed.csrf),
            Some(requeue),
        )
        .await;
    assert_eq!((status, body["results"][0]["ok"].as_bool()), (StatusCode::OK, Some(true)), "{body}");
    let (_, parked) =
        browser.call(Method::GET, "/console/api/parked", Some(&signed.cookie), None, None).await;
    assert_eq!(parked["events"], json!([]), "requeued: no longer parked");

    // Signing out needs the CSRF token too, and clears the cookie.
    let refused = browser.call(Method::POST, "/console/sign-out", Some(&signed.cookie), None, None).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "csrf_mismatch");
    let response = browser
        .request(Method::POST, "/console/sign-out", Some(&signed.cookie), Some(&signed.csrf), None)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let cleared = set_cookie(response.headers()).unwrap();
    assert!(cleared.starts_with("agent_inbox_console=;") && max_age(&cleared) == 0, "{cleared}");
    server.stop().await;
}

/// Signing out lists the sign-in in the database: its token is refused from then on, on every
/// node, as a cookie and as a bearer token (a copy of the cookie is worth nothing), while other
/// tokens of the same operator keep working.
async fn signing_out_ends_the_sign_in_on_every_node(backend: inbox_conformance::Backend) {
    let a = TestServer::start(backend).await;
    let b = a.start_beside(|_| {}).await;
    let (on_a, on_b) = (Browser::new(&a), Browser::new(&b));
    let token = admin(&a, "t1", None).await;
    let signed = on_a.sign_in(&token).await;
    let console_token = signed.cookie.strip_prefix("agent_inbox_console=").unwrap().to_owned();
    let (status, body) =
        on_b.call(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None).await;
    assert_eq!(status, StatusCode::OK, "the sign-in works on another node: {body}");
    let (status, body) = b.call(Method::GET, "/v1/admin/inboxes", Some(&console_token), None).await;
    assert_eq!(status, StatusCode::OK, "and as a bearer token: {body}");

    let response = on_a
        .request(Method::POST, "/console/sign-out", Some(&signed.cookie), Some(&signed.csrf), None)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    for browser in [&on_a, &on_b] {
        let refused =
            browser.call(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None).await;
        assert_problem(&refused, StatusCode::UNAUTHORIZED, "invalid_token");
        assert!(refused.1["detail"].as_str().unwrap().contains("signed out"), "{}", refused.1);
    }
    let refused = b.call(Method::GET, "/v1/admin/inboxes", Some(&console_token), None).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "invalid_token");
    let (status, body) = b.call(Method::GET, "/v1/admin/inboxes", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "the admin token that signed in still works: {body}");
    // Signing out again (a second tab) changes nothing and still clears the cookie.
    let again = on_b
        .request(Method::POST, "/console/sign-out", Some(&signed.cookie), Some(&signed.csrf), None)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NO_CONTENT);
    let fresh = on_b.sign_in(&token).await;
    let (status, _) = on_b.call(Method::GET, "/console/api/inboxes", Some(&fresh.cookie), None, None).await;
    assert_eq!(status, StatusCode::OK, "a new sign-in works");
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_cookie_the_console_api_is_refused() {
    let server = TestServer::start(inbox_conformance::Backend::Sqlite).await;
    let browser = Browser::new(&server);
    let token = admin(&server, "t1", None).await;
    for (method, path) in [
        (Method::GET, "/console/api/session"),
        (Method::GET, "/console/api/inboxes"),
        (Method::GET, "/console/api/live"),
        (Method::POST, "/console/api/parked/purge"),
        (Method::POST, "/console/sign-out"),
    ] {
        let refused = browser.call(method.clone(), path, None, None, None).await;
        assert_problem(&refused, StatusCode::UNAUTHORIZED, "unauthorized");
        // The console authenticates by its cookie only: a bearer token does not stand in for it.
        let response =
            browser.request(method, path, None, None, None).bearer_auth(&token).send().await.unwrap();
        assert_problem(&read(response).await, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let forged = format!("agent_inbox_console={token}x");
    let refused = browser.call(Method::GET, "/console/api/inboxes", Some(&forged), None, None).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "invalid_token");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_an_admin_token_signs_in() {
    let server = TestServer::start(inbox_conformance::Backend::Sqlite).await;
    let browser = Browser::new(&server);
    let agent = server.agent("t1", "agent_alpha").await;
    let publisher = server.publisher("t1").await;
    let scopeless_admin = server.token("t1", "ops_ana", CallerKind::Admin, "inbox.poll").await;
    for (token, what) in [
        (&agent, "an agent token"),
        (&publisher, "a publisher token"),
        (&scopeless_admin, "without the admin scope"),
    ] {
        let response = browser.sign_in_raw(token, Some(&server.base)).await;
        assert!(set_cookie(response.headers()).is_none(), "no cookie for {what}");
        let refused = read(response).await;
        // The one operator rule answers as the admin API does: none of them has the scope.
        assert_problem(&refused, StatusCode::FORBIDDEN, "scope_missing");
        assert!(refused.1["detail"].as_str().unwrap().contains(what), "{}", refused.1);
    }
    let refused = read(browser.sign_in_raw("not-a-token", Some(&server.base)).await).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "invalid_token");
    let response = browser
        .client
        .post(format!("{}/console/sign-in", server.base))
        .json(&json!({"token": agent}))
        .send()
        .await
        .unwrap();
    assert_problem(&read(response).await, StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let response = browser
        .client
        .post(format!("{}/console/sign-in", server.base))
        .form(&[("tok", "x")])
        .send()
        .await
        .unwrap();
    assert_problem(&read(response).await, StatusCode::BAD_REQUEST, "invalid_field");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn other_origins_are_refused_even_when_cors_lists_them() {
    let server = TestServer::start_with(inbox_conformance::Backend::Sqlite, |config| {
        config.http.cors_origins = vec!["http://app.example.net".to_owned()];
    })
    .await;
    let browser = Browser::new(&server);
    let token = admin(&server, "t1", None).await;
    let refused = read(browser.sign_in_raw(&token, Some("http://app.example.net")).await).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "origin_mismatch");
    let signed = browser.sign_in(&token).await;
    let response = browser
        .request(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None)
        .header(header::ORIGIN, "http://app.example.net")
        .send()
        .await
        .unwrap();
    assert_problem(&read(response).await, StatusCode::FORBIDDEN, "origin_mismatch");
    let response = browser
        .request(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None)
        .header("sec-fetch-site", "same-site")
        .send()
        .await
        .unwrap();
    assert_problem(&read(response).await, StatusCode::FORBIDDEN, "origin_mismatch");
    let response = browser
        .request(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None)
        .header(header::ORIGIN, &server.base)
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "the console's own origin passes");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_console_answer_carries_the_strict_policy() {
    let server = TestServer::start(inbox_conformance::Backend::Sqlite).await;
    let browser = Browser::new(&server);
    let page = browser.request(Method::GET, "/console", None, None, None).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    let etag = page.headers()[header::ETAG].clone();
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"<script type="module" src="/console/assets/main.js"></script>"#), "{html}");

    for path in [
        "/console",
        "/console/assets/main.js",
        "/console/assets/console.css",
        "/console/assets/nope.js",
        "/console/api/inboxes",
    ] {
        let response = browser.request(Method::GET, path, None, None, None).send().await.unwrap();
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CSP, "{path}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{path}");
        assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{path}");
    }
    let script =
        browser.request(Method::GET, "/console/assets/main.js", None, None, None).send().await.unwrap();
    assert!(script.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/javascript"));
    let missing =
        read(browser.request(Method::GET, "/console/assets/nope.js", None, None, None).send().await.unwrap())
            .await;
    assert_problem(&missing, StatusCode::NOT_FOUND, "not_found");
    let again = browser
        .request(Method::GET, "/console", None, None, None)
        .header(header::IF_NONE_MATCH, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "an unchanged page is revalidated, not resent");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_live_stream_says_changed_after_a_publish() {
    let server = TestServer::start(inbox_conformance::Backend::Sqlite).await;
    let browser = Browser::new(&server);
    let signed = browser.sign_in(&admin(&server, "t1", None).await).await;
    let mut stream = browser
        .request(Method::GET, "/console/api/live", Some(&signed.cookie), None, None)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(stream.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/event-stream"));
    let mut seen = String::new();
    let mut read_until = async |needle: &str, seen: &mut String| {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !seen.contains(needle) {
                let chunk = stream.chunk().await.unwrap().expect("the stream stays open");
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {needle:?} within 10 s; got {seen:?}"));
    };
    read_until("event: ready", &mut seen).await;
    let publisher = server.publisher("t1").await;
    server.publish(&publisher, &["agent_alpha"], json!({"n": 1})).await;
    read_until("event: changed", &mut seen).await;
    // An agent's claim moves no head, and is announced too.
    seen.clear();
    let agent = server.agent("t1", "agent_alpha").await;
    let (status, _) = server.post("/v1/inbox/claim", &agent, json!({"limit": 1})).await;
    assert_eq!(status, StatusCode::OK);
    read_until("event: changed", &mut seen).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_https_the_cookie_is_secure() {
    let dir = std::env::temp_dir().join(format!("agent-inbox-console-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let server = TestServer::start_with(inbox_conformance::Backend::Sqlite, |config| {
        config.tls.cert = Some(cert.clone());
        config.tls.key = Some(key.clone());
    })
    .await;
    assert!(server.base.starts_with("https://"));
    let browser = Browser::trusting(&server, Some(&made.cert.pem()));
    let token = admin(&server, "t1", None).await;
    let refused =
        read(browser.sign_in_raw(&token, Some(&server.base.replace("https:", "http:"))).await).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "origin_mismatch");
    let response = browser.sign_in_raw(&token, Some(&server.base)).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let set = set_cookie(response.headers()).unwrap();
    assert!(set.split("; ").any(|a| a == "Secure"), "{set}");
    let signed = browser.sign_in(&token).await;
    let (status, _) =
        browser.call(Method::GET, "/console/api/inboxes", Some(&signed.cookie), None, None).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
