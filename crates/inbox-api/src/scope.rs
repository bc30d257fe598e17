//! The scopes a token can carry, as one enum: the server checks them, the CLI issues them and
//! the MCP server offers tools by them, all through these names, so a misspelled scope is a
//! compile error rather than a check that never passes.
//!
//! On the wire a token's `scope` claim stays a space-separated list of these strings (OAuth
//! style). `tenant.read:{tenant_id}` is the one parameterized scope: it is accepted when issuing
//! by its prefix, [`Scope::TENANT_READ_PREFIX`], and checked nowhere yet.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! scopes {
    ($($(#[$doc:meta])* $variant:ident => $wire:literal,)+) => {
        /// A scope the service checks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Scope {
            $($(#[$doc])* $variant,)+
        }

        impl Scope {
            /// Every scope, in the order the service lists them.
            pub const ALL: &'static [Scope] = &[$(Scope::$variant,)+];

            /// The scope as it is written in a token.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Scope::$variant => $wire,)+
                }
            }
        }

        impl FromStr for Scope {
            type Err = UnknownScope;

            fn from_str(text: &str) -> Result<Scope, UnknownScope> {
                match text {
                    $($wire => Ok(Scope::$variant),)+
                    _ => Err(UnknownScope(text.to_owned())),
                }
            }
        }
    };
}

scopes! {
    /// Read the inbox: poll after cursor, head, resync, sessions, rooms an agent is in.
    InboxPoll => "inbox.poll",
    InboxClaim => "inbox.claim",
    InboxAck => "inbox.ack",
    InboxRelease => "inbox.release",
    InboxHeartbeat => "inbox.heartbeat",
    /// Real-time signals: SSE, WebSocket, stream tickets.
    StreamSubscribe => "stream.subscribe",
    CallbackRegister => "callback.register",
    CallbackRotate => "callback.rotate",
    EventsPublish => "events.publish",
    /// Publish only as part of an acknowledgement (a hand-off's follow-ups): to agents of the
    /// token's tenant, only while the acknowledging lease holds. Agents get it by default.
    EventsHandoff => "events.handoff",
    /// Talk to agents' A2A faces (`/a2a/{tenant}/{agent}`): send them messages, read, follow
    /// and cancel the tasks the token's subject started.
    A2aSend => "a2a.send",
    RoomsWrite => "rooms.write",
    /// Operators' endpoints.
    Admin => "admin",
}

impl Scope {
    /// The prefix of the per-tenant read scope, `tenant.read:{tenant_id}`.
    pub const TENANT_READ_PREFIX: &'static str = "tenant.read:";

    /// The `scope` claim of an agent token issued without named scopes.
    pub const AGENT_DEFAULT: &'static str =
        "inbox.poll inbox.claim inbox.ack inbox.release inbox.heartbeat stream.subscribe events.handoff";

    /// The `scope` claim of a publisher token issued without named scopes.
    pub const PUBLISHER_DEFAULT: &'static str = "events.publish rooms.write";

    /// The `scope` claim of an admin token issued without named scopes.
    pub const ADMIN_DEFAULT: &'static str = "admin";

    /// Every scope, space-separated, for messages that list the known ones.
    pub fn all_joined() -> String {
        Scope::ALL.iter().map(|scope| scope.as_str()).collect::<Vec<_>>().join(" ")
    }
}

/// A scope name the service does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScope(pub String);

impl fmt::Display for UnknownScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown scope {:?}", self.0)
    }
}

impl std::error::Error for UnknownScope {}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scope, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_round_trips_through_its_wire_string() {
        for &scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
            let json = serde_json::to_string(&scope).unwrap();
            assert_eq!(json, format!("\"{}\"", scope.as_str()));
            assert_eq!(serde_json::from_str::<Scope>(&json).unwrap(), scope);
        }
        assert!("inbox.pol".parse::<Scope>().is_err());
    }

    #[test]
    fn the_default_claims_name_only_known_scopes() {
        for claim in [Scope::AGENT_DEFAULT, Scope::PUBLISHER_DEFAULT, Scope::ADMIN_DEFAULT] {
            for scope in claim.split(' ') {
                assert!(scope.parse::<Scope>().is_ok(), "{scope} in {claim:?}");
            }
        }
    }
}
