//! The trust layer's share of the application state: this node's cache of agent keys (for
//! verifying signed requests) and the callback sender with its SSRF policy. Their periodic
//! work runs in `background.rs`.

use crate::config::Config;
use crate::ops::callbacks::{ResolverOverride, Webhooks};
use crate::ops::signatures::SignatureCaches;

#[derive(Debug)]
pub struct Trust {
    pub caches: SignatureCaches,
    pub webhooks: Webhooks,
}

impl Trust {
    pub fn new(config: &Config, resolver: &ResolverOverride) -> Self {
        Trust { caches: SignatureCaches::default(), webhooks: Webhooks::new(config, resolver) }
    }
}
