//! The access-token signing keys and their rotation.

use inbox_store::TokenAlgorithm;

case! {
    /// A rotation keeps the old token key verifying through the overlap and signing until the
    /// new key activates; afterwards only the new key is loaded.
    async fn signing_key_rotation_overlaps_then_retires(h: &Harness) {
        let old = h.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap().remove(0);
        let (new, retired) = h.store.tokens().rotate_signing_keys(60_000, 10_000, TokenAlgorithm::Hs256).await.unwrap();
        assert_eq!(retired, 1);
        let now = h.store.now();
        let keys = h.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].key_id, new.key_id, "newest first");
        assert!(!keys[0].signs_at(now) && keys[1].signs_at(now), "the old key signs until activation");
        assert_eq!(keys[1].retires_at, Some(now.plus_ms(60_000)));
        h.clock.advance_ms(10_000);
        assert!(keys[0].signs_at(h.store.now()));
        h.clock.advance_ms(50_001);
        let keys = h.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap();
        assert_eq!(keys.iter().map(|k| k.key_id.as_str()).collect::<Vec<_>>(), [new.key_id.as_str()]);
        assert_ne!(old.key_id, new.key_id);
    }
}

case! {
    /// An EdDSA key keeps its public key in clear beside the sealed private key, and the
    /// private key reopens to the seed the public key belongs to; a rotation may change the
    /// algorithm of the keys the service signs with.
    async fn ed25519_keys_keep_their_public_key(h: &Harness) {
        let first = h.store.tokens().access_signing_keys(TokenAlgorithm::EdDsa).await.unwrap().remove(0);
        assert_eq!(first.algorithm, TokenAlgorithm::EdDsa);
        let public = first.public_key.clone().expect("an Ed25519 key has a public key");
        let seed: [u8; 32] = first.secret.as_slice().try_into().unwrap();
        let derived = inbox_trust::message_signatures::SigningKey::ed25519_from_seed(&seed)
            .verifying_key()
            .ed25519_public_bytes()
            .unwrap();
        assert_eq!(public, derived);
        let (rotated, _) = h.store.tokens().rotate_signing_keys(60_000, 0, TokenAlgorithm::Hs256).await.unwrap();
        assert_eq!(rotated.algorithm, TokenAlgorithm::Hs256);
        assert!(rotated.public_key.is_none());
        let keys = h.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].public_key.as_deref(), Some(public.as_slice()));
        assert_eq!(keys[1].secret, first.secret);
    }
}
