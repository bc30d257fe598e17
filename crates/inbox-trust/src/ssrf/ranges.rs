//! The address half of the SSRF defence: the special-purpose ranges (IANA registries and the
//! cloud metadata endpoints) a callback may not reach, and the IPv6 forms that embed an IPv4
//! address and are judged by it. Pure classification; `ssrf` decides what to do with it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
pub(super) fn is_plain_loopback(address: IpAddr) -> bool {
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
