//! The bounds every setting must keep, checked once the layers are merged: a configuration
//! that cannot work stops the start with the setting to fix. The bounds themselves are the
//! table's ([`super::sections`]); here is only how they are judged, and the rules that are not
//! numbers.

use std::cmp::Ordering;

use super::forms::Value;
use super::setting::{Bound, Setting, lookup};
use super::{Config, ConfigError, SETTINGS};

impl Config {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        SETTINGS.iter().try_for_each(|setting| setting.check(self)).map_err(ConfigError)
    }
}

impl Setting {
    /// Whether this setting's value in `config` keeps its bounds; if not, a sentence naming the
    /// setting, what it must be and what it is.
    fn check(&self, config: &Config) -> Result<(), String> {
        let value = self.value(config);
        let why = if self.why.is_empty() { String::new() } else { format!(": {}", self.why) };
        let keeps = |bound: &Bound| {
            let (limit, allowed): (_, &[Ordering]) = match bound {
                Bound::AtLeast(limit) => (limit, &[Ordering::Greater, Ordering::Equal]),
                Bound::AtMost(limit) => (limit, &[Ordering::Less, Ordering::Equal]),
                Bound::Above(limit) => (limit, &[Ordering::Greater]),
                Bound::With(_) | Bound::Rule(..) => return true,
            };
            value.compare(&limit.value(config)).is_none_or(|ordering| allowed.contains(&ordering))
        };
        if !self.bounds.iter().all(keeps) {
            return Err(format!(
                "{} must be {}, not {value}{why}",
                self.flat,
                self.bounds_text(Some(config))
            ));
        }
        for bound in self.bounds {
            match bound {
                Bound::With(other) if value.is_set() != lookup(other).value(config).is_set() => {
                    return Err(format!("{} and {other} go together{why}", self.flat));
                }
                Bound::Rule(_, rule) => rule(&value)?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// `cors_origins`: each an origin as browsers send it in `Origin`: scheme, host and optional
/// port, nothing more.
pub(super) fn cors_origins(value: &Value) -> Result<(), String> {
    let Value::List(origins) = value else { return Ok(()) };
    origins.iter().try_for_each(|origin| check_origin(origin))
}

fn check_origin(origin: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "cors_origins: {origin:?} {why}; list exact origins such as https://app.example.com or http://127.0.0.1:5173"
        ))
    };
    if origin == "*" {
        return refuse("is a wildcard, which cannot carry credentials");
    }
    let Some((scheme, authority)) = origin.split_once("://") else { return refuse("has no scheme") };
    if scheme != "http" && scheme != "https" {
        return refuse("is not an http or https origin");
    }
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return refuse("must be scheme://host[:port] with no path, query or trailing slash");
    }
    if authority.chars().any(|c| c.is_ascii_uppercase()) {
        return refuse("must be lower-case, as browsers send it");
    }
    Ok(())
}

/// `trusted_proxies`: CIDRs or addresses, as the proxy rules read them.
pub(super) fn trusted_proxies(value: &Value) -> Result<(), String> {
    let Value::List(entries) = value else { return Ok(()) };
    crate::proxies::TrustedProxies::parse(entries).map(|_| ())
}

/// `token_algorithm`: one the store can make keys of.
pub(super) fn token_algorithm(value: &Value) -> Result<(), String> {
    use inbox_store::TokenAlgorithm;
    let Value::Text(name) = value else { return Ok(()) };
    if TokenAlgorithm::parse(name).is_some() {
        return Ok(());
    }
    let known = [TokenAlgorithm::Hs256, TokenAlgorithm::EdDsa].map(TokenAlgorithm::as_str);
    Err(format!("token_algorithm is {name:?}; use {}", known.join(" or ")))
}
