//! RFC 9421 Appendix B test vectors, checked byte for byte: the signature bases of B.2.1,
//! B.2.2 and B.2.3 (RSA-PSS signatures themselves are randomized and RSA is not
//! implemented), and the full signatures of B.2.5 (hmac-sha256) and B.2.6 (ed25519), which
//! are deterministic.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::*;

/// RFC 9421 §B.1.4 test-key-ed25519, PKCS #8 (the PEM body).
const TEST_KEY_ED25519_PRIVATE: &str = "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF";
/// RFC 9421 §B.1.4 test-key-ed25519, SubjectPublicKeyInfo (the PEM body).
const TEST_KEY_ED25519_PUBLIC: &str = "MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=";
/// RFC 9421 §B.1.5 test-shared-secret (64 bytes, base64).
const TEST_SHARED_SECRET: &str =
    "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==";

const CREATED: i64 = 1_618_884_473;

/// RFC 9421 §B.2 test-request:
///
/// ```text
/// POST /foo?param=Value&Pet=dog HTTP/1.1
/// Host: example.com
/// Date: Tue, 20 Apr 2021 02:07:55 GMT
/// Content-Type: application/json
/// Content-Digest: sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:
/// Content-Length: 18
///
/// {"hello": "world"}
/// ```
fn test_request() -> RequestParts {
    RequestParts::new("POST", "https", "example.com", "/foo?param=Value&Pet=dog")
        .with_header("Host", "example.com")
        .with_header("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
        .with_header("Content-Type", "application/json")
        .with_header(
            "Content-Digest",
            "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
        )
        .with_header("Content-Length", "18")
}

const TEST_BODY: &[u8] = b"{\"hello\": \"world\"}";

fn ed25519_signing_key() -> SigningKey {
    let der = BASE64.decode(TEST_KEY_ED25519_PRIVATE).unwrap();
    SigningKey::ed25519_from_pkcs8_der(&der).unwrap()
}

fn ed25519_verifying_key() -> VerifyingKey {
    let der = BASE64.decode(TEST_KEY_ED25519_PUBLIC).unwrap();
    VerifyingKey::ed25519_from_spki_der(&der).unwrap()
}

fn shared_secret() -> Vec<u8> {
    BASE64.decode(TEST_SHARED_SECRET).unwrap()
}

/// Parses an RFC `Signature-Input` value, checks it re-serializes to the same text, and
/// returns the base it produces for the test request.
fn base_for_input(signature_input: &str, label: &str) -> String {
    let inputs = parse_signature_input(signature_input).unwrap();
    assert_eq!(inputs.len(), 1);
    let (parsed_label, params) = &inputs[0];
    assert_eq!(parsed_label, label);
    assert_eq!(serialize_signature_input(label, params), signature_input);
    signature_base(&test_request(), params).unwrap()
}

/// A policy that accepts the RFC's vectors: no `expires`, no `nonce`, at their creation time.
fn rfc_policy(label: &str) -> VerifyPolicy {
    VerifyPolicy {
        now: CREATED,
        label: Some(label.to_owned()),
        required_components: Vec::new(),
        window_seconds_max: WINDOW_SECONDS_MAX,
        clock_skew_seconds: CLOCK_SKEW_SECONDS_DEFAULT,
        require_expires: false,
        require_nonce: false,
        expected_tag: None,
    }
}

#[test]
fn the_test_key_derives_the_published_public_key() {
    assert_eq!(ed25519_signing_key().verifying_key(), ed25519_verifying_key());
    // The JWK form of the same key (§B.1.4): x = JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs.
    let public = ed25519_verifying_key().ed25519_public_bytes().unwrap();
    assert_eq!(
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(public),
        "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"
    );
}

#[test]
fn b_2_1_minimal_signature_base() {
    let base = base_for_input(
        r#"sig-b21=();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd""#,
        "sig-b21",
    );
    assert_eq!(
        base,
        r#""@signature-params": ();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd""#
    );
}

#[test]
fn b_2_2_selective_coverage_signature_base() {
    let base = base_for_input(
        r#"sig-b22=("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example""#,
        "sig-b22",
    );
    let expected = [
        r#""@authority": example.com"#,
        r#""content-digest": sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"#,
        r#""@query-param";name="Pet": dog"#,
        r#""@signature-params": ("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example""#,
    ]
    .join("\n");
    assert_eq!(base, expected);
}

#[test]
fn b_2_3_full_coverage_signature_base() {
    let base = base_for_input(
        r#"sig-b23=("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss""#,
        "sig-b23",
    );
    let expected = [
        r#""date": Tue, 20 Apr 2021 02:07:55 GMT"#,
        r#""@method": POST"#,
        r#""@path": /foo"#,
        r#""@query": ?param=Value&Pet=dog"#,
        r#""@authority": example.com"#,
        r#""content-type": application/json"#,
        r#""content-digest": sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"#,
        r#""content-length": 18"#,
        r#""@signature-params": ("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss""#,
    ]
    .join("\n");
    assert_eq!(base, expected);
}

const B25_INPUT: &str =
    r#"sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret""#;
const B25_SIGNATURE: &str = "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:";

#[test]
fn b_2_5_hmac_sha256_signature_base_and_signature() {
    let params = SignatureParams::new([
        Component::field("date"),
        Component::Authority,
        Component::field("content-type"),
    ])
    .with_created(CREATED)
    .with_keyid("test-shared-secret");
    let base = signature_base(&test_request(), &params).unwrap();
    assert_eq!(
        base,
        [
            r#""date": Tue, 20 Apr 2021 02:07:55 GMT"#,
            r#""@authority": example.com"#,
            r#""content-type": application/json"#,
            r#""@signature-params": ("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret""#,
        ]
        .join("\n")
    );
    let key = SigningKey::hmac_sha256(&shared_secret()).unwrap();
    let headers = sign(&test_request(), "sig-b25", &params, &key).unwrap();
    assert_eq!(headers.signature_input, B25_INPUT);
    assert_eq!(headers.signature, B25_SIGNATURE);
}

#[test]
fn b_2_5_published_signature_verifies() {
    let request =
        test_request().with_header("Signature-Input", B25_INPUT).with_header("Signature", B25_SIGNATURE);
    let verified = verify(&request, TEST_BODY, &rfc_policy("sig-b25"), |keyid| {
        (keyid == "test-shared-secret").then(|| VerifyingKey::hmac_sha256(&shared_secret()).unwrap())
    })
    .unwrap();
    assert_eq!(verified.keyid, "test-shared-secret");
    assert_eq!(verified.algorithm, Algorithm::HmacSha256);
    assert_eq!(verified.created, CREATED);
    assert_eq!(verified.expires, CREATED + WINDOW_SECONDS_MAX);
}

const B26_INPUT: &str = r#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#;
const B26_SIGNATURE: &str =
    "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:";

#[test]
fn b_2_6_ed25519_signature_base_and_signature() {
    let params = SignatureParams::new([
        Component::field("date"),
        Component::Method,
        Component::Path,
        Component::Authority,
        Component::field("content-type"),
        Component::field("content-length"),
    ])
    .with_created(CREATED)
    .with_keyid("test-key-ed25519");
    let base = signature_base(&test_request(), &params).unwrap();
    assert_eq!(
        base,
        [
            r#""date": Tue, 20 Apr 2021 02:07:55 GMT"#,
            r#""@method": POST"#,
            r#""@path": /foo"#,
            r#""@authority": example.com"#,
            r#""content-type": application/json"#,
            r#""content-length": 18"#,
            r#""@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#,
        ]
        .join("\n")
    );
    let headers = sign(&test_request(), "sig-b26", &params, &ed25519_signing_key()).unwrap();
    assert_eq!(headers.signature_input, B26_INPUT);
    assert_eq!(headers.signature, B26_SIGNATURE);
}

#[test]
fn b_2_6_published_signature_verifies_and_fails_when_moved() {
    let request =
        test_request().with_header("Signature-Input", B26_INPUT).with_header("Signature", B26_SIGNATURE);
    let lookup = |keyid: &str| (keyid == "test-key-ed25519").then(ed25519_verifying_key);
    let verified = verify(&request, TEST_BODY, &rfc_policy("sig-b26"), lookup).unwrap();
    assert_eq!(verified.algorithm, Algorithm::Ed25519);

    let mut moved = request.clone();
    moved.path = "/bar".to_owned();
    assert_eq!(verify(&moved, TEST_BODY, &rfc_policy("sig-b26"), lookup), Err(VerifyError::BadSignature));
}

#[test]
fn both_rfc_signatures_on_one_request_are_selected_by_label() {
    let request = test_request()
        .with_header("Signature-Input", B25_INPUT)
        .with_header("Signature-Input", B26_INPUT)
        .with_header("Signature", &format!("{B26_SIGNATURE}, {B25_SIGNATURE}"));
    let lookup = |keyid: &str| match keyid {
        "test-key-ed25519" => Some(ed25519_verifying_key()),
        "test-shared-secret" => Some(VerifyingKey::hmac_sha256(&shared_secret()).unwrap()),
        _ => None,
    };
    assert!(verify(&request, TEST_BODY, &rfc_policy("sig-b25"), lookup).is_ok());
    assert!(verify(&request, TEST_BODY, &rfc_policy("sig-b26"), lookup).is_ok());
    let mut unnamed = rfc_policy("unused");
    unnamed.label = None;
    assert_eq!(
        verify(&request, TEST_BODY, &unnamed, lookup),
        Err(VerifyError::LabelRequired { labels: vec!["sig-b25".to_owned(), "sig-b26".to_owned()] })
    );
}
