//! Secrets at rest: sealed under the key file's keys and bound to their rows, clear values of an
//! older version sealed once when nodes start (several at once), wrong keys refused, and a
//! rewrap that moves every secret under a new key.

use inbox_conformance::Harness;
use inbox_conformance::vocabulary::{agent_id, tenant};
use inbox_store::{
    CallbackLimits, KeyId, NewAgentKey, NewCallbackRegistration, SecretsKeys, SqlStore, StoreError,
    TokenAlgorithm,
};
use inbox_trust::Algorithm;

const LIMITS: CallbackLimits = CallbackLimits { per_recipient_max: 10, per_tenant_max: 100 };

/// One secret of each kind, created through the store: a token key, a callback registration
/// whose secret was rotated once (so it has a previous one), and an hmac agent key.
async fn one_of_each(store: &SqlStore) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let token_key = store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap().remove(0);
    let registration = store
        .callbacks()
        .create_registration(
            &NewCallbackRegistration {
                tenant_id: tenant("tenant_a"),
                recipient_id: agent_id("agent_a"),
                callback_url: "https://hooks.example.com/a".to_owned(),
                key_id: KeyId::new("s1").unwrap(),
                secret: vec![0x5a; 32].into(),
                max_rate_per_minute: 60,
                replay_window_seconds: 300,
            },
            LIMITS,
        )
        .await
        .unwrap();
    let rotated = store
        .callbacks()
        .rotate_secret(
            &tenant("tenant_a"),
            &registration.registration_id,
            &KeyId::new("s2").unwrap(),
            &[0x6b; 40],
            60_000,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rotated.previous.as_ref().unwrap().secret.as_slice(),
        [0x5a; 32],
        "the rotated secret reopens"
    );
    let agent_key = store
        .signatures()
        .insert_agent_key(&NewAgentKey {
            tenant_id: tenant("tenant_a"),
            key_id: KeyId::new("hk1").unwrap(),
            agent_id: agent_id("agent_a"),
            algorithm: Algorithm::HmacSha256,
            key_material: vec![0x7c; 32].into(),
            signed: false,
        })
        .await
        .unwrap();
    (token_key.secret.to_vec(), rotated.secret.to_vec(), vec![0x5a; 32], agent_key.key_material.to_vec())
}

/// How many rows of the whole database hold `bytes` in one of the secret columns.
async fn rows_holding(h: &Harness, bytes: &[u8]) -> i64 {
    let hex = hex::encode_upper(bytes);
    h.scalar(
        "SELECT (SELECT COUNT(*) FROM signing_key WHERE HEX(secret) LIKE ?) \
         + (SELECT COUNT(*) FROM callback_registration WHERE HEX(secret) LIKE ? OR HEX(previous_secret) LIKE ?) \
         + (SELECT COUNT(*) FROM agent_signing_key WHERE HEX(key_material) LIKE ?) AS n",
        &[&format!("%{hex}%"), &format!("%{hex}%"), &format!("%{hex}%"), &format!("%{hex}%")],
    )
    .await
}

case! {
    /// Every secret is stored sealed under the file's key, never as itself, and reads back
    /// as it was.
    async fn secrets_are_stored_sealed(h: &Harness) {
        let (token_secret, callback_secret, previous_secret, agent_secret) = one_of_each(&h.store).await;
        for secret in [&token_secret, &callback_secret, &previous_secret, &agent_secret] {
            assert_eq!(rows_holding(h, secret).await, 0, "a secret is stored as itself");
        }
        let census = h.store.secrets().census().await.unwrap();
        let key_id = h.secrets_keys.first().id().to_owned();
        assert_eq!(census.by_key.get(&Some(key_id.clone())), Some(&4), "{census:?}");
        assert_eq!(census.not_under(&key_id), 0);
        let keys = h.store.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_a")).await.unwrap();
        assert_eq!(keys[0].key_material.as_slice(), agent_secret);
    }
}

case! {
    /// A sealed value copied into another row does not open there: not an agent key into
    /// another agent's row, not a token key into another key's row, not a callback's previous
    /// secret into its current one.
    async fn a_sealed_value_copied_into_another_row_is_refused(h: &Harness) {
        one_of_each(&h.store).await;
        h.store
            .signatures()
            .insert_agent_key(&NewAgentKey {
                tenant_id: tenant("tenant_a"),
                key_id: KeyId::new("hk2").unwrap(),
                agent_id: agent_id("agent_b"),
                algorithm: Algorithm::HmacSha256,
                key_material: vec![0x11; 32].into(),
                signed: false,
            })
            .await
            .unwrap();
        h.execute_raw(
            "UPDATE agent_signing_key SET key_material = \
             (SELECT m FROM (SELECT key_material AS m FROM agent_signing_key WHERE key_id = 'hk1') AS copied) \
             WHERE key_id = 'hk2'",
        )
        .await;
        let err = h.store.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_b")).await.unwrap_err();
        assert!(matches!(err, StoreError::Sealing(_)), "{err:?}");
        assert!(err.to_string().contains("copied from another row"), "{err}");
        assert!(h.store.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_a")).await.is_ok(), "the original opens");

        h.store.tokens().rotate_signing_keys(60_000, 0, TokenAlgorithm::Hs256).await.unwrap();
        h.execute_raw(
            "UPDATE signing_key SET secret = \
             (SELECT s FROM (SELECT secret AS s FROM signing_key ORDER BY created_at_utc LIMIT 1) AS copied) \
             WHERE created_at_utc = (SELECT c FROM (SELECT MAX(created_at_utc) AS c FROM signing_key) AS newest)",
        )
        .await;
        let err = h.store.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap_err();
        assert!(matches!(err, StoreError::Sealing(_)), "{err:?}");

        h.execute_raw(
            "UPDATE callback_registration SET secret = previous_secret, secret_sealed_by = previous_secret_sealed_by",
        )
        .await;
        let err = h.store.callbacks().registrations(&tenant("tenant_a"), None).await.unwrap_err();
        assert!(matches!(err, StoreError::Sealing(_)), "{err:?}");
    }
}

case! {
    /// A secret written in clear behind the store's back is refused: only the sealing pass
    /// at start takes clear values.
    async fn a_secret_in_clear_is_refused(h: &Harness) {
        one_of_each(&h.store).await;
        h.execute_raw("UPDATE agent_signing_key SET key_material_sealed_by = NULL").await;
        let err = h.store.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_a")).await.unwrap_err();
        assert!(err.to_string().contains("in clear"), "{err}");
    }
}

case! {
    /// Secrets an older version stored in clear are sealed at the first start with a key, by
    /// two nodes starting at once, each secret once; ed25519 public keys stay as they are.
    galera async fn clear_secrets_are_sealed_once_when_nodes_start(h: &Harness) {
        h.execute_raw(
            "INSERT INTO signing_key (key_id, purpose, algorithm, secret, created_at_utc) \
             VALUES ('k-old', 'access_token', 'HS256', X'0101010101010101010101010101010101010101010101010101010101010101', 1)",
        )
        .await;
        h.execute_raw(
            "INSERT INTO callback_registration (registration_id, tenant_id, recipient_id, callback_url, \
             verification_state, auth_mode, key_id, replay_window_seconds, max_rate_per_minute, created_at_utc, \
             secret, previous_key_id, previous_secret, previous_retires_at_utc, updated_at_utc) \
             VALUES ('cbreg_old', 'tenant_a', 'agent_a', 'https://hooks.example.com/old', 'active', 'hmac-sha256', \
             'cur', 300, 60, 1, X'0202020202020202020202020202020202020202020202020202020202020202', 'prev', \
             X'0303030303030303030303030303030303030303030303030303030303030303', 9999999999999, 1)",
        )
        .await;
        h.execute_raw(
            "INSERT INTO agent_signing_key (tenant_id, key_id, agent_id, algorithm, key_material, created_at_utc) \
             VALUES ('tenant_a', 'hk-old', 'agent_a', 'hmac-sha256', X'0404040404040404040404040404040404040404040404040404040404040404', 1), \
             ('tenant_a', 'ed-old', 'agent_a', 'ed25519', X'0505050505050505050505050505050505050505050505050505050505050505', 1)",
        )
        .await;
        let census = h.store.secrets().census().await.unwrap();
        assert_eq!(census.by_key.get(&None), Some(&4), "{census:?}");

        let (first, second) = (h.second_node_without_keys().await, h.second_node_without_keys().await);
        let (a, b) = tokio::join!(
            first.secrets().prepare(h.secrets_keys.clone()),
            second.secrets().prepare(h.secrets_keys.clone())
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.sealing_key_id, h.secrets_keys.first().id());
        assert_eq!(a.resealed + b.resealed, 4, "each clear secret sealed once: {a:?} {b:?}");
        let census = h.store.secrets().census().await.unwrap();
        assert_eq!(census.not_under(h.secrets_keys.first().id()), 0, "{census:?}");
        for byte in [1u8, 2, 3, 4] {
            assert_eq!(rows_holding(h, &[byte; 32]).await, 0, "secret {byte} still in clear");
        }
        assert_eq!(rows_holding(h, &[5; 32]).await, 1, "a public key needs no sealing");

        let token_keys = first.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap();
        assert_eq!(token_keys.iter().find(|k| k.key_id == "k-old").unwrap().secret.as_slice(), [1; 32]);
        let registration = first.callbacks().registrations(&tenant("tenant_a"), None).await.unwrap().remove(0);
        assert_eq!(registration.secret.as_slice(), [2; 32]);
        assert_eq!(registration.previous.unwrap().secret.as_slice(), [3; 32]);
        let agent_keys = first.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_a")).await.unwrap();
        assert_eq!(agent_keys.len(), 2);
        for key in agent_keys {
            let expected = if key.key_id.as_str() == "hk-old" { [4; 32] } else { [5; 32] };
            assert_eq!(key.key_material.as_slice(), expected);
        }
    }
}

case! {
    /// A key file that cannot open what the database holds is refused before it is used,
    /// naming the keys it lacks; the keys in use stay.
    async fn a_wrong_key_file_is_refused(h: &Harness) {
        one_of_each(&h.store).await;
        let wrong = SecretsKeys::generate();
        let other = h.second_node().await;
        let err = other.secrets().prepare(wrong.clone()).await.unwrap_err();
        assert!(matches!(err, StoreError::Sealing(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(h.secrets_keys.first().id()) && text.contains(wrong.first().id()), "{text}");
        assert!(other.secrets().check(&wrong).await.is_err());
        assert!(other.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_a")).await.is_ok(), "keys in use stay");
    }
}

case! {
    /// A rewrap moves every secret under the new key while the store keeps working: after it,
    /// the new key alone opens everything, new secrets are sealed under it even by a node whose
    /// file lists the old key first, and the old key alone is refused.
    async fn rewrap_moves_every_secret_under_the_new_key(h: &Harness) {
        let (token_secret, callback_secret, previous_secret, agent_secret) = one_of_each(&h.store).await;
        let new = SecretsKeys::generate();
        let both = h.secrets_keys.and(&new);
        let node = h.second_node().await;
        node.secrets().check(&both).await.unwrap();
        node.secrets().use_keys(both.clone());
        h.store.secrets().use_keys(both.clone());
        let resealed = node.secrets().rewrap(new.first().id()).await.unwrap();
        assert_eq!(resealed, 4);
        let census = h.store.secrets().census().await.unwrap();
        assert_eq!(census.not_under(new.first().id()), 0, "{census:?}");
        assert_eq!(node.secrets().rewrap(new.first().id()).await.unwrap(), 0, "a second rewrap finds nothing");

        // The old key first in this node's file: the database's choice still wins.
        h.store
            .signatures()
            .insert_agent_key(&NewAgentKey {
                tenant_id: tenant("tenant_a"),
                key_id: KeyId::new("hk-after").unwrap(),
                agent_id: agent_id("agent_c"),
                algorithm: Algorithm::HmacSha256,
                key_material: vec![0x22; 32].into(),
                signed: false,
            })
            .await
            .unwrap();
        assert_eq!(h.store.secrets().census().await.unwrap().not_under(new.first().id()), 0);

        let only_new = h.second_node_without_keys().await;
        only_new.secrets().prepare(new.clone()).await.unwrap();
        assert_eq!(
            only_new.tokens().access_signing_keys(TokenAlgorithm::Hs256).await.unwrap()[0].secret.as_slice(),
            token_secret
        );
        let registration = only_new.callbacks().registrations(&tenant("tenant_a"), None).await.unwrap().remove(0);
        assert_eq!(registration.secret.as_slice(), callback_secret);
        assert_eq!(registration.previous.unwrap().secret.as_slice(), previous_secret);
        let agent_keys = only_new.signatures().agent_keys(&tenant("tenant_a"), &agent_id("agent_a")).await.unwrap();
        assert_eq!(agent_keys[0].key_material.as_slice(), agent_secret);

        let only_old = h.second_node_without_keys().await.secrets().prepare(h.secrets_keys.clone()).await.unwrap_err();
        assert!(only_old.to_string().contains(new.first().id()), "{only_old}");
    }
}
