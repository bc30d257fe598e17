//! The access-token signing keys and their rotation.

case! {
    /// A rotation keeps the old token key verifying through the overlap and signing until the
    /// new key activates; afterwards only the new key is loaded.
    async fn signing_key_rotation_overlaps_then_retires(h: &Harness) {
        let old = h.store.tokens().access_signing_keys().await.unwrap().remove(0);
        let (new, retired) = h.store.tokens().rotate_signing_keys(60_000, 10_000).await.unwrap();
        assert_eq!(retired, 1);
        let now = h.store.now();
        let keys = h.store.tokens().access_signing_keys().await.unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].key_id, new.key_id, "newest first");
        assert!(!keys[0].signs_at(now) && keys[1].signs_at(now), "the old key signs until activation");
        assert_eq!(keys[1].retires_at, Some(now.plus_ms(60_000)));
        h.clock.advance_ms(10_000);
        assert!(keys[0].signs_at(h.store.now()));
        h.clock.advance_ms(50_001);
        let keys = h.store.tokens().access_signing_keys().await.unwrap();
        assert_eq!(keys.iter().map(|k| k.key_id.as_str()).collect::<Vec<_>>(), [new.key_id.as_str()]);
        assert_ne!(old.key_id, new.key_id);
    }
}
