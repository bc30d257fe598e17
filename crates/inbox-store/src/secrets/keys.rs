//! The secrets key file's keys: what a line holds, the id each key is known by, and the rules
//! a file must meet. No I/O: the server reads the file, this parses its text.
//!
//! A file holds one key per line (`agent-inbox-secrets-key:v1:` and 32 bytes in base64url);
//! `#` comments and blank lines are ignored. A key's id is a fingerprint of the key itself, so
//! an id stored beside a sealed value names exactly one key and a wrong file shows as ids it
//! lacks. Every key of a file opens sealed values; which one seals new values is recorded in
//! the database (`SqlStore::secrets`), the file's first key until a rewrap names another.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// What every key line starts with: names the file's kind and its format's version.
pub const SECRETS_KEY_LINE_PREFIX: &str = "agent-inbox-secrets-key:v1:";

/// Keys one file may hold: a rotation needs two; a few more cover an interrupted one.
pub const SECRETS_KEYS_PER_FILE_MAX: usize = 8;

/// Bytes of one key (XChaCha20-Poly1305 takes 256-bit keys).
const KEY_BYTES: usize = 32;

/// Why a key file's text was refused. Never quotes a line: it may hold a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsKeyError {
    #[error("holds no key (make one with `agent-inbox keys new-secrets-key`)")]
    Empty,
    #[error(
        "line {line} is not a secrets key (expected {SECRETS_KEY_LINE_PREFIX} followed by 32 bytes in base64url, as `agent-inbox keys new-secrets-key` prints)"
    )]
    NotAKey { line: usize },
    #[error("line {line} repeats key {key_id}")]
    Repeated { line: usize, key_id: String },
    #[error("holds more than {SECRETS_KEYS_PER_FILE_MAX} keys; remove the retired ones")]
    TooMany,
}

/// One key: 32 bytes, wiped from memory when dropped, and its id.
#[derive(Clone)]
pub struct SecretsKey {
    id: String,
    key: Zeroizing<[u8; KEY_BYTES]>,
}

impl SecretsKey {
    /// A fresh key from the operating system's generator.
    pub fn generate() -> SecretsKey {
        SecretsKey::from_bytes(Zeroizing::new(crate::entropy::random_bytes::<KEY_BYTES>()))
    }

    fn from_bytes(key: Zeroizing<[u8; KEY_BYTES]>) -> SecretsKey {
        SecretsKey { id: key_id_of(&key), key }
    }

    /// The fingerprint stored beside every value this key seals, such as `sk_3f9a0c12d4e5`.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.key
    }

    /// The key as one line of a key file.
    pub fn to_line(&self) -> Zeroizing<String> {
        let mut line = Zeroizing::new(String::from(SECRETS_KEY_LINE_PREFIX));
        URL_SAFE_NO_PAD.encode_string(self.key.as_slice(), &mut line);
        line
    }
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsKey").field("id", &self.id).finish_non_exhaustive()
    }
}

impl PartialEq for SecretsKey {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for SecretsKey {}

/// The keys of one key file, in the file's order.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretsKeys {
    keys: Vec<SecretsKey>,
}

impl SecretsKeys {
    /// A file's text, as `agent-inbox keys new-secrets-key` writes it (and several such files
    /// put together).
    pub fn parse(text: &str) -> Result<SecretsKeys, SecretsKeyError> {
        let mut keys: Vec<SecretsKey> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let not_a_key = || SecretsKeyError::NotAKey { line: index + 1 };
            let encoded = line.strip_prefix(SECRETS_KEY_LINE_PREFIX).ok_or_else(not_a_key)?;
            let mut decoded = Zeroizing::new([0u8; KEY_BYTES]);
            match URL_SAFE_NO_PAD.decode_slice(encoded, decoded.as_mut_slice()) {
                Ok(KEY_BYTES) => {}
                _ => return Err(not_a_key()),
            }
            let key = SecretsKey::from_bytes(decoded);
            if keys.contains(&key) {
                return Err(SecretsKeyError::Repeated { line: index + 1, key_id: key.id });
            }
            keys.push(key);
            if keys.len() > SECRETS_KEYS_PER_FILE_MAX {
                return Err(SecretsKeyError::TooMany);
            }
        }
        if keys.is_empty() {
            return Err(SecretsKeyError::Empty);
        }
        Ok(SecretsKeys { keys })
    }

    /// One fresh key.
    pub fn generate() -> SecretsKeys {
        SecretsKeys { keys: vec![SecretsKey::generate()] }
    }

    /// These keys, then those of `other` that these lack: what a rewrap opens with.
    pub fn and(&self, other: &SecretsKeys) -> SecretsKeys {
        let mut keys = self.keys.clone();
        keys.extend(other.keys.iter().filter(|k| !self.keys.contains(k)).cloned());
        SecretsKeys { keys }
    }

    /// The file's first key: the one that seals until the database names another.
    pub fn first(&self) -> &SecretsKey {
        &self.keys[0]
    }

    /// Every key's id, in the file's order.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(SecretsKey::id).collect()
    }

    pub fn get(&self, key_id: &str) -> Option<&SecretsKey> {
        self.keys.iter().find(|k| k.id == key_id)
    }

    /// The keys as a key file's text, each line after a comment naming its id.
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::new());
        for key in &self.keys {
            text.push_str(&format!(
                "# agent-inbox secrets key {}: keep this file apart from the database and its backups\n",
                key.id
            ));
            text.push_str(&key.to_line());
            text.push('\n');
        }
        text
    }
}

impl fmt::Debug for SecretsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsKeys").field("ids", &self.ids()).finish()
    }
}

/// `sk_` and the first 6 bytes of SHA-256 over a label and the key, in hex: enough to tell a
/// handful of keys apart, and no help in guessing a 256-bit key.
fn key_id_of(key: &[u8; KEY_BYTES]) -> String {
    let digest = Sha256::new().chain_update(b"agent-inbox secrets key id v1\0").chain_update(key).finalize();
    format!("sk_{}", hex::encode(&digest[..6]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_file_parses_back_to_the_same_keys() {
        let keys = SecretsKeys::generate().and(&SecretsKeys::generate());
        let text = keys.to_file_text();
        let parsed = SecretsKeys::parse(&text).unwrap();
        assert_eq!(parsed, keys);
        assert_eq!(parsed.ids().len(), 2);
        assert!(parsed.ids().iter().all(|id| id.len() == 15 && id.starts_with("sk_")));
        assert_eq!(parsed.first().bytes(), keys.first().bytes());
        assert_eq!(parsed.get(keys.ids()[1]).unwrap().bytes(), keys.get(keys.ids()[1]).unwrap().bytes());
    }

    #[test]
    fn the_id_is_a_fingerprint_of_the_key() {
        let key = SecretsKey::from_bytes(Zeroizing::new([7; 32]));
        assert_eq!(key.id(), SecretsKey::from_bytes(Zeroizing::new([7; 32])).id());
        assert_ne!(key.id(), SecretsKey::from_bytes(Zeroizing::new([8; 32])).id());
    }

    #[test]
    fn bad_files_are_refused_without_quoting_them() {
        assert_eq!(SecretsKeys::parse("# only a comment\n\n"), Err(SecretsKeyError::Empty));
        let short = format!("{SECRETS_KEY_LINE_PREFIX}{}", URL_SAFE_NO_PAD.encode([1u8; 16]));
        assert_eq!(SecretsKeys::parse(&format!("\n{short}\n")), Err(SecretsKeyError::NotAKey { line: 2 }));
        let err = SecretsKeys::parse("hunter2-as-a-key").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let line = SecretsKey::generate().to_line();
        let twice = format!("{}\n{}\n", *line, *line);
        assert!(matches!(SecretsKeys::parse(&twice), Err(SecretsKeyError::Repeated { line: 2, .. })));
        let many: String = (0..=SECRETS_KEYS_PER_FILE_MAX)
            .map(|_| format!("{}\n", *SecretsKey::generate().to_line()))
            .collect();
        assert_eq!(SecretsKeys::parse(&many), Err(SecretsKeyError::TooMany));
    }

    #[test]
    fn debug_shows_ids_only() {
        let keys = SecretsKeys::generate();
        let shown = format!("{keys:?} {:?}", keys.first());
        assert!(shown.contains(keys.first().id()));
        assert!(!shown.contains(&keys.first().to_line()[SECRETS_KEY_LINE_PREFIX.len()..]));
    }
}
