//! The problem codes the OpenAPI document names in its error responses are codes of
//! [`ProblemCode`]: a code documented but unknown to the enum (or renamed in one place only)
//! fails here.

use std::path::PathBuf;

use inbox_api::ProblemCode;

/// The leading code list of a response description: `"rate_limited or auth_throttled: ..."`,
/// `"invalid_field, malformed_json, unknown_field, ...: ..."`. Descriptions in words (`"no such
/// resource"`) name no code.
fn documented_codes(description: &str) -> Vec<&str> {
    let head = description.split([':', '(']).next().unwrap_or_default();
    let words: Vec<&str> = head
        .split([',', ' '])
        .map(str::trim)
        .filter(|word| !word.is_empty() && *word != "or" && *word != "...")
        .collect();
    let is_code = |word: &&str| word.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    if words.is_empty()
        || !words.iter().all(is_code)
        || !words.iter().any(|w| w.contains('_') || *w == "unauthorized")
    {
        return Vec::new();
    }
    words
}

#[test]
fn every_code_the_openapi_document_names_is_a_problem_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../openapi.json");
    let document: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut named = 0;
    for operations in document["paths"].as_object().unwrap().values() {
        for operation in operations.as_object().unwrap().values() {
            for (status, response) in operation["responses"].as_object().into_iter().flatten() {
                if status.as_str() < "400" {
                    continue;
                }
                let description = response["description"].as_str().unwrap_or_default();
                for code in documented_codes(description) {
                    assert!(
                        ProblemCode::parse(code).is_known(),
                        "{status} {description:?} names {code}, which is not a ProblemCode"
                    );
                    named += 1;
                }
            }
        }
    }
    assert!(named > 20, "the document names problem codes in its error responses ({named} found)");
}

#[test]
fn the_code_list_reader_takes_lists_and_skips_prose() {
    assert_eq!(
        documented_codes("rate_limited or auth_throttled: slow down"),
        ["rate_limited", "auth_throttled"]
    );
    assert_eq!(
        documented_codes("invalid_field, malformed_json, unknown_field, ...: the input is refused"),
        ["invalid_field", "malformed_json", "unknown_field"]
    );
    assert_eq!(documented_codes("unauthorized, invalid_ticket or invalid_stream_cookie").len(), 3);
    assert!(documented_codes("no such resource (an id in the path or the body)").is_empty());
    assert!(documented_codes("retired").is_empty());
}
