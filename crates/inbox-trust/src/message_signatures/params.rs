//! Signature parameters and the two header fields that carry them: `Signature-Input`
//! (label → covered components and parameters) and `Signature` (label → signature bytes).
//!
//! Parameters keep the order they were written in, because the `@signature-params` line is
//! their serialization and a different order is a different signature base.

use super::components::{Component, SignatureBaseError};
use super::keys::Algorithm;
use crate::structured::{self, BareItem, InnerList, Item, Member, StructuredFieldError};

/// One RFC 9421 §2.3 signature parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureParameter {
    /// Unix seconds when the signature was made.
    Created(i64),
    /// Unix seconds after which the signature must not be accepted.
    Expires(i64),
    /// Names the key; the verifier looks it up, so rotation is "publish the new keyid".
    KeyId(String),
    /// The algorithm, which must agree with the key's own.
    Alg(Algorithm),
    /// A single-use value the verifier remembers for the window to refuse replays.
    Nonce(String),
    /// The application the signature is for, so a signature for one use cannot be replayed
    /// as another.
    Tag(String),
}

impl SignatureParameter {
    pub fn name(&self) -> &'static str {
        match self {
            SignatureParameter::Created(_) => "created",
            SignatureParameter::Expires(_) => "expires",
            SignatureParameter::KeyId(_) => "keyid",
            SignatureParameter::Alg(_) => "alg",
            SignatureParameter::Nonce(_) => "nonce",
            SignatureParameter::Tag(_) => "tag",
        }
    }

    fn bare_item(&self) -> BareItem {
        match self {
            SignatureParameter::Created(seconds) | SignatureParameter::Expires(seconds) => {
                BareItem::Integer(*seconds)
            }
            SignatureParameter::KeyId(text)
            | SignatureParameter::Nonce(text)
            | SignatureParameter::Tag(text) => BareItem::String(text.clone()),
            SignatureParameter::Alg(algorithm) => BareItem::String(algorithm.name().to_owned()),
        }
    }
}

/// The covered components and parameters of one signature: the value of one
/// `Signature-Input` member, and the last line of its signature base.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SignatureParams {
    components: Vec<Component>,
    parameters: Vec<SignatureParameter>,
}

impl SignatureParams {
    /// Parameters covering `components`, in that order, with no parameters yet.
    pub fn new(components: impl IntoIterator<Item = Component>) -> Self {
        SignatureParams { components: components.into_iter().collect(), parameters: Vec::new() }
    }

    /// What agent-inbox signs on a critical call or a webhook: method, path, authority and
    /// body digest, `created` now, `expires` `window_seconds` later, the key and a nonce.
    pub fn for_inbox_request(created: i64, window_seconds: i64, keyid: &str, nonce: &str) -> Self {
        SignatureParams::new(inbox_request_components())
            .with_created(created)
            .with_expires(created + window_seconds)
            .with_keyid(keyid)
            .with_nonce(nonce)
    }

    #[must_use]
    pub fn with_created(self, seconds: i64) -> Self {
        self.with(SignatureParameter::Created(seconds))
    }

    #[must_use]
    pub fn with_expires(self, seconds: i64) -> Self {
        self.with(SignatureParameter::Expires(seconds))
    }

    #[must_use]
    pub fn with_keyid(self, keyid: &str) -> Self {
        self.with(SignatureParameter::KeyId(keyid.to_owned()))
    }

    #[must_use]
    pub fn with_alg(self, algorithm: Algorithm) -> Self {
        self.with(SignatureParameter::Alg(algorithm))
    }

    #[must_use]
    pub fn with_nonce(self, nonce: &str) -> Self {
        self.with(SignatureParameter::Nonce(nonce.to_owned()))
    }

    #[must_use]
    pub fn with_tag(self, tag: &str) -> Self {
        self.with(SignatureParameter::Tag(tag.to_owned()))
    }

    /// Sets a parameter: replaces it where it already is, or appends it.
    #[must_use]
    pub fn with(mut self, parameter: SignatureParameter) -> Self {
        match self.parameters.iter_mut().find(|existing| existing.name() == parameter.name()) {
            Some(existing) => *existing = parameter,
            None => self.parameters.push(parameter),
        }
        self
    }

    pub fn components(&self) -> &[Component] {
        &self.components
    }

    pub fn parameters(&self) -> &[SignatureParameter] {
        &self.parameters
    }

    pub fn created(&self) -> Option<i64> {
        self.parameters.iter().find_map(|parameter| match parameter {
            SignatureParameter::Created(seconds) => Some(*seconds),
            _ => None,
        })
    }

    pub fn expires(&self) -> Option<i64> {
        self.parameters.iter().find_map(|parameter| match parameter {
            SignatureParameter::Expires(seconds) => Some(*seconds),
            _ => None,
        })
    }

    pub fn keyid(&self) -> Option<&str> {
        self.parameters.iter().find_map(|parameter| match parameter {
            SignatureParameter::KeyId(keyid) => Some(keyid.as_str()),
            _ => None,
        })
    }

    pub fn alg(&self) -> Option<Algorithm> {
        self.parameters.iter().find_map(|parameter| match parameter {
            SignatureParameter::Alg(algorithm) => Some(*algorithm),
            _ => None,
        })
    }

    pub fn nonce(&self) -> Option<&str> {
        self.parameters.iter().find_map(|parameter| match parameter {
            SignatureParameter::Nonce(nonce) => Some(nonce.as_str()),
            _ => None,
        })
    }

    pub fn tag(&self) -> Option<&str> {
        self.parameters.iter().find_map(|parameter| match parameter {
            SignatureParameter::Tag(tag) => Some(tag.as_str()),
            _ => None,
        })
    }

    /// The inner list with parameters, e.g. `("@method" "@path");created=1;keyid="k"`:
    /// the `@signature-params` value and the `Signature-Input` member value.
    pub fn serialize(&self) -> String {
        structured::serialize_inner_list(&self.to_inner_list())
    }

    /// Strings in parameters must be printable ASCII to be serializable at all.
    pub(crate) fn check_serializable(&self) -> Result<(), SignatureBaseError> {
        for parameter in &self.parameters {
            if let BareItem::String(text) = parameter.bare_item() {
                if !structured::is_valid_string(&text) {
                    return Err(SignatureBaseError::InvalidParameterValue { parameter: parameter.name() });
                }
            }
        }
        for component in &self.components {
            let printable = structured::is_valid_string(component.name())
                && match component {
                    Component::QueryParam { name } => structured::is_valid_string(name),
                    _ => true,
                };
            if !printable {
                return Err(SignatureBaseError::InvalidComponentValue { component: component.to_string() });
            }
        }
        Ok(())
    }

    fn to_inner_list(&self) -> InnerList {
        InnerList {
            items: self.components.iter().map(Component::to_item).collect(),
            parameters: self
                .parameters
                .iter()
                .map(|parameter| (parameter.name().to_owned(), parameter.bare_item()))
                .collect(),
        }
    }

    fn from_inner_list(label: &str, inner_list: &InnerList) -> Result<Self, SignatureHeaderError> {
        let components = inner_list
            .items
            .iter()
            .map(|item| component_from_item(label, item))
            .collect::<Result<Vec<_>, _>>()?;
        let mut parameters = Vec::with_capacity(inner_list.parameters.len());
        for (name, value) in &inner_list.parameters {
            parameters.push(parameter_from_pair(name, value)?);
        }
        Ok(SignatureParams { components, parameters })
    }
}

/// `@method`, `@path`, `@authority` and `content-digest`: what binds a signature to one
/// operation on one server with one body.
pub fn inbox_request_components() -> Vec<Component> {
    vec![
        Component::Method,
        Component::Path,
        Component::Authority,
        Component::field(crate::content_digest::CONTENT_DIGEST),
    ]
}

/// Why a `Signature-Input` or `Signature` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureHeaderError {
    #[error("{0}")]
    Structured(#[from] StructuredFieldError),
    #[error("signature label {label:?} must be a lower-case structured-field key")]
    InvalidLabel { label: String },
    #[error("signature input {label:?} is not an inner list of components")]
    NotInnerList { label: String },
    #[error("signature {label:?} is not a byte sequence; write it as :<base64>:")]
    NotByteSequence { label: String },
    #[error("signature input {label:?} lists a component that is not a string")]
    ComponentNotString { label: String },
    #[error("component {name:?} is not supported in requests")]
    UnsupportedComponent { name: String },
    #[error("component {name:?} must be lower-case")]
    UpperCaseComponent { name: String },
    #[error("component parameter {parameter:?} on {component:?} is not supported")]
    UnsupportedComponentParameter { component: String, parameter: String },
    #[error("signature parameter {parameter:?} is not supported")]
    UnsupportedParameter { parameter: String },
    #[error("signature parameter {parameter} must be {expected}")]
    InvalidParameter { parameter: &'static str, expected: &'static str },
    #[error("signature algorithm {alg:?} is not supported; use ed25519 or hmac-sha256")]
    UnsupportedAlgorithm { alg: String },
}

/// The `Signature-Input` member for one signature: `label=(...);params`.
pub fn serialize_signature_input(label: &str, params: &SignatureParams) -> String {
    format!("{label}={}", params.serialize())
}

/// The `Signature` member for one signature: `label=:base64:`.
pub fn serialize_signature(label: &str, signature: &[u8]) -> String {
    format!("{label}={}", structured::serialize_byte_sequence(signature))
}

/// Every signature's parameters in a `Signature-Input` value, in order.
pub fn parse_signature_input(value: &str) -> Result<Vec<(String, SignatureParams)>, SignatureHeaderError> {
    structured::parse_dictionary(value)?
        .into_iter()
        .map(|(label, member)| match member {
            Member::InnerList(inner_list) => {
                let params = SignatureParams::from_inner_list(&label, &inner_list)?;
                Ok((label, params))
            }
            Member::Item(_) => Err(SignatureHeaderError::NotInnerList { label }),
        })
        .collect()
}

/// Every signature's bytes in a `Signature` value, in order.
pub fn parse_signature(value: &str) -> Result<Vec<(String, Vec<u8>)>, SignatureHeaderError> {
    structured::parse_dictionary(value)?
        .into_iter()
        .map(|(label, member)| match member {
            Member::Item(Item { bare_item: BareItem::ByteSequence(bytes), .. }) => Ok((label, bytes)),
            _ => Err(SignatureHeaderError::NotByteSequence { label }),
        })
        .collect()
}

pub(crate) fn check_label(label: &str) -> Result<(), SignatureHeaderError> {
    if structured::is_valid_key(label) {
        Ok(())
    } else {
        Err(SignatureHeaderError::InvalidLabel { label: label.to_owned() })
    }
}

fn component_from_item(label: &str, item: &Item) -> Result<Component, SignatureHeaderError> {
    let BareItem::String(name) = &item.bare_item else {
        return Err(SignatureHeaderError::ComponentNotString { label: label.to_owned() });
    };
    if name.bytes().any(|byte| byte.is_ascii_uppercase()) {
        return Err(SignatureHeaderError::UpperCaseComponent { name: name.clone() });
    }
    let unsupported_parameter = |parameter: &str| SignatureHeaderError::UnsupportedComponentParameter {
        component: name.clone(),
        parameter: parameter.to_owned(),
    };
    if name == "@query-param" {
        let mut query_name = None;
        for (parameter, value) in &item.parameters {
            match (parameter.as_str(), value) {
                ("name", BareItem::String(text)) => query_name = Some(text.clone()),
                _ => return Err(unsupported_parameter(parameter)),
            }
        }
        return query_name
            .map(|name| Component::QueryParam { name })
            .ok_or_else(|| unsupported_parameter("(missing name)"));
    }
    // `sf`, `key`, `bs`, `req` and `tr` change how a value is taken; we cover none of those
    // forms, and ignoring them would sign a different value than the signer meant.
    if let Some((parameter, _)) = item.parameters.first() {
        return Err(unsupported_parameter(parameter));
    }
    let component = match name.as_str() {
        "@method" => Component::Method,
        "@target-uri" => Component::TargetUri,
        "@authority" => Component::Authority,
        "@scheme" => Component::Scheme,
        "@request-target" => Component::RequestTarget,
        "@path" => Component::Path,
        "@query" => Component::Query,
        _ if name.starts_with('@') || name.is_empty() => {
            return Err(SignatureHeaderError::UnsupportedComponent { name: name.clone() });
        }
        _ => Component::Field(name.clone()),
    };
    Ok(component)
}

fn parameter_from_pair(name: &str, value: &BareItem) -> Result<SignatureParameter, SignatureHeaderError> {
    let integer = |parameter| match value {
        BareItem::Integer(seconds) if *seconds >= 0 => Ok(*seconds),
        _ => Err(SignatureHeaderError::InvalidParameter {
            parameter,
            expected: "a non-negative integer of unix seconds",
        }),
    };
    let string = |parameter| match value {
        BareItem::String(text) => Ok(text.clone()),
        _ => Err(SignatureHeaderError::InvalidParameter { parameter, expected: "a quoted string" }),
    };
    Ok(match name {
        "created" => SignatureParameter::Created(integer("created")?),
        "expires" => SignatureParameter::Expires(integer("expires")?),
        "keyid" => SignatureParameter::KeyId(string("keyid")?),
        "nonce" => SignatureParameter::Nonce(string("nonce")?),
        "tag" => SignatureParameter::Tag(string("tag")?),
        "alg" => {
            let alg = string("alg")?;
            SignatureParameter::Alg(
                Algorithm::from_name(&alg).ok_or(SignatureHeaderError::UnsupportedAlgorithm { alg })?,
            )
        }
        _ => {
            return Err(SignatureHeaderError::UnsupportedParameter { parameter: name.to_owned() });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_keep_the_order_they_were_given() {
        let params = SignatureParams::new([Component::Method])
            .with_keyid("k")
            .with_nonce("n")
            .with_created(2)
            .with_tag("t")
            .with_alg(Algorithm::Ed25519)
            .with_expires(3)
            .with_keyid("k2");
        assert_eq!(
            params.serialize(),
            r#"("@method");keyid="k2";nonce="n";created=2;tag="t";alg="ed25519";expires=3"#
        );
        assert_eq!(params.keyid(), Some("k2"));
        assert_eq!(params.created(), Some(2));
        assert_eq!(params.expires(), Some(3));
        assert_eq!(params.alg(), Some(Algorithm::Ed25519));
    }

    #[test]
    fn signature_input_round_trips() {
        let params = SignatureParams::new([
            Component::Method,
            Component::QueryParam { name: "Pet".to_owned() },
            Component::field("content-digest"),
        ])
        .with_created(1_618_884_473)
        .with_keyid("test-key-ed25519")
        .with_alg(Algorithm::Ed25519)
        .with_tag("inbox");
        let header = serialize_signature_input("sig1", &params);
        assert_eq!(parse_signature_input(&header).unwrap(), vec![("sig1".to_owned(), params)]);
    }

    #[test]
    fn refuses_what_we_do_not_implement_by_name() {
        let cases: [(&str, SignatureHeaderError); 9] = [
            ("sig=(\"@status\")", SignatureHeaderError::UnsupportedComponent { name: "@status".to_owned() }),
            (
                "sig=(\"@signature-params\")",
                SignatureHeaderError::UnsupportedComponent { name: "@signature-params".to_owned() },
            ),
            (
                "sig=(\"Content-Type\")",
                SignatureHeaderError::UpperCaseComponent { name: "Content-Type".to_owned() },
            ),
            (
                "sig=(\"example-dict\";sf)",
                SignatureHeaderError::UnsupportedComponentParameter {
                    component: "example-dict".to_owned(),
                    parameter: "sf".to_owned(),
                },
            ),
            (
                "sig=(\"@query-param\")",
                SignatureHeaderError::UnsupportedComponentParameter {
                    component: "@query-param".to_owned(),
                    parameter: "(missing name)".to_owned(),
                },
            ),
            (
                "sig=(@method)",
                SignatureHeaderError::Structured(StructuredFieldError::Unexpected {
                    at: 5,
                    found: "'@'".to_owned(),
                    expected: "an item",
                }),
            ),
            ("sig=(method)", SignatureHeaderError::ComponentNotString { label: "sig".to_owned() }),
            (
                "sig=();alg=\"rsa-pss-sha512\"",
                SignatureHeaderError::UnsupportedAlgorithm { alg: "rsa-pss-sha512".to_owned() },
            ),
            (
                "sig=();created=\"yesterday\"",
                SignatureHeaderError::InvalidParameter {
                    parameter: "created",
                    expected: "a non-negative integer of unix seconds",
                },
            ),
        ];
        for (header, expected) in cases {
            assert_eq!(parse_signature_input(header).unwrap_err(), expected, "{header}");
        }
        assert_eq!(
            parse_signature_input("sig=();context=\"x\"").unwrap_err(),
            SignatureHeaderError::UnsupportedParameter { parameter: "context".to_owned() }
        );
        assert_eq!(
            parse_signature_input("sig=\"@method\"").unwrap_err(),
            SignatureHeaderError::NotInnerList { label: "sig".to_owned() }
        );
    }

    #[test]
    fn signature_values_must_be_byte_sequences() {
        assert_eq!(
            parse_signature("sig1=:AQID:, sig2=:BA==:").unwrap(),
            vec![("sig1".to_owned(), vec![1, 2, 3]), ("sig2".to_owned(), vec![4])]
        );
        assert_eq!(
            parse_signature("sig1=\"AQID\"").unwrap_err(),
            SignatureHeaderError::NotByteSequence { label: "sig1".to_owned() }
        );
    }

    #[test]
    fn labels_must_be_keys() {
        assert!(check_label("sig-b26").is_ok());
        assert!(check_label("Sig").is_err());
        assert!(check_label("").is_err());
        assert!(check_label("sig 1").is_err());
    }
}
