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

/// An address a callback may not reach, and the range that says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct RefusedAddress {
    pub address: IpAddr,
    pub range: AddressRange,
    /// Set when an IPv6 address was refused for the IPv4 address it carries.
    pub embedded: Option<EmbeddedIpv4>,
}

impl fmt::Display for RefusedAddress {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some(EmbeddedIpv4 { form, ipv4 }) => write!(
                formatter,
                "{} is {} carrying {ipv4}, {}",
                self.address,
                form.description(),
                self.range.description()
            ),
            None => write!(formatter, "{} is {}", self.address, self.range.description()),
        }
    }
}

/// The IPv4 address inside an IPv6 address, and how it was embedded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedIpv4 {
    pub form: Embedding,
    pub ipv4: Ipv4Addr,
}

/// The IPv6 forms that carry an IPv4 address and can route to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:0:0/96` (RFC 4291 §2.5.5.2): a dual-stack socket connects to the IPv4 address.
    Ipv4Mapped,
    /// `::/96` (RFC 4291 §2.5.5.1), deprecated.
    Ipv4Compatible,
    /// `64:ff9b::/96` (RFC 6052): a NAT64 gateway connects to the IPv4 address.
    Nat64WellKnown,
    /// `64:ff9b:1::/48` (RFC 8215), read with the /96 layout.
    Nat64LocalUse,
    /// `2002::/16` (RFC 3056): a 6to4 relay connects to the IPv4 address.
    SixToFour,
}

impl Embedding {
    fn description(self) -> &'static str {
        match self {
            Embedding::Ipv4Mapped => "an IPv4-mapped address",
            Embedding::Ipv4Compatible => "an IPv4-compatible address",
            Embedding::Nat64WellKnown => "a NAT64 address",
            Embedding::Nat64LocalUse => "a local-use NAT64 address",
            Embedding::SixToFour => "a 6to4 address",
        }
    }
}

/// Special-purpose address ranges (IANA IPv4 and IPv6 special-purpose registries, and the
/// cloud metadata endpoints) that a callback may not reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressRange {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918), fc00::/7 (RFC 4193).
    Private,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// Cloud instance metadata: 169.254.169.254, 169.254.170.2, 100.100.100.200,
    /// 192.0.0.192, fd00:ec2::254, ... Refused even for allow-listed hosts.
    CloudMetadata,
    /// 0.0.0.0, ::.
    Unspecified,
    /// 0.0.0.0/8 other than 0.0.0.0 ("this network").
    ThisNetwork,
    /// 255.255.255.255.
    Broadcast,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 100.64.0.0/10, carrier-grade NAT (RFC 6598).
    SharedAddressSpace,
    /// 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18.0.0/15, 2001:2::/48.
    Benchmarking,
    /// 192.0.0.0/24 (RFC 6890) and the rest of 2001::/23.
    IetfProtocolAssignments,
    /// 192.88.99.0/24, the deprecated 6to4 relay anycast (RFC 7526).
    SixToFourRelayAnycast,
    /// 240.0.0.0/4, and IPv6 outside the global unicast 2000::/3 with no other meaning.
    Reserved,
    /// 100::/64 (RFC 6666).
    DiscardOnly,
    /// 2001::/32 (RFC 4380).
    Teredo,
    /// 2001:10::/28 and 2001:20::/28 (RFC 4843, RFC 7343).
    Orchid,
    /// fec0::/10, deprecated (RFC 3879).
    SiteLocal,
    /// ::/96 carrying a public IPv4 address; the form itself is deprecated.
    DeprecatedIpv4Compatible,
    /// 64:ff9b:1::/48 carrying a public IPv4 address: a site-local translator.
    LocalUseNat64,
}

impl AddressRange {
    fn description(self) -> &'static str {
        match self {
            AddressRange::Loopback => "a loopback address",
            AddressRange::Private => "a private address",
            AddressRange::LinkLocal => "a link-local address",
            AddressRange::CloudMetadata => "a cloud metadata address",
            AddressRange::Unspecified => "the unspecified address",
            AddressRange::ThisNetwork => "a \"this network\" address",
            AddressRange::Broadcast => "the broadcast address",
            AddressRange::Multicast => "a multicast address",
            AddressRange::SharedAddressSpace => "a shared (carrier-grade NAT) address",
            AddressRange::Documentation => "a documentation address",
            AddressRange::Benchmarking => "a benchmarking address",
            AddressRange::IetfProtocolAssignments => "an IETF protocol assignment address",
            AddressRange::SixToFourRelayAnycast => "the deprecated 6to4 relay anycast range",
            AddressRange::Reserved => "a reserved address",
            AddressRange::DiscardOnly => "a discard-only address",
            AddressRange::Teredo => "a Teredo address",
            AddressRange::Orchid => "an ORCHID address",
            AddressRange::SiteLocal => "a deprecated site-local address",
            AddressRange::DeprecatedIpv4Compatible => "a deprecated IPv4-compatible address",
            AddressRange::LocalUseNat64 => "a local-use NAT64 address",
        }
    }

    /// Whether an operator's allow-list can admit this range. Metadata endpoints hand out
    /// credentials and the others are not a single host, so no webhook has reason to go there.
    pub fn can_be_allow_listed(self) -> bool {
        !matches!(
            self,
            AddressRange::CloudMetadata
                | AddressRange::Unspecified
                | AddressRange::ThisNetwork
                | AddressRange::Broadcast
                | AddressRange::Multicast
                | AddressRange::DiscardOnly
        )
    }
}

/// Classifies an address for callback delivery: `Ok` for a public unicast address, or the
/// special range it lies in. IPv6 addresses that embed an IPv4 address are judged by it.
pub fn classify(address: IpAddr) -> Result<(), RefusedAddress> {
    let refuse = |range, embedded| Err(RefusedAddress { address, range, embedded });
    match address {
        IpAddr::V4(ipv4) => match classify_ipv4(ipv4) {
            Some(range) => refuse(range, None),
            None => Ok(()),
        },
        IpAddr::V6(ipv6) => {
            if let Some((form, ipv4)) = embedded_ipv4(ipv6) {
                let embedded = Some(EmbeddedIpv4 { form, ipv4 });
                return match (classify_ipv4(ipv4), form) {
                    (Some(range), _) => refuse(range, embedded),
                    (None, Embedding::Ipv4Compatible) => {
                        refuse(AddressRange::DeprecatedIpv4Compatible, embedded)
                    }
                    (None, Embedding::Nat64LocalUse) => refuse(AddressRange::LocalUseNat64, embedded),
                    (None, _) => Ok(()),
                };
            }
            match classify_ipv6(ipv6) {
                Some(range) => refuse(range, None),
                None => Ok(()),
            }
        }
    }
}

/// 127.0.0.0/8 or ::1 written plainly, the only addresses the development setting admits.
fn is_plain_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(ipv4) => ipv4.is_loopback(),
        IpAddr::V6(ipv6) => ipv6 == Ipv6Addr::LOCALHOST,
    }
}

const CLOUD_METADATA_IPV4: [Ipv4Addr; 7] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OpenStack, DigitalOcean, ...
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata and credentials
    Ipv4Addr::new(169, 254, 169, 253), // AWS VPC DNS
    Ipv4Addr::new(169, 254, 169, 123), // AWS time sync
    Ipv4Addr::new(169, 254, 0, 23),    // Tencent Cloud
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud
];

const CLOUD_METADATA_IPV6: [Ipv6Addr; 4] = [
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254), // AWS IMDS
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0253), // AWS DNS
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0123), // AWS time sync
    Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254), // GCP
];

fn classify_ipv4(address: Ipv4Addr) -> Option<AddressRange> {
    if CLOUD_METADATA_IPV4.contains(&address) {
        return Some(AddressRange::CloudMetadata);
    }
    let bits = u32::from(address);
    let within = |network: [u8; 4], prefix: u32| {
        let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
        bits & mask == u32::from(Ipv4Addr::from(network)) & mask
    };
    let ranges: [([u8; 4], u32, AddressRange); 17] = [
        ([0, 0, 0, 0], 32, AddressRange::Unspecified),
        ([255, 255, 255, 255], 32, AddressRange::Broadcast),
        ([0, 0, 0, 0], 8, AddressRange::ThisNetwork),
        ([127, 0, 0, 0], 8, AddressRange::Loopback),
        ([10, 0, 0, 0], 8, AddressRange::Private),
        ([172, 16, 0, 0], 12, AddressRange::Private),
        ([192, 168, 0, 0], 16, AddressRange::Private),
        ([169, 254, 0, 0], 16, AddressRange::LinkLocal),
        ([100, 64, 0, 0], 10, AddressRange::SharedAddressSpace),
        ([192, 0, 0, 0], 24, AddressRange::IetfProtocolAssignments),
        ([192, 0, 2, 0], 24, AddressRange::Documentation),
        ([198, 51, 100, 0], 24, AddressRange::Documentation),
        ([203, 0, 113, 0], 24, AddressRange::Documentation),
        ([198, 18, 0, 0], 15, AddressRange::Benchmarking),
        ([192, 88, 99, 0], 24, AddressRange::SixToFourRelayAnycast),
        ([224, 0, 0, 0], 4, AddressRange::Multicast),
        ([240, 0, 0, 0], 4, AddressRange::Reserved),
    ];
    ranges.iter().find(|(network, prefix, _)| within(*network, *prefix)).map(|(_, _, range)| *range)
}

/// The IPv4 address carried by an IPv6 address in a form that routes to it.
fn embedded_ipv4(address: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let segments = address.segments();
    let last_32 = Ipv4Addr::new(
        (segments[6] >> 8) as u8,
        segments[6] as u8,
        (segments[7] >> 8) as u8,
        segments[7] as u8,
    );
    match segments {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some((Embedding::Ipv4Mapped, last_32)),
        // `::` and `::1` are themselves, not IPv4-compatible forms of 0.0.0.0 and 0.0.0.1.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some((Embedding::Ipv4Compatible, last_32)),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some((Embedding::Nat64WellKnown, last_32)),
        [0x64, 0xff9b, 1, _, _, _, _, _] => Some((Embedding::Nat64LocalUse, last_32)),
        [0x2002, high, low, _, _, _, _, _] => Some((
            Embedding::SixToFour,
            Ipv4Addr::new((high >> 8) as u8, high as u8, (low >> 8) as u8, low as u8),
        )),
        _ => None,
    }
}

fn classify_ipv6(address: Ipv6Addr) -> Option<AddressRange> {
    if CLOUD_METADATA_IPV6.contains(&address) {
        return Some(AddressRange::CloudMetadata);
    }
    if address == Ipv6Addr::UNSPECIFIED {
        return Some(AddressRange::Unspecified);
    }
    if address == Ipv6Addr::LOCALHOST {
        return Some(AddressRange::Loopback);
    }
    let bits = u128::from(address);
    let within = |network: u128, prefix: u32| {
        let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
        bits & mask == network & mask
    };
    let network = |segments: [u16; 8]| u128::from(Ipv6Addr::from(segments));
    let ranges: [([u16; 8], u32, AddressRange); 13] = [
        ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64, AddressRange::DiscardOnly),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, AddressRange::Teredo),
        ([0x2001, 0x0002, 0, 0, 0, 0, 0, 0], 48, AddressRange::Benchmarking),
        ([0x2001, 0x0010, 0, 0, 0, 0, 0, 0], 28, AddressRange::Orchid),
        ([0x2001, 0x0020, 0, 0, 0, 0, 0, 0], 28, AddressRange::Orchid),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, AddressRange::IetfProtocolAssignments),
        ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32, AddressRange::Documentation),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, AddressRange::Documentation),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, AddressRange::Private),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, AddressRange::LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, AddressRange::SiteLocal),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, AddressRange::Multicast),
        // SRv6 segment identifiers (RFC 9602): never a web server.
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, AddressRange::Reserved),
    ];
    let found = ranges
        .iter()
        .find(|(segments, prefix, _)| within(network(*segments), *prefix))
        .map(|(_, _, range)| *range);
    // Outside global unicast 2000::/3 nothing is allocated to a web server.
    found.or_else(|| (!within(network([0x2000, 0, 0, 0, 0, 0, 0, 0]), 3)).then_some(AddressRange::Reserved))
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
