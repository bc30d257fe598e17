//! The console's files, embedded in the binary at build time (hand-written HTML, CSS and
//! JavaScript modules: no build step, nothing fetched from elsewhere), and the headers every
//! console answer carries: a strict Content-Security-Policy that allows this origin's scripts
//! and styles only (no inline script or style, no `eval`, no framing), `nosniff`, and no
//! referrer.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use inbox_api::ProblemCode;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// The console's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
#[derive(Debug)]
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! assets {
    ($($name:literal => $content_type:literal,)+) => {
        &[$(Asset { name: $name, content_type: $content_type, body: include_bytes!(concat!("assets/", $name)) },)+]
    };
}

/// Every file the console serves; `index.html` is the page at `/console`.
static ASSETS: &[Asset] = assets! {
    "index.html" => "text/html; charset=utf-8",
    "console.css" => "text/css; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
    "main.js" => "text/javascript; charset=utf-8",
    "api.js" => "text/javascript; charset=utf-8",
    "dom.js" => "text/javascript; charset=utf-8",
    "format.js" => "text/javascript; charset=utf-8",
    "dialogs.js" => "text/javascript; charset=utf-8",
    "table.js" => "text/javascript; charset=utf-8",
    "live.js" => "text/javascript; charset=utf-8",
    "view-overview.js" => "text/javascript; charset=utf-8",
    "view-inbox.js" => "text/javascript; charset=utf-8",
    "view-event.js" => "text/javascript; charset=utf-8",
    "view-parked.js" => "text/javascript; charset=utf-8",
    "view-sessions.js" => "text/javascript; charset=utf-8",
    "view-callbacks.js" => "text/javascript; charset=utf-8",
    "view-keys.js" => "text/javascript; charset=utf-8",
    "view-charts.js" => "text/javascript; charset=utf-8",
    "charts.js" => "text/javascript; charset=utf-8",
    "widgets.js" => "text/javascript; charset=utf-8",
    "actions.js" => "text/javascript; charset=utf-8",
};

/// `GET /console`: the page (the same for signed-in and signed-out browsers; the page asks
/// `/console/api/session` which to show).
pub async fn page(headers: HeaderMap) -> Response {
    serve("index.html", &headers).unwrap_or_else(IntoResponse::into_response)
}

/// `GET /console/assets/{file}`
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    if file == "index.html" {
        return not_found(&file).into_response();
    }
    serve(&file, &headers).unwrap_or_else(IntoResponse::into_response)
}

/// A file with an `ETag` (its SHA-256), revalidated on every use (`no-cache`), so a new binary's
/// console is never mixed with an old one's cached modules.
fn serve(name: &str, request: &HeaderMap) -> Result<Response, ApiError> {
    let asset = ASSETS.iter().find(|a| a.name == name).ok_or_else(|| not_found(name))?;
    let etag = etags().get(name).cloned().unwrap_or_else(|| HeaderValue::from_static("\"\""));
    let cache = (header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if request.get(header::IF_NONE_MATCH).is_some_and(|v| v == etag) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag), cache]).into_response());
    }
    let content_type = (header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    Ok(([content_type, (header::ETAG, etag), cache], asset.body).into_response())
}

fn etags() -> &'static HashMap<&'static str, HeaderValue> {
    static ETAGS: OnceLock<HashMap<&'static str, HeaderValue>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .filter_map(|a| {
                let digest = hex::encode(&Sha256::digest(a.body)[..12]);
                Some((a.name, HeaderValue::from_str(&format!("\"{digest}\"")).ok()?))
            })
            .collect()
    })
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ProblemCode::NotFound,
        format!("the console has no file {name:?}; open the console at /console"),
    )
}

/// Adds the console's security headers to every answer under `/console`.
pub async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_the_page_loads_is_embedded_and_nothing_is_inline() {
        let page = std::str::from_utf8(ASSETS[0].body).unwrap();
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "CSP forbids inline script and style"
        );
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(asset.body).unwrap();
            assert!(
                !text.contains("innerHTML"),
                "{}: data goes into textContent, never innerHTML",
                asset.name
            );
            assert!(!text.contains("eval("), "{}: CSP forbids eval", asset.name);
            for import in text.lines().filter_map(|l| l.split(" from \"./").nth(1)) {
                let file = import.split('"').next().unwrap();
                assert!(
                    ASSETS.iter().any(|a| a.name == file),
                    "{} imports {file}, which is not embedded",
                    asset.name
                );
            }
        }
    }

    #[test]
    fn the_policy_allows_only_this_origin() {
        for directive in
            ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"]
        {
            assert!(CONTENT_SECURITY_POLICY.contains(directive), "{directive}");
        }
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
