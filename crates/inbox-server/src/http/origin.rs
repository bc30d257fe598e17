//! Where a browser request comes from, decided once for every check that needs it: the
//! console's requests and a cookie-authenticated WebSocket. A request's `Origin` is compared
//! with this server's own origin as the client reached it (scheme, host and port) and with the
//! `cors_origins` allow-list.

use axum::http::{HeaderMap, header};

use crate::config::Config;
use crate::http::cors;
use crate::http::stream_params::forwarded_https;

/// Where a request says it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestOrigin {
    /// No `Origin` header: not a browser's cross-origin request (curl, a script).
    Unnamed,
    /// A page of this server's own origin.
    Own,
    /// An origin listed in `cors_origins`.
    Listed,
    /// Any other origin.
    Other,
}

impl RequestOrigin {
    /// The origin a request's headers name.
    pub(crate) fn of(config: &Config, headers: &HeaderMap) -> RequestOrigin {
        let Some(origin) = headers.get(header::ORIGIN) else { return RequestOrigin::Unnamed };
        let Ok(origin) = origin.to_str() else { return RequestOrigin::Other };
        if is_own(headers, origin) {
            RequestOrigin::Own
        } else if cors::allowed(config, origin) {
            RequestOrigin::Listed
        } else {
            RequestOrigin::Other
        }
    }
}

/// Whether `origin` is this server's own: `https` exactly when the client used HTTPS (as
/// `middleware::normalize` leaves `X-Forwarded-Proto`), and the `Host` header's host and port,
/// a scheme's default port the same as none.
fn is_own(headers: &HeaderMap, origin: &str) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()).filter(|h| !h.is_empty()) else {
        return false;
    };
    let scheme = if forwarded_https(headers) { "https" } else { "http" };
    let origin = origin.to_ascii_lowercase();
    let Some(authority) = origin.strip_prefix(scheme).and_then(|rest| rest.strip_prefix("://")) else {
        return false;
    };
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    let bare =
        |authority: &str| authority.strip_suffix(default_port).unwrap_or(authority).to_ascii_lowercase();
    bare(authority) == bare(host)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn origin_of(config: &Config, host: &str, https: bool, origin: Option<&'static str>) -> RequestOrigin {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if https {
            headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_static(origin));
        }
        RequestOrigin::of(config, &headers)
    }

    #[test]
    fn scheme_host_and_port_make_the_origin() {
        use RequestOrigin::*;
        let mut config = Config::default();
        config.http.cors_origins = vec!["https://app.example.net".to_owned()];
        let host = "inbox.example.net:8080";
        assert_eq!(origin_of(&config, host, false, None), Unnamed);
        assert_eq!(origin_of(&config, host, false, Some("http://inbox.example.net:8080")), Own);
        assert_eq!(origin_of(&config, host, false, Some("http://INBOX.example.net:8080")), Own);
        assert_eq!(origin_of(&config, host, false, Some("https://inbox.example.net:8080")), Other, "scheme");
        assert_eq!(origin_of(&config, host, true, Some("https://inbox.example.net:8080")), Own);
        assert_eq!(origin_of(&config, host, false, Some("http://inbox.example.net:8081")), Other, "port");
        assert_eq!(origin_of(&config, host, false, Some("http://inbox.example.net")), Other, "no port");
        assert_eq!(origin_of(&config, host, false, Some("http://app.example.net:8080")), Other, "host");
        assert_eq!(origin_of(&config, "inbox.example.net:443", true, Some("https://inbox.example.net")), Own);
        assert_eq!(origin_of(&config, host, false, Some("https://app.example.net")), Listed);
        assert_eq!(origin_of(&config, host, false, Some("null")), Other);
    }
}
