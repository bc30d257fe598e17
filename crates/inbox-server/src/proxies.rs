//! Who the client is behind a reverse proxy. Every client of a proxied node has the proxy's
//! address, so the failed-authentication throttle, the logs and the stream cookie's `Secure`
//! flag need the address and scheme the proxy saw. Those come from `Forwarded` (RFC 7239),
//! `X-Forwarded-For` and `X-Forwarded-Proto`, which anyone can send: they are believed only
//! from a peer listed in `trusted_proxies`, and removed from every other request, so no
//! handler can be fooled by them.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderValue};
use ipnet::IpNet;

/// The client's address as this node believes it: the peer's, or what a trusted proxy says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl ClientAddr {
    /// The client address put on the request by [`TrustedProxies::apply`], else the peer's.
    pub fn of(extensions: &axum::http::Extensions) -> Option<IpAddr> {
        extensions
            .get::<ClientAddr>()
            .map(|c| c.0)
            .or_else(|| extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
    }
}

/// The `trusted_proxies` setting, parsed: networks whose forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses CIDRs (`10.0.0.0/8`, `::1/128`) or bare addresses (one host).
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        entries
            .iter()
            .map(|entry| {
                let entry = entry.trim();
                entry.parse::<IpNet>().or_else(|_| entry.parse::<IpAddr>().map(IpNet::from)).map_err(|_| {
                    format!("trusted_proxies: {entry:?} is not a CIDR (such as 10.0.0.0/8) or an IP address")
                })
            })
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.0.iter().any(|net| net.contains(&addr))
    }

    /// Decides the client's address and scheme for a request from `peer`: from a trusted
    /// proxy, the nearest untrusted address of the forwarding chain and the proxy's scheme;
    /// otherwise the peer itself, and the forwarding headers are removed. Afterwards
    /// `X-Forwarded-Proto` is `https` exactly when the client is known to have used HTTPS.
    pub fn apply(&self, peer: IpAddr, headers: &mut HeaderMap, native_tls: bool) -> ClientAddr {
        let trusted = self.trusts(peer);
        let (client, https) = if trusted {
            let chain = forwarded_for(headers);
            let client = chain.iter().rev().copied().find(|a| !self.trusts(*a)).or(chain.first().copied());
            (client.unwrap_or(peer), forwarded_https(headers))
        } else {
            (peer, false)
        };
        if !trusted {
            headers.remove("forwarded");
            headers.remove("x-forwarded-for");
        }
        headers.remove("x-forwarded-proto");
        if native_tls || https {
            headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        }
        ClientAddr(client)
    }
}

/// The addresses of the forwarding chain, client first: `Forwarded`'s `for=` parameters, else
/// `X-Forwarded-For`. Unparseable entries (obfuscated identifiers, `unknown`) are skipped.
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    let forwarded: Vec<IpAddr> = header_elements(headers, "forwarded")
        .flat_map(|element| element.split(';').map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            key.trim().eq_ignore_ascii_case("for").then(|| parse_node(value))?
        })
        .collect();
    if !forwarded.is_empty() {
        return forwarded;
    }
    header_elements(headers, "x-forwarded-for").filter_map(|v| parse_node(&v)).collect()
}

/// Whether the proxy nearest to this node says the client used HTTPS (`Forwarded: proto=`,
/// else the last `X-Forwarded-Proto` value).
fn forwarded_https(headers: &HeaderMap) -> bool {
    let proto = header_elements(headers, "forwarded")
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                key.trim().eq_ignore_ascii_case("proto").then(|| value.trim().trim_matches('"').to_owned())
            })
        })
        .last()
        .or_else(|| header_elements(headers, "x-forwarded-proto").last());
    proto.is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The comma-separated elements of every value of a header, trimmed.
fn header_elements<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = String> + 'a {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// An address out of `1.2.3.4`, `1.2.3.4:5678`, `"[2001:db8::1]:443"` or `2001:db8::1`.
fn parse_node(value: &str) -> Option<IpAddr> {
    let value = value.trim().trim_matches('"');
    if let Ok(addr) = value.parse::<IpAddr>() {
        return Some(addr);
    }
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    value.strip_prefix('[').and_then(|v| v.split(']').next()).and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn proxies(entries: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn forwarding_headers_are_believed_only_from_trusted_peers() {
        let trusted = proxies(&["10.0.0.0/8", "::1"]);
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let stranger: IpAddr = "203.0.113.9".parse().unwrap();

        let mut h = headers(&[("x-forwarded-for", "198.51.100.7, 10.9.9.9"), ("x-forwarded-proto", "https")]);
        assert_eq!(trusted.apply(peer, &mut h, false), ClientAddr("198.51.100.7".parse().unwrap()));
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");

        let mut h = headers(&[("x-forwarded-for", "198.51.100.7"), ("x-forwarded-proto", "https")]);
        assert_eq!(trusted.apply(stranger, &mut h, false), ClientAddr(stranger));
        assert!(h.get("x-forwarded-proto").is_none() && h.get("x-forwarded-for").is_none());

        // A client that forges a chain gets the address the trusted proxy saw, not its own claim.
        let mut h = headers(&[("x-forwarded-for", "1.1.1.1, 198.51.100.7")]);
        assert_eq!(trusted.apply(peer, &mut h, false).0, "198.51.100.7".parse::<IpAddr>().unwrap());

        let mut h = headers(&[("forwarded", "for=\"[2001:db8::5]:4711\";proto=https, for=10.0.0.2")]);
        assert_eq!(
            trusted.apply("::1".parse().unwrap(), &mut h, false).0,
            "2001:db8::5".parse::<IpAddr>().unwrap()
        );
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");

        let mut h = headers(&[("x-forwarded-proto", "http")]);
        trusted.apply(stranger, &mut h, true);
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https", "a native TLS listener is https");
        assert_eq!(TrustedProxies::default().apply(peer, &mut headers(&[]), false), ClientAddr(peer));
    }

    #[test]
    fn bad_entries_are_named() {
        let err = TrustedProxies::parse(&["10.0.0.0/33".into()]).unwrap_err();
        assert!(err.contains("10.0.0.0/33"), "{err}");
        assert!(TrustedProxies::parse(&["192.168.1.1".into(), "fd00::/8".into()]).is_ok());
    }
}
