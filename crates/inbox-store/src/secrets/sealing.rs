//! Sealing one secret: XChaCha20-Poly1305 under a key of the key file, with the row the value
//! belongs to as associated data, so a sealed value copied into another row (or another
//! column's row) does not open. A stored value is the 24-byte random nonce, then the
//! ciphertext and its tag; the sealing key's id is stored in a column beside it.
//!
//! Opened values are kept in memory, wiped when dropped, keyed by the stored bytes: a row read
//! again (token keys every second, a callback registration per delivery, an agent key when its
//! cache entry ages) costs a lookup, never a decryption.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use super::keys::SecretsKeys;
use crate::StoreError;

/// A secret's bytes in memory: wiped when dropped, never shown by `Debug` of the records
/// holding them.
pub type SecretBytes = Zeroizing<Vec<u8>>;

const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;
/// Opened values kept per node; past it the memory starts over (each reopens once).
const OPENED_ENTRIES_MAX: usize = 10_000;

/// Where a sealed value lives: its table and the values that name its row, bound to the
/// ciphertext as associated data. The constructors are the one definition of each place,
/// used by the subsystems when they read and write and by the sealing passes alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    aad: Vec<u8>,
}

impl Place {
    fn new(table: &str, parts: &[&str]) -> Place {
        let mut aad = b"agent-inbox sealed v1".to_vec();
        for part in std::iter::once(table).chain(parts.iter().copied()) {
            aad.extend_from_slice(&(part.len() as u32).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        Place { aad }
    }

    /// An access-token signing key (purpose, key id, algorithm).
    pub(crate) fn signing_key(purpose: &str, key_id: &str, algorithm: &str) -> Place {
        Place::new("signing_key", &[purpose, key_id, algorithm])
    }

    /// A callback registration's current or previous secret, named by the secret's own id, so
    /// a rotation can move the current secret into the previous one's columns.
    pub(crate) fn callback_secret(tenant_id: &str, registration_id: &str, secret_id: &str) -> Place {
        Place::new("callback_registration", &[tenant_id, registration_id, secret_id])
    }

    /// An agent's hmac-sha256 request-signing key.
    pub(crate) fn agent_key(tenant_id: &str, key_id: &str, agent_id: &str, algorithm: &str) -> Place {
        Place::new("agent_signing_key", &[tenant_id, key_id, agent_id, algorithm])
    }

    /// An A2A push-notification config's token and credentials.
    pub(crate) fn a2a_push_secret(tenant_id: &str, task_id: &str, config_id: &str) -> Place {
        Place::new("a2a_push_config", &[tenant_id, task_id, config_id])
    }
}

/// The keys a store seals and opens with, and the values it has opened.
#[derive(Default)]
pub(crate) struct Sealer {
    keys: RwLock<Option<Arc<SecretsKeys>>>,
    opened: Mutex<HashMap<Vec<u8>, Opened>>,
    /// Values decrypted since the store connected (not those found in `opened`).
    decryptions: std::sync::atomic::AtomicU64,
}

struct Opened {
    key_id: String,
    aad: Vec<u8>,
    plaintext: SecretBytes,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = self.keys.read().expect("sealer keys");
        f.debug_struct("Sealer").field("keys", &keys.as_ref().map(|k| k.ids())).finish_non_exhaustive()
    }
}

impl Sealer {
    /// Replaces the keys; what was opened under the old ones is forgotten (and wiped).
    pub(crate) fn set_keys(&self, keys: SecretsKeys) {
        *self.keys.write().expect("sealer keys") = Some(Arc::new(keys));
        self.opened.lock().expect("opened secrets").clear();
    }

    /// How many values were decrypted (rather than found opened) since the store connected.
    pub(crate) fn decryptions(&self) -> u64 {
        self.decryptions.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn keys(&self) -> Result<Arc<SecretsKeys>, StoreError> {
        self.keys.read().expect("sealer keys").clone().ok_or_else(|| {
            StoreError::Sealing(
                "no secrets key is loaded, so secrets can be neither stored nor read; configure secrets_key_file"
                    .to_owned(),
            )
        })
    }

    /// Seals `plaintext` for `place` under the key `key_id`.
    pub(crate) fn seal(&self, key_id: &str, place: &Place, plaintext: &[u8]) -> Result<Vec<u8>, StoreError> {
        let keys = self.keys()?;
        let key = keys.get(key_id).ok_or_else(|| missing_key(key_id))?;
        let cipher = XChaCha20Poly1305::new(&Key::from(*key.bytes()));
        let nonce = crate::entropy::random_bytes::<NONCE_BYTES>();
        let sealed = cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: plaintext, aad: &place.aad })
            .map_err(|_| StoreError::Sealing("sealing a secret failed".to_owned()))?;
        let mut stored = Vec::with_capacity(NONCE_BYTES + sealed.len());
        stored.extend_from_slice(&nonce);
        stored.extend_from_slice(&sealed);
        Ok(stored)
    }

    /// Opens a stored value of `place`, sealed under `sealed_by` (a value stored in clear has
    /// none, and is refused: every clear value is sealed when a node starts).
    pub(crate) fn open(
        &self,
        place: &Place,
        sealed_by: Option<&str>,
        stored: &[u8],
    ) -> Result<SecretBytes, StoreError> {
        let Some(key_id) = sealed_by else {
            return Err(StoreError::Sealing(
                "a secret is stored in clear; a node seals clear secrets when it starts, so one written since was not written by agent-inbox"
                    .to_owned(),
            ));
        };
        if let Some(found) = self.opened.lock().expect("opened secrets").get(stored) {
            if found.key_id == key_id && found.aad == place.aad {
                return Ok(found.plaintext.clone());
            }
        }
        let keys = self.keys()?;
        let key = keys.get(key_id).ok_or_else(|| missing_key(key_id))?;
        let refused = || {
            StoreError::Sealing(format!(
                "a secret sealed under key {key_id} does not open for its row: it was copied from another row or altered"
            ))
        };
        if stored.len() < NONCE_BYTES + TAG_BYTES {
            return Err(refused());
        }
        let (nonce, sealed) = stored.split_at(NONCE_BYTES);
        let nonce: [u8; NONCE_BYTES] = nonce.try_into().expect("split at the nonce's length");
        let cipher = XChaCha20Poly1305::new(&Key::from(*key.bytes()));
        self.decryptions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let plaintext = Zeroizing::new(
            cipher
                .decrypt(&XNonce::from(nonce), Payload { msg: sealed, aad: &place.aad })
                .map_err(|_| refused())?,
        );
        let mut opened = self.opened.lock().expect("opened secrets");
        if opened.len() >= OPENED_ENTRIES_MAX {
            opened.clear();
        }
        opened.insert(
            stored.to_vec(),
            Opened { key_id: key_id.to_owned(), aad: place.aad.clone(), plaintext: plaintext.clone() },
        );
        Ok(plaintext)
    }
}

fn missing_key(key_id: &str) -> StoreError {
    StoreError::Sealing(format!(
        "a secret is sealed under key {key_id}, which the secrets key file does not hold; add that key to the file"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        let sealer = Sealer::default();
        sealer.set_keys(SecretsKeys::generate());
        sealer
    }

    #[test]
    fn a_value_opens_only_for_its_own_place_and_key() {
        let sealer = sealer();
        let key_id = sealer.keys().unwrap().first().id().to_owned();
        let here = Place::callback_secret("t1", "cbreg_1", "s1");
        let stored = sealer.seal(&key_id, &here, b"webhook secret").unwrap();
        assert!(!stored.windows(14).any(|w| w == b"webhook secret"));
        assert_eq!(sealer.open(&here, Some(&key_id), &stored).unwrap().as_slice(), b"webhook secret");
        // Opened once, the value comes from memory: still only for its own place.
        for elsewhere in [
            Place::callback_secret("t2", "cbreg_1", "s1"),
            Place::callback_secret("t1", "cbreg_2", "s1"),
            Place::callback_secret("t1", "cbreg_1", "s2"),
            Place::agent_key("t1", "cbreg_1", "s1", ""),
        ] {
            let err = sealer.open(&elsewhere, Some(&key_id), &stored).unwrap_err();
            assert!(err.to_string().contains("copied from another row"), "{err}");
        }
        let err = sealer.open(&here, Some("sk_000000000000"), &stored).unwrap_err();
        assert!(err.to_string().contains("does not hold"), "{err}");
        let err = sealer.open(&here, None, b"webhook secret").unwrap_err();
        assert!(err.to_string().contains("in clear"), "{err}");
        let mut altered = stored.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(sealer.open(&here, Some(&key_id), &altered).is_err());
    }

    #[test]
    fn places_do_not_run_into_each_other() {
        // Length prefixes: moving a character from one part to the next changes the place.
        assert_ne!(Place::callback_secret("ab", "c", "d"), Place::callback_secret("a", "bc", "d"));
    }

    #[test]
    fn without_keys_nothing_is_sealed_or_opened() {
        let sealer = Sealer::default();
        let err = sealer.seal("sk_x", &Place::signing_key("p", "k", "HS256"), b"x").unwrap_err();
        assert!(err.to_string().contains("secrets_key_file"), "{err}");
    }

    #[test]
    fn new_keys_forget_what_was_opened() {
        let sealer = sealer();
        let key_id = sealer.keys().unwrap().first().id().to_owned();
        let place = Place::signing_key("access_token", "k1", "HS256");
        let stored = sealer.seal(&key_id, &place, &[9; 32]).unwrap();
        sealer.open(&place, Some(&key_id), &stored).unwrap();
        sealer.set_keys(SecretsKeys::generate());
        assert!(sealer.open(&place, Some(&key_id), &stored).is_err(), "the old key is gone");
    }
}
