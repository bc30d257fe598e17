//! The console's sign-in: an admin token is posted once, checked by the server's own
//! [`TokenService`](crate::TokenService), and traded for a console token of the same tenant,
//! subject and scopes kept in an HttpOnly, SameSite=Strict cookie scoped to `/console`.
//!
//! Cross-site requests are refused three ways: the browser does not send a SameSite=Strict
//! cookie with them; every console request that says where it comes from (`Origin`,
//! `Sec-Fetch-Site`) must come from the console's own origin, so not even an origin listed in
//! `cors_origins` can read the console's answers; and every state-changing request carries the
//! CSRF token bound to the cookie (`x-csrf-token`), which only a page of this origin can read.
//!
//! The console token is a JWT that names its sign-in: signing out lists the sign-in in the
//! database, and every node refuses the token from then on (a copied cookie included); it
//! also stops working when it expires (at most [`CONSOLE_TOKEN_TTL`]), or earlier when its
//! signing key is retired.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_api::time::format_utc;
use inbox_api::{ProblemCode, Scope};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::caller::Caller;
use crate::config::Config;
use crate::error::ApiError;
use crate::http::origin::RequestOrigin;
use crate::http::stream_params::forwarded_https;
use crate::node::AppState;
use crate::tokens::AuthFailure;

/// Name of the console's session cookie.
pub const CONSOLE_COOKIE: &str = "agent_inbox_console";
/// The header every state-changing console request carries.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a console sign-in lasts at most: one working shift, so an operator signs in once
/// a day, while a cookie left in a browser is useless by the next morning. Never longer than
/// the admin token that signed in.
pub const CONSOLE_TOKEN_TTL: Duration = Duration::from_secs(8 * 60 * 60);
/// The largest sign-in form accepted (a token is a few hundred bytes).
pub(super) const SIGN_IN_BYTES_MAX: usize = 16 * 1024;

/// A signed-in console request: the console token's caller, an admin of its tenant.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub caller: Caller,
    /// The console token from the cookie, sent on to the admin routes as a bearer token.
    pub token: String,
}

impl FromRequestParts<AppState> for ConsoleSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        same_origin(&state.config, &parts.headers)?;
        let token = console_cookie(&parts.headers).ok_or_else(signed_out)?.to_owned();
        if !is_safe(&parts.method) {
            check_csrf(&parts.headers, &token)?;
        }
        let caller = state.tokens.verify(&token).await.map_err(session_refused)?;
        caller.require_operator()?;
        Ok(ConsoleSession { caller, token })
    }
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    token: String,
}

/// `POST /console/sign-in`: checks the admin token and sets the console cookie, then sends the
/// browser to the console (303). Refusals are problem documents the page shows.
pub async fn sign_in(
    State(state): State<AppState>,
    mut parts: Parts,
    form: Result<Form<SignInForm>, FormRejection>,
) -> Result<Response, ApiError> {
    same_origin(&state.config, &parts.headers)?;
    let Form(form) = form.map_err(|e| form_problem(&e))?;
    let presented = form.token.trim();
    // The bearer extractor authenticates it, so a wrong token is counted and throttled per
    // client address exactly like one sent to the API.
    let bearer = HeaderValue::from_str(&format!("Bearer {presented}")).map_err(|_| {
        ApiError::from(AuthFailure::Malformed("it has characters a token never has".to_owned()))
    })?;
    parts.headers.insert(header::AUTHORIZATION, bearer);
    let caller = Caller::from_request_parts(&mut parts, &state).await?;
    caller.require_operator()?;
    let remaining = token_expiry(presented).map(|exp| exp - inbox_api::time::now_ms() / 1000);
    let ttl = match remaining {
        Some(seconds) if seconds < 1 => return Err(AuthFailure::Expired.into()),
        Some(seconds) => CONSOLE_TOKEN_TTL.min(Duration::from_secs(seconds as u64)),
        None => CONSOLE_TOKEN_TTL,
    };
    // Scopes this server knows only: an external identity provider's token may carry others.
    let scopes: Vec<&str> = caller
        .scopes
        .iter()
        .map(String::as_str)
        .filter(|s| s.parse::<Scope>().is_ok() || s.starts_with(Scope::TENANT_READ_PREFIX))
        .collect();
    let issued = state
        .tokens
        .issue_sign_in(&caller.tenant_id, &caller.subject, caller.kind, &scopes.join(" "), ttl)
        .await?;
    tracing::info!(tenant = %caller.tenant_id, subject = %caller.subject, "console sign-in");
    let secure = if forwarded_https(&parts.headers) { "; Secure" } else { "" };
    let cookie = format!(
        "{CONSOLE_COOKIE}={}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        issued.access_token,
        ttl.as_secs()
    );
    let cookie = HeaderValue::from_str(&cookie).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, HeaderValue::from_static("/console")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
    )
        .into_response())
}

/// `POST /console/sign-out`: ends the sign-in on every node, so its token is refused from now
/// on even where it was copied, and forgets the cookie (the CSRF token is required, so another
/// site cannot sign an operator out). It works with an expired console token too.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    same_origin(&state.config, &headers)?;
    let token = console_cookie(&headers).ok_or_else(signed_out)?;
    check_csrf(&headers, token)?;
    state.tokens.sign_out(token).await?;
    let cleared = format!("{CONSOLE_COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict");
    let cleared = HeaderValue::from_str(&cleared).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        StatusCode::NO_CONTENT,
        [(header::SET_COOKIE, cleared), (header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
    )
        .into_response())
}

/// Who is signed in, until when, and the CSRF token the page sends on every change.
#[derive(Debug, Serialize)]
pub struct SessionView {
    tenant_id: String,
    subject: String,
    csrf_token: String,
    expires_at_utc: Option<String>,
}

/// `GET /console/api/session`
pub async fn describe(session: ConsoleSession) -> Response {
    let view = SessionView {
        tenant_id: session.caller.tenant_id.to_string(),
        subject: session.caller.subject.to_string(),
        csrf_token: csrf_token(&session.token),
        expires_at_utc: token_expiry(&session.token).map(|exp| format_utc(exp * 1000)),
    };
    ([(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))], Json(view)).into_response()
}

/// The CSRF token bound to a console token: only a page that can read this origin's answers
/// learns it, and it changes with every sign-in. It reveals nothing of the token itself.
pub fn csrf_token(console_token: &str) -> String {
    let digest = Sha256::new().chain_update(b"csrf").chain_update(console_token.as_bytes()).finalize();
    URL_SAFE_NO_PAD.encode(digest)
}

fn check_csrf(headers: &HeaderMap, console_token: &str) -> Result<(), ApiError> {
    let expected = csrf_token(console_token);
    let presented = headers.get(CSRF_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    if constant_time_eq(presented, expected.as_bytes()) {
        return Ok(());
    }
    let detail = if presented.is_empty() {
        "this console request changes something and needs the x-csrf-token header; reload the console"
    } else {
        "the x-csrf-token header does not belong to this sign-in; reload the console"
    };
    Err(ApiError::forbidden(ProblemCode::CsrfMismatch, detail))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Refuses a request a browser says comes from another origin (or another site), even one
/// listed in `cors_origins`. Requests without `Origin` or `Sec-Fetch-Site` (curl, scripts)
/// carry no ambient browser authority worth guarding beyond the cookie, which only this
/// origin's pages hold.
fn same_origin(config: &Config, headers: &HeaderMap) -> Result<(), ApiError> {
    let refused = || {
        ApiError::forbidden(
            ProblemCode::OriginMismatch,
            "console requests must come from the console's own pages; open the console at /console on this server",
        )
    };
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return Err(refused());
        }
    }
    match RequestOrigin::of(config, headers) {
        RequestOrigin::Unnamed | RequestOrigin::Own => Ok(()),
        RequestOrigin::Listed | RequestOrigin::Other => Err(refused()),
    }
}

fn signed_out() -> ApiError {
    ApiError::unauthorized(
        ProblemCode::Unauthorized,
        "sign in to the console first: open /console and enter an admin token",
    )
}

fn session_refused(failure: AuthFailure) -> ApiError {
    match failure {
        AuthFailure::Expired => ApiError::unauthorized(
            ProblemCode::TokenExpired,
            "your console sign-in has expired; sign in again with an admin token",
        ),
        AuthFailure::Missing | AuthFailure::Malformed(_) | AuthFailure::Invalid(_) => ApiError::unauthorized(
            ProblemCode::InvalidToken,
            "the console cookie is not valid (its signing key may have been retired); sign in again",
        ),
        AuthFailure::SignedOut => ApiError::unauthorized(
            ProblemCode::InvalidToken,
            "this console sign-in was signed out; sign in again with an admin token",
        ),
        unavailable @ AuthFailure::KeysUnavailable(_) => unavailable.into(),
    }
}

fn form_problem(rejection: &FormRejection) -> ApiError {
    match rejection {
        FormRejection::InvalidFormContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::UnsupportedMediaType,
            "post the sign-in form as application/x-www-form-urlencoded with a token field",
        ),
        FormRejection::BytesRejection(_) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ProblemCode::PayloadTooLarge,
            format!("the sign-in form is over {SIGN_IN_BYTES_MAX} bytes; paste the admin token only"),
        ),
        _ => ApiError::invalid_field("token", "is missing; paste an admin token into the sign-in form"),
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn console_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == CONSOLE_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// When a verified console token expires.
pub(super) fn expires_at(token: &str) -> Option<std::time::SystemTime> {
    let exp = u64::try_from(token_expiry(token)?).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(exp))
}

/// The `exp` claim (epoch seconds) of a JWT that was verified already, read without checking
/// it again: how long a console sign-in may last depends on it.
fn token_expiry(token: &str) -> Option<i64> {
    #[derive(Deserialize)]
    struct Expiry {
        exp: i64,
    }
    let claims = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(claims.trim_end_matches('=')).ok()?;
    serde_json::from_slice::<Expiry>(&bytes).ok().map(|e| e.exp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_token_is_bound_to_the_cookie() {
        let a = csrf_token("token-a");
        assert_eq!(a, csrf_token("token-a"));
        assert_ne!(a, csrf_token("token-b"));
        assert_eq!(a.len(), 43, "base64url of 32 bytes, unpadded");
        let mut headers = HeaderMap::new();
        assert_eq!(check_csrf(&headers, "token-a").unwrap_err().code, ProblemCode::CsrfMismatch);
        headers.insert(CSRF_HEADER, HeaderValue::from_str(&csrf_token("token-b")).unwrap());
        assert_eq!(check_csrf(&headers, "token-a").unwrap_err().status, StatusCode::FORBIDDEN);
        headers.insert(CSRF_HEADER, HeaderValue::from_str(&a).unwrap());
        assert!(check_csrf(&headers, "token-a").is_ok());
    }

    #[test]
    fn only_the_consoles_own_origin_passes() {
        let mut config = Config::default();
        config.http.cors_origins = vec!["http://app.example.net:8080".to_owned()];
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("inbox.example.net:8080"));
        assert!(same_origin(&config, &headers).is_ok(), "no Origin: not a browser's cross-site request");
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://inbox.example.net:8080"));
        assert!(same_origin(&config, &headers).is_ok());
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://app.example.net:8080"));
        let refused = same_origin(&config, &headers).unwrap_err().code;
        assert_eq!(refused, ProblemCode::OriginMismatch, "not even a cors_origins origin");
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://inbox.example.net:8080"));
        assert!(same_origin(&config, &headers).is_err(), "another scheme is another origin");
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(same_origin(&config, &headers).is_ok());
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-site"));
        assert!(same_origin(&config, &headers).is_err(), "a sibling subdomain is not the console");
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        assert_eq!(console_cookie(&headers), None);
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; agent_inbox_console=abc.def; b=2"));
        assert_eq!(console_cookie(&headers), Some("abc.def"));
        headers.insert(header::COOKIE, HeaderValue::from_static("agent_inbox_console="));
        assert_eq!(console_cookie(&headers), None, "a cleared cookie is no sign-in");
    }

    #[test]
    fn the_expiry_is_read_from_the_claims() {
        let claims = URL_SAFE_NO_PAD.encode(br#"{"sub":"ops","exp":1700000000}"#);
        assert_eq!(token_expiry(&format!("h.{claims}.s")), Some(1_700_000_000));
        assert_eq!(token_expiry("not a jwt"), None);
    }
}
