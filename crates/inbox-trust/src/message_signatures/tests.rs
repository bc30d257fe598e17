//! agent-inbox's own use of signatures: signed critical calls verified under
//! [`VerifyPolicy::inbox`], and every way such a call must be refused.

use proptest::prelude::*;

use super::*;
use crate::content_digest::content_digest_header;

const NOW: i64 = 1_750_000_000;
const KEYID: &str = "agent-7-2025-06";
const BODY: &[u8] = br#"{"event_id":"01J0000000000000000000000","lease_token":"t"}"#;

fn agent_key() -> SigningKey {
    SigningKey::ed25519_from_seed(&[42; 32])
}

fn lookup(keyid: &str) -> Option<VerifyingKey> {
    (keyid == KEYID).then(|| agent_key().verifying_key())
}

fn unsigned_release(body: &[u8]) -> RequestParts {
    RequestParts::new("POST", "https", "inbox.example.com", "/v1/inbox/release")
        .with_header("content-type", "application/json")
        .with_header("content-digest", &content_digest_header(body))
}

fn signed(parts: RequestParts, params: &SignatureParams, key: &SigningKey) -> RequestParts {
    let headers = sign(&parts, "sig1", params, key).unwrap();
    parts
        .with_header("signature-input", &headers.signature_input)
        .with_header("signature", &headers.signature)
}

fn inbox_params() -> SignatureParams {
    SignatureParams::for_inbox_request(NOW, 300, KEYID, "n-0001")
}

fn signed_release() -> RequestParts {
    signed(unsigned_release(BODY), &inbox_params(), &agent_key())
}

#[test]
fn a_signed_release_verifies_and_reports_how_long_to_remember_the_nonce() {
    let verified = verify(&signed_release(), BODY, &VerifyPolicy::inbox(NOW), lookup).unwrap();
    assert_eq!(verified.label, "sig1");
    assert_eq!(verified.keyid, KEYID);
    assert_eq!(verified.nonce.as_deref(), Some("n-0001"));
    assert_eq!(verified.created, NOW);
    assert_eq!(verified.expires, NOW + 300);
    assert_eq!(verified.remember_nonce_until, NOW + 300 + CLOCK_SKEW_SECONDS_DEFAULT);
}

#[test]
fn the_inbox_signature_base_covers_method_path_authority_and_digest() {
    let base = signature_base(&unsigned_release(BODY), &inbox_params()).unwrap();
    let expected = format!(
        "\"@method\": POST\n\
         \"@path\": /v1/inbox/release\n\
         \"@authority\": inbox.example.com\n\
         \"content-digest\": {}\n\
         \"@signature-params\": (\"@method\" \"@path\" \"@authority\" \"content-digest\");created={NOW};expires={};keyid=\"{KEYID}\";nonce=\"n-0001\"",
        content_digest_header(BODY),
        NOW + 300
    );
    assert_eq!(base, expected);
}

#[test]
fn a_release_signature_moved_to_acknowledge_is_refused() {
    let mut moved = signed_release();
    moved.path = "/v1/inbox/acknowledge".to_owned();
    assert_eq!(verify(&moved, BODY, &VerifyPolicy::inbox(NOW), lookup), Err(VerifyError::BadSignature));
}

#[test]
fn a_signature_sent_to_another_server_is_refused() {
    let mut moved = signed_release();
    moved.authority = "other.example.com".to_owned();
    assert_eq!(verify(&moved, BODY, &VerifyPolicy::inbox(NOW), lookup), Err(VerifyError::BadSignature));
}

#[test]
fn a_tampered_body_fails_the_digest() {
    let tampered = br#"{"event_id":"01J0000000000000000000001","lease_token":"t"}"#;
    let error = verify(&signed_release(), tampered, &VerifyPolicy::inbox(NOW), lookup).unwrap_err();
    assert!(error.is_digest_mismatch(), "{error:?}");
    assert_eq!(error.to_string(), "content-digest sha-256 does not match the body that arrived");
}

#[test]
fn a_replaced_digest_header_breaks_the_signature() {
    let tampered = br#"{"event_id":"other"}"#;
    let mut request = signed_release();
    request.set_header("content-digest", &content_digest_header(tampered));
    assert_eq!(verify(&request, tampered, &VerifyPolicy::inbox(NOW), lookup), Err(VerifyError::BadSignature));
}

#[test]
fn an_expired_signature_is_refused_after_the_skew() {
    let expires = NOW + 300;
    let at_limit = VerifyPolicy::inbox(expires + CLOCK_SKEW_SECONDS_DEFAULT);
    assert!(verify(&signed_release(), BODY, &at_limit, lookup).is_ok());
    let now = expires + CLOCK_SKEW_SECONDS_DEFAULT + 1;
    assert_eq!(
        verify(&signed_release(), BODY, &VerifyPolicy::inbox(now), lookup),
        Err(VerifyError::Expired { expires, now })
    );
}

#[test]
fn a_window_longer_than_five_minutes_is_refused() {
    let params = SignatureParams::for_inbox_request(NOW, 301, KEYID, "n");
    let request = signed(unsigned_release(BODY), &params, &agent_key());
    assert_eq!(
        verify(&request, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::WindowTooLong { window_seconds: 301, window_seconds_max: 300 })
    );
}

#[test]
fn expires_not_after_created_is_refused() {
    let params = SignatureParams::for_inbox_request(NOW, 0, KEYID, "n");
    let request = signed(unsigned_release(BODY), &params, &agent_key());
    assert_eq!(
        verify(&request, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::InvalidWindow { created: NOW, expires: NOW })
    );
}

#[test]
fn a_signature_created_in_the_future_is_refused_beyond_the_skew() {
    let within = NOW - CLOCK_SKEW_SECONDS_DEFAULT;
    assert!(verify(&signed_release(), BODY, &VerifyPolicy::inbox(within), lookup).is_ok());
    let now = within - 1;
    assert_eq!(
        verify(&signed_release(), BODY, &VerifyPolicy::inbox(now), lookup),
        Err(VerifyError::CreatedInFuture { created: NOW, now })
    );
}

#[test]
fn missing_parameters_are_named() {
    let components = inbox_request_components();
    let cases = [
        (
            SignatureParams::new(components.clone()).with_created(NOW).with_expires(NOW + 60).with_nonce("n"),
            "keyid",
        ),
        (
            SignatureParams::new(components.clone())
                .with_created(NOW)
                .with_expires(NOW + 60)
                .with_keyid(KEYID),
            "nonce",
        ),
        (
            SignatureParams::new(components.clone()).with_created(NOW).with_keyid(KEYID).with_nonce("n"),
            "expires",
        ),
        (
            SignatureParams::new(components).with_expires(NOW + 60).with_keyid(KEYID).with_nonce("n"),
            "created",
        ),
    ];
    for (params, parameter) in cases {
        let request = signed(unsigned_release(BODY), &params, &agent_key());
        assert_eq!(
            verify(&request, BODY, &VerifyPolicy::inbox(NOW), lookup),
            Err(VerifyError::MissingParameter { parameter }),
            "{parameter}"
        );
    }
}

#[test]
fn a_signature_that_skips_a_required_component_is_refused() {
    let params = SignatureParams::new([Component::Method, Component::Path, Component::Authority])
        .with_created(NOW)
        .with_expires(NOW + 60)
        .with_keyid(KEYID)
        .with_nonce("n");
    let request = signed(unsigned_release(BODY), &params, &agent_key());
    assert_eq!(
        verify(&request, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::ComponentNotCovered { component: "content-digest".to_owned() })
    );
}

#[test]
fn verification_can_pause_for_an_asynchronous_key_lookup() {
    let request = signed_release();
    let unverified = check_signature_headers(&request, &VerifyPolicy::inbox(NOW)).unwrap();
    assert_eq!(unverified.label(), "sig1");
    assert_eq!(unverified.keyid(), KEYID);
    assert_eq!(unverified.params().nonce(), Some("n-0001"));
    // ... the caller awaits its key store here ...
    let key = agent_key().verifying_key();
    let verified = unverified.verify_with_key(BODY, &key).unwrap();
    assert_eq!(verified.keyid, KEYID);

    let wrong = SigningKey::ed25519_from_seed(&[1; 32]).verifying_key();
    let unverified = check_signature_headers(&request, &VerifyPolicy::inbox(NOW)).unwrap();
    assert_eq!(unverified.verify_with_key(BODY, &wrong), Err(VerifyError::BadSignature));
}

#[test]
fn an_unknown_key_is_named() {
    assert_eq!(
        verify(&signed_release(), BODY, &VerifyPolicy::inbox(NOW), |_| None),
        Err(VerifyError::UnknownKey { keyid: KEYID.to_owned() })
    );
}

#[test]
fn a_rotated_key_verifies_under_its_own_keyid_only() {
    let new_key = SigningKey::ed25519_from_seed(&[43; 32]);
    let params = SignatureParams::for_inbox_request(NOW, 300, "agent-7-2025-07", "n-2");
    let request = signed(unsigned_release(BODY), &params, &new_key);
    let both = |keyid: &str| match keyid {
        KEYID => Some(agent_key().verifying_key()),
        "agent-7-2025-07" => Some(new_key.verifying_key()),
        _ => None,
    };
    assert!(verify(&request, BODY, &VerifyPolicy::inbox(NOW), both).is_ok());
    assert!(verify(&signed_release(), BODY, &VerifyPolicy::inbox(NOW), both).is_ok());
    // The new key's signature presented under the old keyid fails.
    let lying =
        signed(unsigned_release(BODY), &SignatureParams::for_inbox_request(NOW, 300, KEYID, "n-3"), &new_key);
    assert_eq!(verify(&lying, BODY, &VerifyPolicy::inbox(NOW), both), Err(VerifyError::BadSignature));
}

#[test]
fn the_declared_algorithm_must_be_the_keys() {
    let hmac_key = SigningKey::hmac_sha256(&[9; 32]).unwrap();
    let params = inbox_params().with_alg(Algorithm::HmacSha256);
    let request = signed(unsigned_release(BODY), &params, &hmac_key);
    // The verifier knows KEYID as an ed25519 key: the HMAC claim is refused before any MAC.
    assert_eq!(
        verify(&request, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::AlgorithmMismatch {
            keyid: KEYID.to_owned(),
            declared: Algorithm::HmacSha256,
            key: Algorithm::Ed25519
        })
    );
    assert_eq!(
        sign(&unsigned_release(BODY), "sig1", &params, &agent_key()),
        Err(SignError::AlgorithmMismatch { declared: Algorithm::HmacSha256, key: Algorithm::Ed25519 })
    );
}

#[test]
fn hmac_webhook_signatures_round_trip() {
    let secret = [7_u8; 48];
    let key = SigningKey::hmac_sha256(&secret).unwrap();
    let webhook = RequestParts::new("POST", "https", "hooks.customer.example", "/agent-inbox?x=1")
        .with_header("content-digest", &content_digest_header(BODY));
    let params = SignatureParams::for_inbox_request(NOW, 120, "webhook-1", "w-1")
        .with_alg(Algorithm::HmacSha256)
        .with_tag("agent-inbox-webhook");
    let request = signed(webhook, &params, &key);
    let mut policy = VerifyPolicy::inbox(NOW + 10);
    policy.expected_tag = Some("agent-inbox-webhook".to_owned());
    let verified =
        verify(&request, BODY, &policy, |_| Some(VerifyingKey::hmac_sha256(&secret).unwrap())).unwrap();
    assert_eq!(verified.algorithm, Algorithm::HmacSha256);
    assert_eq!(verified.tag.as_deref(), Some("agent-inbox-webhook"));

    let wrong_secret = |_: &str| Some(VerifyingKey::hmac_sha256(&[8; 48]).unwrap());
    assert_eq!(verify(&request, BODY, &policy, wrong_secret), Err(VerifyError::BadSignature));
}

#[test]
fn a_signature_for_another_purpose_is_refused_by_tag() {
    let mut policy = VerifyPolicy::inbox(NOW);
    policy.expected_tag = Some("agent-inbox-webhook".to_owned());
    assert_eq!(
        verify(&signed_release(), BODY, &policy, lookup),
        Err(VerifyError::TagMismatch { expected: "agent-inbox-webhook".to_owned(), found: None })
    );
}

#[test]
fn missing_and_malformed_headers_are_named() {
    let unsigned = unsigned_release(BODY);
    assert_eq!(
        verify(&unsigned, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::MissingHeader { header: "signature-input" })
    );
    let empty_input = unsigned.clone().with_header("signature-input", "").with_header("signature", "");
    assert_eq!(
        verify(&empty_input, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::MissingHeader { header: "signature-input" })
    );
    let only_input = unsigned.clone().with_header("signature-input", "sig1=()");
    assert_eq!(
        verify(&only_input, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::MissingHeader { header: "signature" })
    );
    let malformed = unsigned
        .clone()
        .with_header("signature-input", "sig1=(\"@method\"")
        .with_header("signature", "sig1=:AA==:");
    assert!(matches!(
        verify(&malformed, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::MalformedHeader { header: "signature-input", .. })
    ));
    let mismatched_labels = unsigned
        .with_header("signature-input", &inbox_params_input("sig1"))
        .with_header("signature", "sig2=:AA==:");
    assert_eq!(
        verify(&mismatched_labels, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::SignatureNotFound { label: "sig1".to_owned(), header: "signature" })
    );
}

fn inbox_params_input(label: &str) -> String {
    serialize_signature_input(label, &inbox_params())
}

#[test]
fn a_named_label_that_is_absent_is_refused() {
    let mut policy = VerifyPolicy::inbox(NOW);
    policy.label = Some("inbox".to_owned());
    assert_eq!(
        verify(&signed_release(), BODY, &policy, lookup),
        Err(VerifyError::SignatureNotFound { label: "inbox".to_owned(), header: "signature-input" })
    );
}

#[test]
fn oversized_nonces_are_refused_before_any_lookup() {
    let nonce = "n".repeat(NONCE_BYTES_LIMIT + 1);
    let params = SignatureParams::for_inbox_request(NOW, 60, KEYID, &nonce);
    let request = signed(unsigned_release(BODY), &params, &agent_key());
    assert_eq!(
        verify(&request, BODY, &VerifyPolicy::inbox(NOW), |_| panic!("no lookup expected")),
        Err(VerifyError::ParameterTooLong {
            parameter: "nonce",
            bytes: NONCE_BYTES_LIMIT + 1,
            limit: NONCE_BYTES_LIMIT
        })
    );
}

#[test]
fn signing_refuses_what_cannot_be_serialized() {
    let params = inbox_params().with_nonce("line\nbreak");
    assert_eq!(
        sign(&unsigned_release(BODY), "sig1", &params, &agent_key()),
        Err(SignError::Base(SignatureBaseError::InvalidParameterValue { parameter: "nonce" }))
    );
    assert!(matches!(
        sign(&unsigned_release(BODY), "Sig1", &inbox_params(), &agent_key()),
        Err(SignError::Label(SignatureHeaderError::InvalidLabel { .. }))
    ));
    let duplicated = SignatureParams::new([Component::Method, Component::Method]);
    assert_eq!(
        sign(&unsigned_release(BODY), "sig1", &duplicated, &agent_key()),
        Err(SignError::Base(SignatureBaseError::DuplicateComponent { component: "@method".to_owned() }))
    );
    let missing = SignatureParams::new([Component::field("x-absent")]);
    assert_eq!(
        sign(&unsigned_release(BODY), "sig1", &missing, &agent_key()),
        Err(SignError::Base(SignatureBaseError::MissingComponent { component: "x-absent".to_owned() }))
    );
}

#[test]
fn a_covered_content_digest_that_is_absent_is_a_missing_component() {
    let mut request = signed_release();
    request.headers.retain(|(name, _)| name != "content-digest");
    assert_eq!(
        verify(&request, BODY, &VerifyPolicy::inbox(NOW), lookup),
        Err(VerifyError::SignatureBase(SignatureBaseError::MissingComponent {
            component: "content-digest".to_owned()
        }))
    );
}

proptest! {
    #[test]
    fn any_body_and_path_round_trip_and_any_other_body_fails(
        body in proptest::collection::vec(any::<u8>(), 0..200),
        other in proptest::collection::vec(any::<u8>(), 0..200),
        path in "/[a-z0-9/._-]{0,30}",
        nonce in "[A-Za-z0-9_-]{1,32}",
    ) {
        let parts = RequestParts::new("POST", "https", "inbox.example.com", &path)
            .with_header("content-digest", &content_digest_header(&body));
        let params = SignatureParams::for_inbox_request(NOW, 300, KEYID, &nonce);
        let request = signed(parts, &params, &agent_key());
        let verified = verify(&request, &body, &VerifyPolicy::inbox(NOW), lookup).unwrap();
        prop_assert_eq!(verified.nonce, Some(nonce));
        let result = verify(&request, &other, &VerifyPolicy::inbox(NOW), lookup);
        if other == body {
            prop_assert!(result.is_ok());
        } else {
            prop_assert!(result.unwrap_err().is_digest_mismatch());
        }
    }
}
