//! Which tools to offer, read from the access token's claims. The claims are not verified here:
//! they only decide what a language model is shown; the service checks every scope on every call.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use inbox_api::Scope;

/// The tools a token may use, by the scope each one needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    pub poll: bool,
    pub claim: bool,
    pub ack: bool,
    pub release: bool,
    pub heartbeat: bool,
    pub publish: bool,
}

impl Offer {
    /// What to offer when the token's claims cannot be read (an opaque token): the inbox
    /// tools, since this is an agent's command, and no publishing.
    pub const AGENT: Offer =
        Offer { poll: true, claim: true, ack: true, release: true, heartbeat: true, publish: false };

    pub fn from_scopes(scopes: &BTreeSet<String>) -> Offer {
        let has = |scope: Scope| scopes.contains(scope.as_str());
        Offer {
            poll: has(Scope::InboxPoll),
            claim: has(Scope::InboxClaim),
            ack: has(Scope::InboxAck),
            release: has(Scope::InboxRelease),
            heartbeat: has(Scope::InboxHeartbeat),
            publish: has(Scope::EventsPublish),
        }
    }
}

/// The `scope` claim of a JWT (space-separated), or `None` when the token is not a readable JWT.
pub fn token_scopes(token: &str) -> Option<BTreeSet<String>> {
    let claims = claims(token)?;
    let scope = claims.get("scope")?.as_str()?;
    Some(scope.split_whitespace().map(str::to_owned).collect())
}

/// The tenant (`tid`) and agent (`sub`) a JWT names, or `None` when it is not a readable JWT.
pub fn token_identity(token: &str) -> Option<(String, String)> {
    let claims = claims(token)?;
    Some((claims.get("tid")?.as_str()?.to_owned(), claims.get("sub")?.as_str()?.to_owned()))
}

fn claims(token: &str) -> Option<serde_json::Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        format!("e30.{}.c2ln", URL_SAFE_NO_PAD.encode(claims))
    }

    #[test]
    fn an_agent_token_gets_the_inbox_tools_and_a_publisher_token_publishing() {
        let agent = token_scopes(&jwt(
            r#"{"sub":"a","scope":"inbox.poll inbox.claim inbox.ack inbox.release inbox.heartbeat stream.subscribe"}"#,
        ))
        .unwrap();
        assert_eq!(Offer::from_scopes(&agent), Offer::AGENT);
        let publisher = token_scopes(&jwt(r#"{"scope":"events.publish rooms.write"}"#)).unwrap();
        let offer = Offer::from_scopes(&publisher);
        assert!(offer.publish && !offer.poll && !offer.claim);
    }

    #[test]
    fn tokens_that_are_not_jwts_have_no_readable_scopes() {
        assert_eq!(token_scopes("opaque"), None);
        assert_eq!(token_scopes("a.!!!.c"), None);
        assert_eq!(token_scopes(&jwt(r#"{"sub":"a"}"#)), None);
    }
}
