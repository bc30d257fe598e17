//! Who a request speaks for, and the one place that decides what such a caller may do.
//!
//! Every use case starts by one of [`Caller`]'s `require…` methods (or [`Caller::operator_or`]),
//! before it converts or judges any field of the request, so a request that is both
//! unauthorized and malformed is answered 403 (a test in `ops/mod.rs` reads every use case for
//! it). No other module compares a token's kind or looks for the `admin` scope: the test below
//! reads the crate for it.

use std::collections::BTreeSet;

use inbox_api::{ProblemCode, Scope};
use inbox_core::{Recipient, RecipientId, RecipientKey, TenantId};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// What kind of party a token speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallerKind {
    Agent,
    Publisher,
    Admin,
}

impl CallerKind {
    /// The `scope` claim of a token of this kind issued without named scopes.
    pub fn default_scope(self) -> &'static str {
        match self {
            CallerKind::Agent => Scope::AGENT_DEFAULT,
            CallerKind::Publisher => Scope::PUBLISHER_DEFAULT,
            CallerKind::Admin => Scope::ADMIN_DEFAULT,
        }
    }

    pub fn parse(text: &str) -> Option<CallerKind> {
        match text {
            "agent" => Some(CallerKind::Agent),
            "publisher" => Some(CallerKind::Publisher),
            "admin" => Some(CallerKind::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CallerKind::Agent => "agent",
            CallerKind::Publisher => "publisher",
            CallerKind::Admin => "admin",
        }
    }

    /// The token as a refusal names it.
    fn token(self) -> &'static str {
        match self {
            CallerKind::Agent => "an agent token",
            CallerKind::Publisher => "a publisher token",
            CallerKind::Admin => "an admin token",
        }
    }
}

/// The authenticated party behind a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant_id: TenantId,
    /// The token's subject: for agents, the agent id whose inbox this is.
    pub subject: RecipientId,
    pub kind: CallerKind,
    pub scopes: BTreeSet<String>,
}

/// How far a call reaches within the caller's tenant: [`Caller::operator_or`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Every agent's records: an operator's.
    Tenant,
    /// The caller's own (its subject's) only.
    Own,
}

impl Caller {
    /// Whether the token carries `scope`: for what a use case offers (a stream transport to a
    /// token that may open one). Whether it may call at all is decided by `require…`.
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(scope.as_str())
    }

    /// Whether the token is an agent's (the default a call without a named agent falls to).
    pub fn is_agent(&self) -> bool {
        self.kind == CallerKind::Agent
    }

    /// Refuses the request unless the token carries `scope`.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        self.require_any(&[scope])
    }

    /// Refuses the request unless the token carries one of `scopes`; the refusal names the
    /// first, the one to ask for.
    pub fn require_any(&self, scopes: &[Scope]) -> Result<(), ApiError> {
        let (first, others) = scopes.split_first().expect("a call needs at least one scope");
        if scopes.iter().any(|scope| self.has(*scope)) {
            return Ok(());
        }
        let or: String = others.iter().map(|scope| format!(" (or {scope})")).collect();
        Err(ApiError::forbidden(
            ProblemCode::ScopeMissing,
            format!("this call needs the {first} scope{or}; ask for a token that has it"),
        )
        .with("scope", first.as_str()))
    }

    /// The one operator rule: an admin token (kind admin) that carries the `admin` scope. A
    /// token without the scope is `scope_missing`; one of another kind with it,
    /// `kind_not_allowed`.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.is_operator() {
            return Ok(());
        }
        let this = match self.kind {
            CallerKind::Admin => "an admin token without the admin scope",
            kind => kind.token(),
        };
        let detail = format!(
            "an operator's call needs an admin token (kind admin with the admin scope), and this is {this}; \
             make one with: agent-inbox token issue --kind admin --tenant {} --subject <you>",
            self.tenant_id
        );
        Err(if self.has(Scope::Admin) {
            ApiError::forbidden(ProblemCode::KindNotAllowed, detail)
        } else {
            ApiError::forbidden(ProblemCode::ScopeMissing, detail).with("scope", Scope::Admin.as_str())
        })
    }

    /// Refuses any token but an agent's (kind agent).
    pub fn require_agent(&self) -> Result<(), ApiError> {
        if self.is_agent() {
            return Ok(());
        }
        Err(ApiError::forbidden(
            ProblemCode::KindNotAllowed,
            format!("this call is an agent's own, and this is {}; use an agent token", self.kind.token()),
        ))
    }

    /// An operator reaches every record of the tenant; anyone else only its own, once `own`
    /// admits it (`Caller::require_agent`, or a closure requiring a scope), and is refused as
    /// `own` refuses.
    pub fn operator_or(&self, own: impl FnOnce(&Caller) -> Result<(), ApiError>) -> Result<Reach, ApiError> {
        if self.is_operator() {
            return Ok(Reach::Tenant);
        }
        own(self).map(|()| Reach::Own)
    }

    fn is_operator(&self) -> bool {
        self.kind == CallerKind::Admin && self.has(Scope::Admin)
    }

    /// Refuses a request whose body or path names a tenant other than the token's.
    pub fn check_tenant(&self, named: Option<&TenantId>) -> Result<(), ApiError> {
        match named {
            Some(named) if *named != self.tenant_id => Err(ApiError::forbidden(
                ProblemCode::TenantMismatch,
                format!(
                    "the request names tenant {:?} but your token is for tenant {:?}",
                    named.as_str(),
                    self.tenant_id.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a request that names an agent other than the token's subject: an agent can only
    /// touch its own inbox.
    pub fn check_agent(&self, named: Option<&str>) -> Result<(), ApiError> {
        match named {
            Some(named) if named != self.subject.as_str() => Err(ApiError::forbidden(
                ProblemCode::TenantMismatch,
                format!(
                    "the request names agent {named:?} but your token is for agent {:?}",
                    self.subject.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The caller's own inbox.
    pub fn inbox(&self) -> RecipientKey {
        RecipientKey { tenant_id: self.tenant_id.clone(), recipient: Recipient::agent(self.subject.clone()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(kind: CallerKind, scopes: &str) -> Caller {
        Caller {
            tenant_id: TenantId::new("t1").unwrap(),
            subject: RecipientId::new("someone").unwrap(),
            kind,
            scopes: scopes.split_whitespace().map(str::to_owned).collect(),
        }
    }

    fn refusal(result: Result<impl std::fmt::Debug, ApiError>) -> (ProblemCode, Option<String>) {
        let err = result.unwrap_err();
        (err.code, err.extensions.get("scope").and_then(|s| s.as_str()).map(str::to_owned))
    }

    #[test]
    fn an_operator_is_an_admin_token_with_the_admin_scope() {
        assert!(caller(CallerKind::Admin, "admin").require_operator().is_ok());
        let scope_missing = (ProblemCode::ScopeMissing, Some("admin".to_owned()));
        assert_eq!(refusal(caller(CallerKind::Admin, "inbox.poll").require_operator()), scope_missing);
        assert_eq!(
            refusal(caller(CallerKind::Agent, Scope::AGENT_DEFAULT).require_operator()),
            scope_missing
        );
        assert_eq!(refusal(caller(CallerKind::Publisher, "").require_operator()), scope_missing);
        assert_eq!(
            refusal(caller(CallerKind::Agent, "admin").require_operator()),
            (ProblemCode::KindNotAllowed, None),
            "the scope on another kind of token is not an operator's"
        );
    }

    #[test]
    fn an_operator_reaches_the_tenant_and_others_their_own() {
        let scoped = |c: &Caller| c.require(Scope::CallbackRegister);
        assert_eq!(caller(CallerKind::Admin, "admin").operator_or(scoped).unwrap(), Reach::Tenant);
        assert_eq!(caller(CallerKind::Agent, "callback.register").operator_or(scoped).unwrap(), Reach::Own);
        assert_eq!(
            refusal(caller(CallerKind::Agent, "admin").operator_or(scoped)),
            (ProblemCode::ScopeMissing, Some("callback.register".to_owned()))
        );
        assert_eq!(caller(CallerKind::Agent, "").operator_or(Caller::require_agent).unwrap(), Reach::Own);
        assert_eq!(
            refusal(caller(CallerKind::Publisher, "admin").operator_or(Caller::require_agent)),
            (ProblemCode::KindNotAllowed, None)
        );
    }

    #[test]
    fn any_of_several_scopes_names_the_first() {
        let handoff = [Scope::EventsHandoff, Scope::EventsPublish];
        assert!(caller(CallerKind::Agent, "events.publish").require_any(&handoff).is_ok());
        assert_eq!(
            refusal(caller(CallerKind::Agent, "inbox.ack").require_any(&handoff)),
            (ProblemCode::ScopeMissing, Some("events.handoff".to_owned()))
        );
    }

    /// What a caller may do is decided in this file only: nowhere else in the crate is a
    /// token's kind compared, the `admin` scope looked for, or a scope or kind refusal made.
    #[test]
    fn no_other_module_judges_kinds_or_the_admin_scope() {
        let forbidden = [
            "caller.kind ==",
            "caller.kind !=",
            "caller.kind {",
            "kind == CallerKind",
            "kind != CallerKind",
            "matches!(caller.kind",
            "CallerKind::Admin",
            "Scope::Admin",
            "ProblemCode::ScopeMissing",
            "ProblemCode::KindNotAllowed",
        ];
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let here = root.join("caller.rs");
        let mut files = vec![root.clone()];
        let mut read = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files
                    .extend(std::fs::read_dir(&path).expect("a source directory").map(|e| e.unwrap().path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path == here {
                continue;
            }
            read += 1;
            let text = std::fs::read_to_string(&path).expect("a source file");
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim_start().starts_with("//")) {
                if let Some(word) = forbidden.iter().find(|w| line.contains(*w)) {
                    panic!(
                        "{}:{}: `{word}` decides who may call; use a Caller method (caller.rs)",
                        path.display(),
                        n + 1
                    );
                }
            }
        }
        assert!(read > 50, "read only {read} source files under {}", root.display());
    }
}
