//! SSRF defence for webhook delivery: which callback URLs are accepted, which addresses a
//! callback may reach, and the one address the delivery must connect to.
//!
//! A webhook URL is chosen by a tenant, so every delivery is a request the service makes on
//! a stranger's behalf. Three rules keep it outside: the URL is parsed strictly, refusing
//! every spelling that different parsers read differently (`https://good@evil`, `127.1`,
//! `0x7f.1`, `2130706433`); every address the host resolves to is classified, with IPv6
//! forms that embed an IPv4 address judged by that address; and the caller connects to the
//! exact address that was checked, so a second DNS answer (rebinding) never gets a say.
//! Redirects are the caller's to refuse; nothing here follows them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

mod ranges;

use ranges::is_plain_loopback;
pub use ranges::{AddressRange, EmbeddedIpv4, Embedding, RefusedAddress, classify};

/// Longest callback URL accepted.
pub const URL_BYTES_LIMIT: usize = 2048;

/// The operator's choices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Admit `http://` to loopback (`localhost`, `127.0.0.0/8`, `::1`), and loopback
    /// addresses over https. For running a receiver next to a development server only.
    pub allow_http_loopback_for_development: bool,
    /// Host names (or IP literals) the operator admits although they resolve to internal
    /// addresses: private, loopback, link-local, shared and similar ranges. Metadata,
    /// unspecified, broadcast and multicast addresses stay refused even for these.
    pub allowed_internal_hosts: Vec<String>,
}

impl Policy {
    /// Whether `host` is on the allow-list; names compare case-insensitively, ignoring one
    /// trailing dot in the list entry.
    pub fn is_allow_listed(&self, host: &str) -> bool {
        self.allowed_internal_hosts.iter().any(|entry| {
            let entry = entry.strip_suffix('.').unwrap_or(entry);
            let entry = entry.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')).unwrap_or(entry);
            entry.eq_ignore_ascii_case(host)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Https,
    /// Only to loopback, only with [`Policy::allow_http_loopback_for_development`].
    Http,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Https => 443,
            Scheme::Http => 80,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A lower-case ASCII DNS name without a trailing dot.
    Domain(String),
    /// An IP literal, which needs no lookup.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    /// The host as it is compared with the allow-list: a name, dotted IPv4 or bare IPv6.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Domain(name) => formatter.write_str(name),
            Host::Ip(address) => write!(formatter, "{address}"),
        }
    }
}

/// A callback URL that passed [`parse_callback_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackTarget {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
    /// Starts with `/`; includes the query, never a fragment.
    pub path_and_query: String,
}

impl CallbackTarget {
    /// The IP literal of the host, if it is one; such a target needs no DNS lookup and
    /// [`check_resolved`] expects exactly this address.
    pub fn literal_address(&self) -> Option<IpAddr> {
        match self.host {
            Host::Ip(address) => Some(address),
            Host::Domain(_) => None,
        }
    }

    /// The `Host` header value: the host, bracketed if IPv6, with a non-default port.
    pub fn authority(&self) -> String {
        let host = match &self.host {
            Host::Ip(IpAddr::V6(address)) => format!("[{address}]"),
            host => host.to_string(),
        };
        if self.port == self.scheme.default_port() { host } else { format!("{host}:{}", self.port) }
    }
}

impl fmt::Display for CallbackTarget {
    /// The canonical URL, as stored and as shown back to the tenant.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}://{}{}", self.scheme.as_str(), self.authority(), self.path_and_query)
    }
}

/// Why a callback URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("callback URL is {bytes} bytes; the limit is {limit}")]
    TooLong { bytes: usize, limit: usize },
    #[error("callback URL must be absolute, starting with https://")]
    MissingScheme,
    #[error("callback URL scheme {scheme:?} is not allowed; use https")]
    NotHttps { scheme: String },
    #[error("plain http is allowed only to loopback, in development; use https")]
    HttpNeedsLoopback,
    #[error("callback URL contains {character:?}; percent-encode it or remove it")]
    InvalidCharacter { character: char },
    #[error("callback URL carries user information before '@'; remove it")]
    UserInfo,
    #[error("callback URL has a #fragment, which is never sent; remove it")]
    Fragment,
    #[error("callback URL has no host")]
    EmptyHost,
    #[error("host {host:?} is not ASCII; use its xn-- (punycode) form")]
    NonAsciiHost { host: String },
    #[error("host {host:?} is an unusual spelling of an IPv4 address; write it as four decimal octets")]
    OddIpv4Spelling { host: String },
    #[error("host {host:?} is not a valid DNS name: {reason}")]
    InvalidHostName { host: String, reason: &'static str },
    #[error("host {host:?} ends with a dot; remove it")]
    TrailingDot { host: String },
    #[error("{literal:?} is not a valid IPv6 address")]
    InvalidIpv6Literal { literal: String },
    #[error("IPv6 zone identifiers (%...) are not allowed in callback URLs")]
    Ipv6ZoneId,
    #[error("port {port:?} is not a number from 1 to 65535")]
    InvalidPort { port: String },
    #[error("host {host:?} names this machine; callbacks must reach another host")]
    LocalhostName { host: String },
    #[error("{0}")]
    RefusedAddress(#[from] RefusedAddress),
}

/// Why the addresses a callback host resolved to were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolvedRefusal {
    #[error("host {host:?} resolved to no address")]
    NoAddresses { host: String },
    #[error("host {host:?} resolved to a refused address: {refused}")]
    RefusedAddress { host: String, refused: RefusedAddress },
    #[error("plain http is allowed only to loopback, but {host:?} resolved to {address}")]
    HttpNeedsLoopback { host: String, address: IpAddr },
    #[error("IP literal {host:?} was given the different address {address} to connect to")]
    LiteralMismatch { host: String, address: IpAddr },
}

/// Parses and checks a callback URL. Accepts `https://host[:port][/path][?query]` only
/// (and `http` to loopback under the development setting); IP literals are classified here,
/// names after resolution by [`check_resolved`].
pub fn parse_callback_url(text: &str, policy: &Policy) -> Result<CallbackTarget, UrlRefusal> {
    if text.len() > URL_BYTES_LIMIT {
        return Err(UrlRefusal::TooLong { bytes: text.len(), limit: URL_BYTES_LIMIT });
    }
    // Parsers disagree on what whitespace, control characters and backslashes mean
    // (WHATWG strips tabs and reads `\` as `/`), so none of them is allowed anywhere.
    if let Some(character) = text
        .chars()
        .find(|character| character.is_control() || character.is_whitespace() || *character == '\\')
    {
        return Err(UrlRefusal::InvalidCharacter { character });
    }
    let (scheme_text, rest) = text.split_once("://").ok_or(UrlRefusal::MissingScheme)?;
    let scheme = match scheme_text.to_ascii_lowercase().as_str() {
        "https" => Scheme::Https,
        "http" if policy.allow_http_loopback_for_development => Scheme::Http,
        _ => {
            return Err(UrlRefusal::NotHttps { scheme: scheme_text.to_owned() });
        }
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, remainder) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(UrlRefusal::UserInfo);
    }
    if remainder.contains('#') {
        return Err(UrlRefusal::Fragment);
    }
    if let Some(character) = remainder.chars().find(|character| !character.is_ascii()) {
        return Err(UrlRefusal::InvalidCharacter { character });
    }

    let (host_text, port_text) = split_host_and_port(authority)?;
    let port = match port_text {
        Some(port_text) => parse_port(port_text)?,
        None => scheme.default_port(),
    };
    let host = parse_host(host_text)?;
    let host_name = host.to_string();
    let allow_listed = policy.is_allow_listed(&host_name);
    let development_loopback = policy.allow_http_loopback_for_development;

    match &host {
        Host::Domain(name) => {
            let is_localhost = name == "localhost" || name.ends_with(".localhost");
            if is_localhost && !allow_listed && !development_loopback {
                return Err(UrlRefusal::LocalhostName { host: name.clone() });
            }
            if scheme == Scheme::Http && !is_localhost {
                return Err(UrlRefusal::HttpNeedsLoopback);
            }
        }
        Host::Ip(address) => {
            let is_loopback = is_plain_loopback(*address);
            if let Err(refused) = classify(*address) {
                let admitted = (allow_listed && refused.range.can_be_allow_listed())
                    || (development_loopback && is_loopback);
                if !admitted {
                    return Err(UrlRefusal::RefusedAddress(refused));
                }
            }
            if scheme == Scheme::Http && !is_loopback {
                return Err(UrlRefusal::HttpNeedsLoopback);
            }
        }
    }

    let path_and_query =
        if remainder.starts_with('/') { remainder.to_owned() } else { format!("/{remainder}") };
    Ok(CallbackTarget { scheme, host, port, path_and_query })
}

/// Checks every address the target's host resolved to and returns the one to connect to.
///
/// All addresses must pass, not just the first: a resolver answer `[public, 127.0.0.1]`
/// means the name points inside, and the next lookup could return the other order. The
/// caller must connect to the returned socket address itself (not to the name), so no
/// second lookup can substitute another address.
pub fn check_resolved(
    target: &CallbackTarget,
    addresses: &[IpAddr],
    policy: &Policy,
) -> Result<SocketAddr, ResolvedRefusal> {
    let host = target.host.to_string();
    let Some(&first) = addresses.first() else {
        return Err(ResolvedRefusal::NoAddresses { host });
    };
    if let Some(literal) = target.literal_address() {
        if let Some(&other) = addresses.iter().find(|&&address| address != literal) {
            return Err(ResolvedRefusal::LiteralMismatch { host, address: other });
        }
    }
    let allow_listed = policy.is_allow_listed(&host);
    for &address in addresses {
        let is_loopback = is_plain_loopback(address);
        if let Err(refused) = classify(address) {
            let admitted = (allow_listed && refused.range.can_be_allow_listed())
                || (policy.allow_http_loopback_for_development && is_loopback);
            if !admitted {
                return Err(ResolvedRefusal::RefusedAddress { host, refused });
            }
        }
        if target.scheme == Scheme::Http && !is_loopback {
            return Err(ResolvedRefusal::HttpNeedsLoopback { host, address });
        }
    }
    Ok(SocketAddr::new(first, target.port))
}

fn split_host_and_port(authority: &str) -> Result<(&str, Option<&str>), UrlRefusal> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let (literal, after) = bracketed
            .split_once(']')
            .ok_or_else(|| UrlRefusal::InvalidIpv6Literal { literal: authority.to_owned() })?;
        let port = match after {
            "" => None,
            _ => Some(
                after.strip_prefix(':').ok_or_else(|| UrlRefusal::InvalidPort { port: after.to_owned() })?,
            ),
        };
        // Keep the brackets so `parse_host` knows this was an IPv6 literal.
        return Ok((&authority[..literal.len() + 2], port));
    }
    match authority.split_once(':') {
        Some((host, _)) if authority.matches(':').count() > 1 => Err(UrlRefusal::InvalidHostName {
            host: host.to_owned(),
            reason: "an IPv6 address must be written in [brackets]",
        }),
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((authority, None)),
    }
}

fn parse_port(text: &str) -> Result<u16, UrlRefusal> {
    let invalid = || UrlRefusal::InvalidPort { port: text.to_owned() };
    let digits_only = !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    // A leading zero is legal but unusual, and some parsers read it as octal.
    if !digits_only || text.len() > 5 || (text.len() > 1 && text.starts_with('0')) {
        return Err(invalid());
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid()),
        Ok(port) => Ok(port),
    }
}

fn parse_host(text: &str) -> Result<Host, UrlRefusal> {
    if text.is_empty() {
        return Err(UrlRefusal::EmptyHost);
    }
    if let Some(literal) = text.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        if literal.contains('%') {
            return Err(UrlRefusal::Ipv6ZoneId);
        }
        return literal
            .parse::<Ipv6Addr>()
            .map(|address| Host::Ip(IpAddr::V6(address)))
            .map_err(|_| UrlRefusal::InvalidIpv6Literal { literal: literal.to_owned() });
    }
    if !text.is_ascii() {
        return Err(UrlRefusal::NonAsciiHost { host: text.to_owned() });
    }
    let host = text.to_ascii_lowercase();
    if host.ends_with('.') {
        return Err(UrlRefusal::TrailingDot { host });
    }
    if let Some(character) = host
        .chars()
        .find(|character| !(character.is_ascii_alphanumeric() || *character == '-' || *character == '.'))
    {
        return Err(UrlRefusal::InvalidCharacter { character });
    }
    let labels: Vec<&str> = host.split('.').collect();
    let invalid = |reason| UrlRefusal::InvalidHostName { host: host.clone(), reason };
    if labels.iter().any(|label| label.is_empty()) {
        return Err(invalid("it has an empty label"));
    }
    // WHATWG and inet_aton read a host whose last label is a number as an IPv4 address,
    // in decimal, octal or hex, with missing octets filled in. Only the one unambiguous
    // spelling is accepted.
    if labels.last().is_some_and(|label| is_ipv4_number(label)) {
        return parse_dotted_quad(&labels)
            .map(|address| Host::Ip(IpAddr::V4(address)))
            .ok_or(UrlRefusal::OddIpv4Spelling { host: host.clone() });
    }
    if host.len() > 253 {
        return Err(invalid("it is longer than 253 characters"));
    }
    if labels.iter().any(|label| label.len() > 63) {
        return Err(invalid("a label is longer than 63 characters"));
    }
    if labels.iter().any(|label| label.starts_with('-') || label.ends_with('-')) {
        return Err(invalid("a label starts or ends with '-'"));
    }
    Ok(Host::Domain(host))
}

/// Whether a label is an IPv4 number in some resolver's eyes: decimal digits, or `0x`
/// followed by hex digits (leading-zero octal is decimal digits too).
fn is_ipv4_number(label: &str) -> bool {
    if let Some(hex) = label.strip_prefix("0x") {
        return hex.bytes().all(|byte| byte.is_ascii_hexdigit());
    }
    !label.is_empty() && label.bytes().all(|byte| byte.is_ascii_digit())
}

/// Four decimal octets, each 0 to 255 without leading zeros.
fn parse_dotted_quad(labels: &[&str]) -> Option<Ipv4Addr> {
    if labels.len() != 4 {
        return None;
    }
    let mut octets = [0_u8; 4];
    for (octet, label) in octets.iter_mut().zip(labels) {
        let canonical = !label.is_empty()
            && label.len() <= 3
            && label.bytes().all(|byte| byte.is_ascii_digit())
            && (label.len() == 1 || !label.starts_with('0'));
        if !canonical {
            return None;
        }
        *octet = label.parse().ok()?;
    }
    Some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests;
