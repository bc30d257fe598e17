//! What a signature can cover (RFC 9421 §2): the derived components of a request and its
//! header fields, and the request as this crate sees it, with each component's value.
//!
//! Component values go into the signed base byte for byte, so every rule here is a rule both
//! sides must apply identically: lower-case component names, trimmed field values joined
//! with `", "`, the normalized `@authority`. The base itself is assembled in `base.rs`, which
//! needs the parameters too; this module does not know them.

use crate::structured::{self, BareItem, Item};

/// A covered component: a derived component (`@...`) or a header field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Component {
    /// `@method`: the method, case preserved (`POST`).
    Method,
    /// `@target-uri`: the full absolute URI of the request.
    TargetUri,
    /// `@authority`: host and non-default port, host lower-cased.
    Authority,
    /// `@scheme`: `https` or `http`.
    Scheme,
    /// `@request-target`: path and query as sent on an HTTP/1.1 request line.
    RequestTarget,
    /// `@path`: the absolute path, `/` when empty.
    Path,
    /// `@query`: the query with its leading `?`, or `?` alone when there is none.
    Query,
    /// `@query-param;name="..."`: one query parameter's value, re-encoded (RFC 9421 §2.2.8).
    QueryParam { name: String },
    /// A header field, by lower-case name.
    Field(String),
}

impl Component {
    /// A header field component; the name is lower-cased as RFC 9421 §2.1 requires.
    pub fn field(name: &str) -> Self {
        Component::Field(name.to_ascii_lowercase())
    }

    /// The name as written in the component identifier (`@method`, `content-digest`).
    pub fn name(&self) -> &str {
        match self {
            Component::Method => "@method",
            Component::TargetUri => "@target-uri",
            Component::Authority => "@authority",
            Component::Scheme => "@scheme",
            Component::RequestTarget => "@request-target",
            Component::Path => "@path",
            Component::Query => "@query",
            Component::QueryParam { .. } => "@query-param",
            Component::Field(name) => name,
        }
    }

    pub(crate) fn to_item(&self) -> Item {
        let parameters = match self {
            Component::QueryParam { name } => {
                vec![("name".to_owned(), BareItem::String(name.clone()))]
            }
            _ => Vec::new(),
        };
        Item { bare_item: BareItem::String(self.name().to_owned()), parameters }
    }

    /// The component identifier as it starts a signature base line (`"@query-param";name="a"`).
    pub fn identifier(&self) -> String {
        let item = self.to_item();
        let inner_list = structured::InnerList { items: vec![item], parameters: Vec::new() };
        let text = structured::serialize_inner_list(&inner_list);
        text[1..text.len() - 1].to_owned()
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Component::QueryParam { name } => write!(formatter, "@query-param;name={name:?}"),
            _ => formatter.write_str(self.name()),
        }
    }
}

/// The parts of a request a signature can cover, owned so the caller can build them from
/// any HTTP library. Header names are matched case-insensitively; a name given several
/// times is one field with several lines, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestParts {
    pub method: String,
    /// `https` or `http`.
    pub scheme: String,
    /// Host and optional port, as in the `Host` header or the URI's authority.
    pub authority: String,
    /// The absolute path, without the query.
    pub path: String,
    /// The query without its leading `?`; `None` when the target has no `?`.
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
}

impl RequestParts {
    /// A request from its method, scheme, authority and origin-form target (`/a/b?c=d`).
    pub fn new(method: &str, scheme: &str, authority: &str, path_and_query: &str) -> Self {
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query.to_owned())),
            None => (path_and_query, None),
        };
        RequestParts {
            method: method.to_owned(),
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            path: path.to_owned(),
            query,
            headers: Vec::new(),
        }
    }

    /// Adds one header field line.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Replaces every line of a header field with one line.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
    }

    /// A field's value as RFC 9421 §2.1 covers it: each line trimmed of surrounding spaces
    /// and tabs, lines joined with `", "`. `None` when the field is absent.
    pub fn field_value(&self, name: &str) -> Option<String> {
        let lines: Vec<&str> = self
            .headers
            .iter()
            .filter(|(existing, _)| existing.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim_matches([' ', '\t']))
            .collect();
        if lines.is_empty() { None } else { Some(lines.join(", ")) }
    }

    /// `@authority`: lower-cased, with the scheme's default port removed (RFC 9421 §2.2.3,
    /// RFC 9110 §4.2.3), so `Example.COM:443` and `example.com` sign alike.
    pub fn normalized_authority(&self) -> String {
        let authority = self.authority.to_ascii_lowercase();
        let default_port = match self.scheme.to_ascii_lowercase().as_str() {
            "https" => Some(":443"),
            "http" => Some(":80"),
            _ => None,
        };
        match default_port.and_then(|port| authority.strip_suffix(port)) {
            Some(host) => host.to_owned(),
            None => authority,
        }
    }

    /// The value a component takes in this request.
    pub fn component_value(&self, component: &Component) -> Result<String, SignatureBaseError> {
        let path = if self.path.is_empty() { "/" } else { self.path.as_str() };
        let query_suffix = self.query.as_deref().map(|query| format!("?{query}")).unwrap_or_default();
        let value = match component {
            Component::Method => self.method.clone(),
            Component::TargetUri => format!(
                "{}://{}{path}{query_suffix}",
                self.scheme.to_ascii_lowercase(),
                self.normalized_authority()
            ),
            Component::Authority => self.normalized_authority(),
            Component::Scheme => self.scheme.to_ascii_lowercase(),
            Component::RequestTarget => format!("{path}{query_suffix}"),
            Component::Path => path.to_owned(),
            Component::Query => format!("?{}", self.query.as_deref().unwrap_or("")),
            Component::QueryParam { name } => self.query_param_value(name)?,
            Component::Field(name) => self
                .field_value(name)
                .ok_or_else(|| SignatureBaseError::MissingComponent { component: component.to_string() })?,
        };
        if value.bytes().any(|byte| byte == b'\r' || byte == b'\n') {
            return Err(SignatureBaseError::InvalidComponentValue { component: component.to_string() });
        }
        Ok(value)
    }

    /// RFC 9421 §2.2.8: parse the query as `application/x-www-form-urlencoded`, find the
    /// one parameter whose re-encoded name is `name`, and re-encode its value. A name that
    /// appears twice is refused: which of the two was meant is exactly what an attacker
    /// would like to choose.
    fn query_param_value(&self, name: &str) -> Result<String, SignatureBaseError> {
        let mut found = None;
        for pair in self.query.as_deref().unwrap_or("").split('&') {
            if pair.is_empty() {
                continue;
            }
            let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            if percent_encode(&form_decode(raw_name)) != name {
                continue;
            }
            if found.is_some() {
                return Err(SignatureBaseError::AmbiguousQueryParameter { name: name.to_owned() });
            }
            found = Some(percent_encode(&form_decode(raw_value)));
        }
        found.ok_or_else(|| SignatureBaseError::MissingComponent {
            component: Component::QueryParam { name: name.to_owned() }.to_string(),
        })
    }
}

/// Why a signature base could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureBaseError {
    #[error("the request has no {component}, which the signature covers")]
    MissingComponent { component: String },
    #[error("{component} is covered twice; list each component once")]
    DuplicateComponent { component: String },
    #[error("the value of {component} contains a line break")]
    InvalidComponentValue { component: String },
    #[error("query parameter {name:?} appears more than once; cover @query instead")]
    AmbiguousQueryParameter { name: String },
    #[error("signature parameter {parameter} must be printable ASCII")]
    InvalidParameterValue { parameter: &'static str },
}

/// WHATWG `application/x-www-form-urlencoded` decoding of one name or value: `+` is a
/// space, `%XX` is a byte, and a `%` not followed by two hex digits is kept as it is.
fn form_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => decoded.push(b' '),
            b'%' if index + 2 < bytes.len()
                && bytes[index + 1].is_ascii_hexdigit()
                && bytes[index + 2].is_ascii_hexdigit() =>
            {
                let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).unwrap_or("00");
                decoded.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                index += 2;
            }
            byte => decoded.push(byte),
        }
        index += 1;
    }
    decoded
}

/// Percent-encodes every byte outside `A-Z a-z 0-9 * - . _` (the WHATWG
/// application/x-www-form-urlencoded percent-encode set), a space as `%20`.
fn percent_encode(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut encoded = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'*' | b'-' | b'.' | b'_') {
            encoded.push(byte as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RequestParts {
        RequestParts::new("POST", "https", "www.example.com", "/path?param=value&foo=bar&baz=batman")
    }

    /// RFC 9421 §2.2.1 to §2.2.7 examples, for the request
    /// `POST /path?param=value HTTP/1.1` with `Host: www.example.com` over https.
    #[test]
    fn derived_components_take_the_rfc_9421_values() {
        let request = RequestParts::new("POST", "https", "www.example.com", "/path?param=value");
        let value = |component| request.component_value(&component).unwrap();
        assert_eq!(value(Component::Method), "POST");
        assert_eq!(value(Component::TargetUri), "https://www.example.com/path?param=value");
        assert_eq!(value(Component::Authority), "www.example.com");
        assert_eq!(value(Component::Scheme), "https");
        assert_eq!(value(Component::RequestTarget), "/path?param=value");
        assert_eq!(value(Component::Path), "/path");
        assert_eq!(value(Component::Query), "?param=value");
    }

    #[test]
    fn query_is_a_lone_question_mark_when_absent_and_path_is_slash_when_empty() {
        let request = RequestParts::new("GET", "https", "example.com", "");
        assert_eq!(request.component_value(&Component::Query).unwrap(), "?");
        assert_eq!(request.component_value(&Component::Path).unwrap(), "/");
        // RFC 9421 §2.2.7: `?queryString` keeps its case; an empty query is `?`.
        let request = RequestParts::new("GET", "https", "example.com", "/a?");
        assert_eq!(request.component_value(&Component::Query).unwrap(), "?");
    }

    #[test]
    fn authority_is_lower_cased_without_the_default_port() {
        let request = RequestParts::new("GET", "https", "Example.COM:443", "/");
        assert_eq!(request.normalized_authority(), "example.com");
        let request = RequestParts::new("GET", "https", "example.com:8443", "/");
        assert_eq!(request.normalized_authority(), "example.com:8443");
        let request = RequestParts::new("GET", "http", "example.com:80", "/");
        assert_eq!(request.normalized_authority(), "example.com");
    }

    /// RFC 9421 §2.2.8's example: `?param=value&foo=bar&baz=batman&qux=`,
    /// and §2.2.8's encoding example `?var=this%20is%20a%20big%0Avalue&bar=with+plus+whitespace&fa%C3%A7ade%22%3A%20=something`.
    #[test]
    fn query_param_values_are_decoded_and_re_encoded() {
        let request =
            RequestParts::new("GET", "https", "example.com", "/path?param=value&foo=bar&baz=batman&qux=");
        let value = |name: &str| request.component_value(&Component::QueryParam { name: name.to_owned() });
        assert_eq!(value("baz").unwrap(), "batman");
        assert_eq!(value("qux").unwrap(), "");
        assert_eq!(value("param").unwrap(), "value");
        assert!(matches!(value("missing"), Err(SignatureBaseError::MissingComponent { .. })));

        let request = RequestParts::new(
            "GET",
            "https",
            "example.com",
            "/parameters?var=this%20is%20a%20big%0Avalue&bar=with+plus+whitespace&fa%C3%A7ade%22%3A%20=something",
        );
        let value =
            |name: &str| request.component_value(&Component::QueryParam { name: name.to_owned() }).unwrap();
        assert_eq!(value("var"), "this%20is%20a%20big%0Avalue");
        assert_eq!(value("bar"), "with%20plus%20whitespace");
        assert_eq!(value("fa%C3%A7ade%22%3A%20"), "something");
    }

    #[test]
    fn a_repeated_query_param_is_refused() {
        let request = RequestParts::new("GET", "https", "example.com", "/?a=1&a=2");
        assert_eq!(
            request.component_value(&Component::QueryParam { name: "a".to_owned() }),
            Err(SignatureBaseError::AmbiguousQueryParameter { name: "a".to_owned() })
        );
    }

    #[test]
    fn field_lines_are_trimmed_and_joined() {
        let request = request()
            .with_header("X-Example", "  one\t")
            .with_header("Other", "x")
            .with_header("x-example", "two ");
        assert_eq!(request.component_value(&Component::field("X-Example")).unwrap(), "one, two");
        assert_eq!(
            request.component_value(&Component::field("absent")),
            Err(SignatureBaseError::MissingComponent { component: "absent".to_owned() })
        );
    }

    #[test]
    fn a_line_break_inside_a_value_is_refused() {
        let request = request().with_header("x-evil", "a\r\n\"@method\": GET");
        assert!(matches!(
            request.component_value(&Component::field("x-evil")),
            Err(SignatureBaseError::InvalidComponentValue { .. })
        ));
    }

    #[test]
    fn identifiers_are_quoted_with_their_parameters() {
        assert_eq!(Component::Method.identifier(), "\"@method\"");
        assert_eq!(
            Component::QueryParam { name: "Pet".to_owned() }.identifier(),
            "\"@query-param\";name=\"Pet\""
        );
        assert_eq!(Component::field("Content-Type").identifier(), "\"content-type\"");
    }

    #[test]
    fn set_header_replaces_every_line() {
        let mut request = request().with_header("A", "1").with_header("a", "2");
        request.set_header("a", "3");
        assert_eq!(request.field_value("A").as_deref(), Some("3"));
    }
}
