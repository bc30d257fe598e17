//! The `signatures` subsystem: agents' public keys, the nonces of signed requests (each
//! accepted once, on any node) and each tenant's policy (whether signatures are required,
//! whether an agent may have only one active session).
//!
//! Every operation is a method of [`Signatures`], the handle [`SqlStore::signatures`] lends out.

mod agent_keys;
mod nonces;
mod queries;
mod tenant_policy;

pub use agent_keys::{AGENT_KEYS_LIST_MAX, AGENT_KEYS_PER_AGENT_MAX, AgentKey, KeyId, NewAgentKey};
pub use nonces::{NONCES_DELETE_MAX, NonceUse, SignatureNonce};
pub(crate) use tenant_policy::lock_tenant;
pub use tenant_policy::{TenantPolicy, TenantPolicyChange};

use crate::SqlStore;

/// The signatures subsystem of one [`SqlStore`]: agent keys, nonces and tenant policy.
#[derive(Debug, Clone, Copy)]
pub struct Signatures<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// Agent keys, signature nonces and tenant policy, see [`Signatures`].
    pub fn signatures(&self) -> Signatures<'_> {
        Signatures { store: self }
    }
}
