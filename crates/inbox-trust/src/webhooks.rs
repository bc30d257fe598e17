//! Signed webhook deliveries and the registration challenge, for both ends: the service
//! signs with [`sign_webhook`], a receiver checks with [`verify_webhook`] and answers a
//! challenge with [`challenge_response`].
//!
//! A delivery carries seed 001's headers: `MATM-Delivery-Id`, `MATM-Timestamp`,
//! `MATM-Nonce`, `MATM-Key-Id`, `Content-Digest`, `Signature-Input` and `Signature`. The
//! signature covers method, path, authority, the body digest and the four `MATM-*` headers,
//! carries the tag [`WEBHOOK_TAG`] (so a webhook signature can never pass as an agent's
//! request signature, or the reverse), and lives at most [`WEBHOOK_WINDOW_SECONDS`].
//!
//! During a secret rotation a delivery carries one signature per valid key, current key
//! first under the label `matm`, so a receiver that still has the old secret keeps
//! verifying until the overlap ends.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::content_digest::{CONTENT_DIGEST, content_digest_header};
use crate::message_signatures::{
    Component, RequestParts, SIGNATURE, SIGNATURE_INPUT, SignError, SignatureParams, SigningKey, VerifyError,
    VerifyPolicy, VerifyingKey, check_signature_headers, inbox_request_components, parse_signature_input,
    sign,
};

pub const MATM_DELIVERY_ID: &str = "matm-delivery-id";
pub const MATM_TIMESTAMP: &str = "matm-timestamp";
pub const MATM_NONCE: &str = "matm-nonce";
pub const MATM_KEY_ID: &str = "matm-key-id";

/// The `tag` parameter of every webhook signature.
pub const WEBHOOK_TAG: &str = "agent-inbox-webhook";

/// Validity of a delivery's signature: `expires = created + this`.
pub const WEBHOOK_WINDOW_SECONDS: i64 = 300;

/// Labels of the signatures on a delivery, current key first.
pub const WEBHOOK_LABELS: [&str; 2] = ["matm", "matm-previous"];

/// Everything a webhook signature covers: the inbox request components and the `MATM-*`
/// headers.
pub fn webhook_components() -> Vec<Component> {
    let mut components = inbox_request_components();
    for name in [MATM_DELIVERY_ID, MATM_TIMESTAMP, MATM_NONCE, MATM_KEY_ID] {
        components.push(Component::field(name));
    }
    components
}

/// One delivery about to be sent (a POST).
#[derive(Debug, Clone, Copy)]
pub struct OutgoingWebhook<'a> {
    /// The receiver's authority as the `Host` header carries it.
    pub authority: &'a str,
    pub path: &'a str,
    pub body: &'a [u8],
    pub delivery_id: &'a str,
    /// Unix seconds; also the signature's `created`.
    pub timestamp: i64,
    pub nonce: &'a str,
}

/// Signs a delivery with each `(keyid, key)` in order (the current key first, then a key
/// still inside its rotation overlap). Returns the headers to send, lower-case names.
pub fn sign_webhook(
    webhook: &OutgoingWebhook<'_>,
    keys: &[(&str, &SigningKey)],
) -> Result<Vec<(&'static str, String)>, SignError> {
    let Some(&(current_keyid, _)) = keys.first() else {
        return Ok(Vec::new());
    };
    let content_digest = content_digest_header(webhook.body);
    let timestamp = webhook.timestamp.to_string();
    let mut headers = vec![
        (MATM_DELIVERY_ID, webhook.delivery_id.to_owned()),
        (MATM_TIMESTAMP, timestamp),
        (MATM_NONCE, webhook.nonce.to_owned()),
        (MATM_KEY_ID, current_keyid.to_owned()),
        (CONTENT_DIGEST, content_digest),
    ];
    let mut parts = RequestParts::new("POST", "https", webhook.authority, webhook.path);
    for (name, value) in &headers {
        parts = parts.with_header(name, value);
    }
    let mut inputs = Vec::new();
    let mut signatures = Vec::new();
    for (&label, &(keyid, key)) in WEBHOOK_LABELS.iter().zip(keys) {
        let params = SignatureParams::new(webhook_components())
            .with_created(webhook.timestamp)
            .with_expires(webhook.timestamp + WEBHOOK_WINDOW_SECONDS)
            .with_keyid(keyid)
            .with_alg(key.algorithm())
            .with_nonce(webhook.nonce)
            .with_tag(WEBHOOK_TAG);
        let signed = sign(&parts, label, &params, key)?;
        inputs.push(signed.signature_input);
        signatures.push(signed.signature);
    }
    headers.push((SIGNATURE_INPUT, inputs.join(", ")));
    headers.push((SIGNATURE, signatures.join(", ")));
    Ok(headers)
}

/// A delivery whose signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedWebhook {
    pub delivery_id: String,
    pub keyid: String,
    pub nonce: String,
    /// Remember the nonce (or the delivery id) until this unix second and refuse a repeat.
    pub remember_nonce_until: i64,
}

/// Why a receiver must refuse a delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("no signature on this delivery is made with a key you know; check MATM-Key-Id")]
    NoKnownKey,
    #[error("the {header} header is missing")]
    MissingHeader { header: &'static str },
    #[error("the {header} header does not match the signature's {parameter}")]
    HeaderMismatch { header: &'static str, parameter: &'static str },
    #[error("{0}")]
    Signature(#[from] VerifyError),
}

/// Verifies a received delivery: the first signature whose keyid `resolve_key` knows must
/// verify under the webhook policy at `now` (unix seconds), and the `MATM-*` headers must
/// agree with its parameters. The receiver still has to remember the nonce to refuse
/// replays inside the window.
pub fn verify_webhook(
    parts: &RequestParts,
    body: &[u8],
    now: i64,
    resolve_key: impl Fn(&str) -> Option<VerifyingKey>,
) -> Result<VerifiedWebhook, WebhookError> {
    let input =
        parts.field_value(SIGNATURE_INPUT).ok_or(VerifyError::MissingHeader { header: SIGNATURE_INPUT })?;
    let inputs = parse_signature_input(&input)
        .map_err(|source| VerifyError::MalformedHeader { header: SIGNATURE_INPUT, source })?;
    let (label, key) = inputs
        .iter()
        .find_map(|(label, params)| params.keyid().and_then(&resolve_key).map(|key| (label.clone(), key)))
        .ok_or(WebhookError::NoKnownKey)?;
    let policy = VerifyPolicy {
        label: Some(label),
        required_components: webhook_components(),
        window_seconds_max: WEBHOOK_WINDOW_SECONDS,
        expected_tag: Some(WEBHOOK_TAG.to_owned()),
        ..VerifyPolicy::inbox(now)
    };
    let unverified = check_signature_headers(parts, &policy)?;
    let verified = unverified.verify_with_key(body, &key)?;
    let header =
        |name: &'static str| parts.field_value(name).ok_or(WebhookError::MissingHeader { header: name });
    let nonce = verified.nonce.clone().unwrap_or_default();
    if header(MATM_NONCE)? != nonce {
        return Err(WebhookError::HeaderMismatch { header: MATM_NONCE, parameter: "nonce" });
    }
    if header(MATM_TIMESTAMP)? != verified.created.to_string() {
        return Err(WebhookError::HeaderMismatch { header: MATM_TIMESTAMP, parameter: "created" });
    }
    Ok(VerifiedWebhook {
        delivery_id: header(MATM_DELIVERY_ID)?,
        keyid: verified.keyid,
        nonce,
        remember_nonce_until: verified.remember_nonce_until,
    })
}

/// The string a registration challenge asks the receiver to MAC.
pub fn challenge_string(delivery_id: &str, timestamp: i64, nonce: &str) -> String {
    format!("agent-inbox-challenge.{delivery_id}.{timestamp}.{nonce}")
}

/// The receiver's answer to a challenge: base64 (standard, padded) of
/// HMAC-SHA256(secret, challenge).
pub fn challenge_response(secret: &[u8], challenge: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(mac(secret, challenge).finalize().into_bytes())
}

/// Whether `answer` is the right response to `challenge`, compared in constant time.
pub fn check_challenge_response(secret: &[u8], challenge: &str, answer: &str) -> bool {
    use base64::Engine as _;
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(answer.trim()) else {
        return false;
    };
    mac(secret, challenge).verify_slice(&bytes).is_ok()
}

fn mac(secret: &[u8], challenge: &str) -> Hmac<Sha256> {
    // HMAC accepts keys of any length (RFC 2104 §2), so this cannot fail.
    let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(secret).expect("hmac accepts any key length");
    mac.update(challenge.as_bytes());
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_760_000_000;
    const BODY: &[u8] = br#"{"signal_type":"inbox.updated","head_seq":7}"#;

    fn webhook() -> OutgoingWebhook<'static> {
        OutgoingWebhook {
            authority: "agent.example.net",
            path: "/matm/callback",
            body: BODY,
            delivery_id: "d-1",
            timestamp: NOW,
            nonce: "nonce-1",
        }
    }

    fn received(headers: &[(&'static str, String)]) -> RequestParts {
        let mut parts = RequestParts::new("POST", "https", "agent.example.net", "/matm/callback");
        for (name, value) in headers {
            parts = parts.with_header(name, value);
        }
        parts
    }

    #[test]
    fn a_delivery_verifies_with_the_current_or_the_previous_secret() {
        let current = SigningKey::hmac_sha256(&[1; 32]).unwrap();
        let previous = SigningKey::hmac_sha256(&[2; 32]).unwrap();
        let headers = sign_webhook(&webhook(), &[("cb.2", &current), ("cb.1", &previous)]).unwrap();
        let names: Vec<&str> = headers.iter().map(|(name, _)| *name).collect();
        for expected in [
            MATM_DELIVERY_ID,
            MATM_TIMESTAMP,
            MATM_NONCE,
            MATM_KEY_ID,
            CONTENT_DIGEST,
            SIGNATURE_INPUT,
            SIGNATURE,
        ] {
            assert!(names.contains(&expected), "{expected} is sent");
        }
        let parts = received(&headers);
        let with_current =
            verify_webhook(&parts, BODY, NOW + 5, |k| (k == "cb.2").then(|| current.verifying_key()));
        assert_eq!(with_current.unwrap().keyid, "cb.2");
        let with_previous =
            verify_webhook(&parts, BODY, NOW + 5, |k| (k == "cb.1").then(|| previous.verifying_key()))
                .unwrap();
        assert_eq!(with_previous.keyid, "cb.1");
        assert_eq!(with_previous.delivery_id, "d-1");
        assert_eq!(verify_webhook(&parts, BODY, NOW, |_| None).unwrap_err(), WebhookError::NoKnownKey);
    }

    #[test]
    fn tampering_and_stale_deliveries_are_refused() {
        let key = SigningKey::hmac_sha256(&[1; 32]).unwrap();
        let lookup = |_: &str| Some(key.verifying_key());
        let headers = sign_webhook(&webhook(), &[("cb.1", &key)]).unwrap();
        let parts = received(&headers);
        let tampered = verify_webhook(&parts, b"{}", NOW, lookup).unwrap_err();
        assert!(matches!(&tampered, WebhookError::Signature(e) if e.is_digest_mismatch()), "{tampered}");
        let stale = verify_webhook(&parts, BODY, NOW + WEBHOOK_WINDOW_SECONDS + 60, lookup).unwrap_err();
        assert!(matches!(stale, WebhookError::Signature(VerifyError::Expired { .. })), "{stale}");
        let mut swapped = headers.clone();
        for (name, value) in &mut swapped {
            if *name == MATM_DELIVERY_ID {
                *value = "d-2".to_owned();
            }
        }
        let swapped = verify_webhook(&received(&swapped), BODY, NOW, lookup).unwrap_err();
        assert_eq!(swapped, WebhookError::Signature(VerifyError::BadSignature));
    }

    #[test]
    fn challenge_responses_check_in_constant_time_and_only_with_the_secret() {
        let challenge = challenge_string("d-1", NOW, "n");
        let answer = challenge_response(&[7; 32], &challenge);
        assert!(check_challenge_response(&[7; 32], &challenge, &answer));
        assert!(!check_challenge_response(&[8; 32], &challenge, &answer));
        assert!(!check_challenge_response(&[7; 32], &challenge_string("d-2", NOW, "n"), &answer));
        assert!(!check_challenge_response(&[7; 32], &challenge, "not base64!"));
    }
}
