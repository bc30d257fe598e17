//! The SSRF tables: every refused range and spelling, and what is admitted on purpose.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn range_of(text: &str) -> Option<AddressRange> {
    classify(ip(text)).err().map(|refused| refused.range)
}

#[test]
fn every_refused_range_is_named() {
    use AddressRange::*;
    let table: &[(&str, AddressRange)] = &[
        ("127.0.0.1", Loopback),
        ("127.255.255.254", Loopback),
        ("::1", Loopback),
        ("10.0.0.1", Private),
        ("172.16.0.1", Private),
        ("172.31.255.255", Private),
        ("192.168.1.1", Private),
        ("fc00::1", Private),
        ("fd12:3456::1", Private),
        ("169.254.1.1", LinkLocal),
        ("fe80::1", LinkLocal),
        ("febf::1", LinkLocal),
        ("169.254.169.254", CloudMetadata),
        ("169.254.170.2", CloudMetadata),
        ("100.100.100.200", CloudMetadata),
        ("192.0.0.192", CloudMetadata),
        ("fd00:ec2::254", CloudMetadata),
        ("0.0.0.0", Unspecified),
        ("::", Unspecified),
        ("0.1.2.3", ThisNetwork),
        ("255.255.255.255", Broadcast),
        ("224.0.0.1", Multicast),
        ("239.255.255.250", Multicast),
        ("ff02::1", Multicast),
        ("100.64.0.1", SharedAddressSpace),
        ("100.127.255.255", SharedAddressSpace),
        ("192.0.2.1", Documentation),
        ("198.51.100.7", Documentation),
        ("203.0.113.9", Documentation),
        ("2001:db8::1", Documentation),
        ("3fff::1", Documentation),
        ("198.18.0.1", Benchmarking),
        ("198.19.255.255", Benchmarking),
        ("2001:2::1", Benchmarking),
        ("240.0.0.1", Reserved),
        ("254.1.2.3", Reserved),
        ("192.0.0.8", IetfProtocolAssignments),
        ("2001:1::1", IetfProtocolAssignments),
        ("192.88.99.1", SixToFourRelayAnycast),
        ("100::1", DiscardOnly),
        ("2001::1", Teredo),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Teredo),
        ("2001:10::1", Orchid),
        ("2001:20::1", Orchid),
        ("fec0::1", SiteLocal),
        ("5f00::1", Reserved),
        ("4000::1", Reserved),
        ("::ffff:0:7f00:1", Reserved),
    ];
    for (address, range) in table {
        assert_eq!(range_of(address), Some(*range), "{address}");
    }
}

#[test]
fn public_addresses_are_accepted() {
    for address in [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "172.15.255.255",
        "172.32.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "192.0.1.255",
        "223.255.255.255",
        "169.253.255.255",
        "2606:4700:4700::1111",
        "2a00:1450:4001:82b::200e",
        "2001:4860:4860::8888",
        // IPv4-mapped, NAT64 and 6to4 spellings of a public address route to it.
        "::ffff:8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::1",
    ] {
        assert_eq!(classify(ip(address)), Ok(()), "{address}");
    }
}

/// Every IPv6 form that carries an IPv4 address, for the three addresses attackers aim at
/// most. Each must be refused with the embedded address's own range named.
#[test]
fn embedded_forms_of_inside_addresses_are_refused_by_the_embedded_address() {
    let targets = [
        ("127.0.0.1", "7f00:1", "7f00:0001", AddressRange::Loopback),
        ("10.0.0.1", "a00:1", "0a00:0001", AddressRange::Private),
        ("169.254.169.254", "a9fe:a9fe", "a9fe:a9fe", AddressRange::CloudMetadata),
    ];
    for (ipv4_text, low_hex, six_to_four_hex, range) in targets {
        let ipv4: Ipv4Addr = ipv4_text.parse().unwrap();
        let (high, low) = six_to_four_hex.split_once(':').unwrap();
        let forms = [
            (format!("::ffff:{ipv4_text}"), Embedding::Ipv4Mapped),
            (format!("::ffff:{low_hex}"), Embedding::Ipv4Mapped),
            (format!("0:0:0:0:0:ffff:{low_hex}"), Embedding::Ipv4Mapped),
            (format!("::{ipv4_text}"), Embedding::Ipv4Compatible),
            (format!("::{low_hex}"), Embedding::Ipv4Compatible),
            (format!("64:ff9b::{ipv4_text}"), Embedding::Nat64WellKnown),
            (format!("64:ff9b::{low_hex}"), Embedding::Nat64WellKnown),
            (format!("64:ff9b:1::{ipv4_text}"), Embedding::Nat64LocalUse),
            (format!("64:ff9b:1:ffff::{low_hex}"), Embedding::Nat64LocalUse),
            (format!("2002:{high}:{low}::"), Embedding::SixToFour),
            (format!("2002:{high}:{low}:1:2:3:4:5"), Embedding::SixToFour),
        ];
        for (text, form) in forms {
            let refused = classify(ip(&text)).expect_err(&text);
            assert_eq!(refused.range, range, "{text}");
            assert_eq!(refused.embedded, Some(EmbeddedIpv4 { form, ipv4 }), "{text}");
        }
    }
}

#[test]
fn deprecated_and_local_embeddings_of_public_addresses_stay_refused() {
    assert_eq!(range_of("::8.8.8.8"), Some(AddressRange::DeprecatedIpv4Compatible));
    assert_eq!(range_of("64:ff9b:1::8.8.8.8"), Some(AddressRange::LocalUseNat64));
}

#[test]
fn refusals_explain_themselves() {
    assert_eq!(
        classify(ip("::ffff:169.254.169.254")).unwrap_err().to_string(),
        "::ffff:169.254.169.254 is an IPv4-mapped address carrying 169.254.169.254, a cloud metadata address"
    );
    assert_eq!(classify(ip("10.1.2.3")).unwrap_err().to_string(), "10.1.2.3 is a private address");
}

proptest! {
    /// A mapped address is exactly as reachable as the IPv4 address it maps.
    #[test]
    fn a_mapped_address_is_judged_as_its_ipv4_address(bits in any::<u32>()) {
        let ipv4 = Ipv4Addr::from(bits);
        let mapped = IpAddr::V6(ipv4.to_ipv6_mapped());
        let direct = classify(IpAddr::V4(ipv4)).map_err(|refused| refused.range);
        let via_mapped = classify(mapped).map_err(|refused| refused.range);
        prop_assert_eq!(direct, via_mapped);
    }

    #[test]
    fn the_nat64_form_is_judged_as_its_ipv4_address(bits in any::<u32>()) {
        let ipv4 = Ipv4Addr::from(bits);
        let nat64 = IpAddr::V6(Ipv6Addr::from((0x0064_ff9b_u128 << 96) | u128::from(bits)));
        let direct = classify(IpAddr::V4(ipv4)).map_err(|refused| refused.range);
        let via_nat64 = classify(nat64).map_err(|refused| refused.range);
        prop_assert_eq!(direct, via_nat64);
    }

    #[test]
    fn url_parsing_never_panics(text in "\\PC{0,60}") {
        let _ = parse_callback_url(&text, &Policy::default());
        let _ = parse_callback_url(&format!("https://{text}"), &Policy::default());
    }
}

fn parse(text: &str) -> Result<CallbackTarget, UrlRefusal> {
    parse_callback_url(text, &Policy::default())
}

#[test]
fn a_plain_https_url_yields_host_port_and_path() {
    let target = parse("HTTPS://Hooks.Example.COM/agent-inbox/v1?tenant=7").unwrap();
    assert_eq!(target.scheme, Scheme::Https);
    assert_eq!(target.host, Host::Domain("hooks.example.com".to_owned()));
    assert_eq!(target.port, 443);
    assert_eq!(target.path_and_query, "/agent-inbox/v1?tenant=7");
    assert_eq!(target.to_string(), "https://hooks.example.com/agent-inbox/v1?tenant=7");

    let target = parse("https://hooks.example.com:8443").unwrap();
    assert_eq!(target.port, 8443);
    assert_eq!(target.path_and_query, "/");
    assert_eq!(target.authority(), "hooks.example.com:8443");

    let target = parse("https://hooks.example.com?x=1").unwrap();
    assert_eq!(target.path_and_query, "/?x=1");

    let target = parse("https://[2606:4700:4700::1111]:443/h").unwrap();
    assert_eq!(target.host, Host::Ip(ip("2606:4700:4700::1111")));
    assert_eq!(target.to_string(), "https://[2606:4700:4700::1111]/h");

    let target = parse("https://8.8.8.8/h").unwrap();
    assert_eq!(target.literal_address(), Some(ip("8.8.8.8")));

    assert!(parse("https://xn--bcher-kva.example/").is_ok());
}

#[test]
fn every_refused_url_form_is_named() {
    let long = format!("https://example.com/{}", "a".repeat(URL_BYTES_LIMIT));
    let long_label = format!("https://{}.example.com/", "a".repeat(64));
    let loopback = |address: &str| UrlRefusal::RefusedAddress(classify(ip(address)).unwrap_err());
    let odd = |host: &str| UrlRefusal::OddIpv4Spelling { host: host.to_owned() };
    let table: Vec<(&str, UrlRefusal)> = vec![
        (long.as_str(), UrlRefusal::TooLong { bytes: long.len(), limit: URL_BYTES_LIMIT }),
        ("example.com/hook", UrlRefusal::MissingScheme),
        ("//example.com/hook", UrlRefusal::MissingScheme),
        ("https:/example.com", UrlRefusal::MissingScheme),
        ("http://example.com/", UrlRefusal::NotHttps { scheme: "http".to_owned() }),
        ("ftp://example.com/", UrlRefusal::NotHttps { scheme: "ftp".to_owned() }),
        ("javascript://example.com/", UrlRefusal::NotHttps { scheme: "javascript".to_owned() }),
        ("https://good.example@evil.example/", UrlRefusal::UserInfo),
        ("https://user:pass@example.com/", UrlRefusal::UserInfo),
        ("https://@example.com/", UrlRefusal::UserInfo),
        ("https://evil.example\\@good.example/", UrlRefusal::InvalidCharacter { character: '\\' }),
        ("https://evil.example\\good.example/", UrlRefusal::InvalidCharacter { character: '\\' }),
        ("https://exa mple.com/", UrlRefusal::InvalidCharacter { character: ' ' }),
        ("https://example.com/\thook", UrlRefusal::InvalidCharacter { character: '\t' }),
        ("https://example.com\n.evil/", UrlRefusal::InvalidCharacter { character: '\n' }),
        ("https://example.com/hook#section", UrlRefusal::Fragment),
        ("https://example.com#@evil.example/", UrlRefusal::Fragment),
        ("https://example.com/ü", UrlRefusal::InvalidCharacter { character: 'ü' }),
        ("https:///hook", UrlRefusal::EmptyHost),
        ("https://:443/hook", UrlRefusal::EmptyHost),
        ("https://bücher.example/", UrlRefusal::NonAsciiHost { host: "bücher.example".to_owned() }),
        ("https://example。com/", UrlRefusal::NonAsciiHost { host: "example。com".to_owned() }),
        ("https://example.com./", UrlRefusal::TrailingDot { host: "example.com.".to_owned() }),
        ("https://localhost./", UrlRefusal::TrailingDot { host: "localhost.".to_owned() }),
        ("https://ex_ample.com/", UrlRefusal::InvalidCharacter { character: '_' }),
        ("https://%31%32%37.0.0.1/", UrlRefusal::InvalidCharacter { character: '%' }),
        (
            "https://example..com/",
            UrlRefusal::InvalidHostName { host: "example..com".to_owned(), reason: "it has an empty label" },
        ),
        (
            "https://.example.com/",
            UrlRefusal::InvalidHostName { host: ".example.com".to_owned(), reason: "it has an empty label" },
        ),
        (
            "https://-example.com/",
            UrlRefusal::InvalidHostName {
                host: "-example.com".to_owned(),
                reason: "a label starts or ends with '-'",
            },
        ),
        (
            long_label.as_str(),
            UrlRefusal::InvalidHostName {
                host: long_label[8..long_label.len() - 1].to_owned(),
                reason: "a label is longer than 63 characters",
            },
        ),
        (
            "https://::1/",
            UrlRefusal::InvalidHostName {
                host: String::new(),
                reason: "an IPv6 address must be written in [brackets]",
            },
        ),
        ("https://[::1/", UrlRefusal::InvalidIpv6Literal { literal: "[::1".to_owned() }),
        ("https://[example.com]/", UrlRefusal::InvalidIpv6Literal { literal: "example.com".to_owned() }),
        ("https://[fe80::1%25eth0]/", UrlRefusal::Ipv6ZoneId),
        ("https://[2606:4700::1]x/", UrlRefusal::InvalidPort { port: "x".to_owned() }),
        ("https://example.com:/", UrlRefusal::InvalidPort { port: String::new() }),
        ("https://example.com:0/", UrlRefusal::InvalidPort { port: "0".to_owned() }),
        ("https://example.com:65536/", UrlRefusal::InvalidPort { port: "65536".to_owned() }),
        ("https://example.com:99999999999/", UrlRefusal::InvalidPort { port: "99999999999".to_owned() }),
        ("https://example.com:0443/", UrlRefusal::InvalidPort { port: "0443".to_owned() }),
        ("https://example.com:+443/", UrlRefusal::InvalidPort { port: "+443".to_owned() }),
        ("https://example.com:-1/", UrlRefusal::InvalidPort { port: "-1".to_owned() }),
        ("https://localhost/", UrlRefusal::LocalhostName { host: "localhost".to_owned() }),
        ("https://LOCALHOST:8443/", UrlRefusal::LocalhostName { host: "localhost".to_owned() }),
        ("https://app.localhost/", UrlRefusal::LocalhostName { host: "app.localhost".to_owned() }),
        // Odd IPv4 spellings that inet_aton or WHATWG would read as 127.0.0.1 and friends.
        ("https://2130706433/", odd("2130706433")),
        ("https://0177.0.0.1/", odd("0177.0.0.1")),
        ("https://0x7f.1/", odd("0x7f.1")),
        ("https://0x7f000001/", odd("0x7f000001")),
        ("https://0X7F.0.0.1/", odd("0x7f.0.0.1")),
        ("https://127.1/", odd("127.1")),
        ("https://127.0.1/", odd("127.0.1")),
        ("https://127.0.0.01/", odd("127.0.0.01")),
        ("https://127.0.0.1.1/", odd("127.0.0.1.1")),
        ("https://256.0.0.1/", odd("256.0.0.1")),
        ("https://017700000001/", odd("017700000001")),
        ("https://169.254.43518/", odd("169.254.43518")),
        ("https://0xa9fea9fe/", odd("0xa9fea9fe")),
        ("https://example.0x10/", odd("example.0x10")),
        ("https://1.2.3.4.5/", odd("1.2.3.4.5")),
        ("https://0/", odd("0")),
        // Canonical literals of inside addresses.
        ("https://127.0.0.1/", loopback("127.0.0.1")),
        ("https://10.0.0.1:8443/", loopback("10.0.0.1")),
        ("https://169.254.169.254/latest/meta-data/", loopback("169.254.169.254")),
        ("https://0.0.0.0/", loopback("0.0.0.0")),
        ("https://[::1]/", loopback("::1")),
        ("https://[::]/", loopback("::")),
        ("https://[::ffff:127.0.0.1]/", loopback("::ffff:127.0.0.1")),
        ("https://[::ffff:7f00:1]/", loopback("::ffff:7f00:1")),
        ("https://[::127.0.0.1]/", loopback("::127.0.0.1")),
        ("https://[64:ff9b::a9fe:a9fe]/", loopback("64:ff9b::a9fe:a9fe")),
        ("https://[2002:a9fe:a9fe::]/", loopback("2002:a9fe:a9fe::")),
        ("https://[fd00:ec2::254]/", loopback("fd00:ec2::254")),
    ];
    for (text, refusal) in table {
        assert_eq!(parse(text), Err(refusal), "{text}");
    }
}

#[test]
fn http_is_refused_even_to_loopback_without_the_development_setting() {
    assert_eq!(parse("http://127.0.0.1:8080/hook"), Err(UrlRefusal::NotHttps { scheme: "http".to_owned() }));
}

#[test]
fn the_development_setting_admits_http_to_loopback_only() {
    let policy = Policy { allow_http_loopback_for_development: true, allowed_internal_hosts: Vec::new() };
    let parse = |text: &str| parse_callback_url(text, &policy);
    let target = parse("http://127.0.0.1:8080/hook").unwrap();
    assert_eq!(target.scheme, Scheme::Http);
    assert_eq!(target.port, 8080);
    assert!(parse("http://localhost:8080/hook").is_ok());
    assert!(parse("http://[::1]:8080/hook").is_ok());
    assert!(parse("https://localhost:8443/hook").is_ok());
    assert_eq!(parse("http://example.com/hook"), Err(UrlRefusal::HttpNeedsLoopback));
    assert_eq!(parse("http://8.8.8.8/hook"), Err(UrlRefusal::HttpNeedsLoopback));
    // Loopback only: the setting admits nothing else inside.
    assert!(matches!(parse("http://10.0.0.1/hook"), Err(UrlRefusal::RefusedAddress(_))));
    assert!(matches!(parse("http://[::ffff:127.0.0.1]/hook"), Err(UrlRefusal::RefusedAddress(_))));
    assert_eq!(parse("http://127.1/"), Err(UrlRefusal::OddIpv4Spelling { host: "127.1".to_owned() }));

    let localhost = parse("http://localhost:8080/hook").unwrap();
    assert_eq!(
        check_resolved(&localhost, &[ip("127.0.0.1"), ip("::1")], &policy),
        Ok(SocketAddr::new(ip("127.0.0.1"), 8080))
    );
    assert_eq!(
        check_resolved(&localhost, &[ip("127.0.0.1"), ip("93.184.215.14")], &policy),
        Err(ResolvedRefusal::HttpNeedsLoopback {
            host: "localhost".to_owned(),
            address: ip("93.184.215.14")
        })
    );
    assert!(matches!(
        check_resolved(&localhost, &[ip("192.168.1.5")], &policy),
        Err(ResolvedRefusal::RefusedAddress { .. })
    ));
}

#[test]
fn resolved_public_addresses_are_returned_to_connect_to() {
    let target = parse("https://hooks.example.com:8443/h").unwrap();
    assert_eq!(
        check_resolved(
            &target,
            &[ip("93.184.215.14"), ip("2606:2800:21f:cb07:6820:80da:af6b:8b2c")],
            &Policy::default()
        ),
        Ok(SocketAddr::new(ip("93.184.215.14"), 8443))
    );
}

#[test]
fn one_inside_address_in_the_answer_refuses_the_whole_answer() {
    let target = parse("https://rebind.example/h").unwrap();
    for answer in [
        vec![ip("93.184.215.14"), ip("127.0.0.1")],
        vec![ip("127.0.0.1"), ip("93.184.215.14")],
        vec![ip("93.184.215.14"), ip("::ffff:10.0.0.1")],
        vec![ip("2606:4700:4700::1111"), ip("64:ff9b::a9fe:a9fe")],
    ] {
        let result = check_resolved(&target, &answer, &Policy::default());
        assert!(
            matches!(result, Err(ResolvedRefusal::RefusedAddress { ref host, .. }) if host == "rebind.example"),
            "{answer:?}: {result:?}"
        );
    }
    assert_eq!(
        check_resolved(&target, &[], &Policy::default()),
        Err(ResolvedRefusal::NoAddresses { host: "rebind.example".to_owned() })
    );
}

#[test]
fn an_ip_literal_target_connects_to_itself_only() {
    let target = parse("https://8.8.8.8/h").unwrap();
    assert_eq!(
        check_resolved(&target, &[ip("8.8.8.8")], &Policy::default()),
        Ok(SocketAddr::new(ip("8.8.8.8"), 443))
    );
    assert_eq!(
        check_resolved(&target, &[ip("8.8.4.4")], &Policy::default()),
        Err(ResolvedRefusal::LiteralMismatch { host: "8.8.8.8".to_owned(), address: ip("8.8.4.4") })
    );
}

#[test]
fn the_allow_list_admits_a_named_internal_host() {
    let policy = Policy {
        allow_http_loopback_for_development: false,
        allowed_internal_hosts: vec!["Billing.Internal.Example.".to_owned(), "[fd12::7]".to_owned()],
    };
    let target = parse_callback_url("https://billing.internal.example/hooks", &policy).unwrap();
    assert_eq!(
        check_resolved(&target, &[ip("10.20.30.40"), ip("fd12::40")], &policy),
        Ok(SocketAddr::new(ip("10.20.30.40"), 443))
    );
    // The metadata endpoint stays out even for an allow-listed name.
    assert!(matches!(
        check_resolved(&target, &[ip("10.20.30.40"), ip("169.254.169.254")], &policy),
        Err(ResolvedRefusal::RefusedAddress {
            refused: RefusedAddress { range: AddressRange::CloudMetadata, .. },
            ..
        })
    ));
    assert!(matches!(
        check_resolved(&target, &[ip("0.0.0.0")], &policy),
        Err(ResolvedRefusal::RefusedAddress { .. })
    ));
    // Plain http is still refused for it.
    assert_eq!(
        parse_callback_url("http://billing.internal.example/hooks", &policy),
        Err(UrlRefusal::NotHttps { scheme: "http".to_owned() })
    );
    // An allow-listed IPv6 literal.
    let literal = parse_callback_url("https://[fd12::7]/h", &policy).unwrap();
    assert_eq!(check_resolved(&literal, &[ip("fd12::7")], &policy), Ok(SocketAddr::new(ip("fd12::7"), 443)));
    // Other internal hosts are not admitted by someone else's entry.
    let other = parse_callback_url("https://payroll.internal.example/hooks", &policy).unwrap();
    assert!(matches!(
        check_resolved(&other, &[ip("10.20.30.41")], &policy),
        Err(ResolvedRefusal::RefusedAddress { .. })
    ));
    assert!(matches!(parse_callback_url("https://[fd12::8]/h", &policy), Err(UrlRefusal::RefusedAddress(_))));
}
