//! Conformance cases of the trust layer's storage: nonces refused once on any node, agent
//! keys, per-tenant policy, webhook registrations with their limits and delivery cursor, and
//! rotation of the access-token keys.

use inbox_core::{InboxSeq, RecipientId};

use super::{Harness, publish_to, tenant};
use crate::{
    AGENT_KEYS_PER_AGENT_MAX, CallbackAttempt, CallbackLimits, DeliveryResult, KeyId, NewAgentKey,
    NewCallbackRegistration, NonceUse, SignatureNonce, StoreError, TenantPolicy, VerificationState,
};

fn agent_id(name: &str) -> RecipientId {
    RecipientId::new(name).unwrap()
}

fn new_key(tenant_name: &str, agent: &str, key_id: &str) -> NewAgentKey {
    NewAgentKey {
        tenant_id: tenant(tenant_name),
        key_id: KeyId::new(key_id).unwrap(),
        agent_id: agent_id(agent),
        algorithm: "ed25519".to_owned(),
        key_material: vec![7; 32],
        signed: true,
    }
}

fn registration(tenant_name: &str, agent: &str) -> NewCallbackRegistration {
    NewCallbackRegistration {
        tenant_id: tenant(tenant_name),
        recipient_id: agent_id(agent),
        callback_url: "https://agent.example.net/hook".to_owned(),
        key_id: KeyId::new("cbk_1").unwrap(),
        secret: vec![9; 32],
        max_rate_per_minute: 60,
        replay_window_seconds: 300,
    }
}

const LIMITS: CallbackLimits = CallbackLimits { per_recipient_max: 2, per_tenant_max: 3 };

/// A nonce is fresh once and a replay after, on any node, until its window has passed.
pub async fn nonces_are_refused_once_on_any_node(h: &Harness) {
    let other = h.second_node().await;
    let until = h.store.now().plus_ms(60_000);
    assert_eq!(h.store.signatures().remember_nonce(&[1; 32], until).await.unwrap(), NonceUse::Fresh);
    assert_eq!(other.signatures().remember_nonce(&[1; 32], until).await.unwrap(), NonceUse::Replayed);
    assert_eq!(h.store.signatures().remember_nonce(&[1; 32], until).await.unwrap(), NonceUse::Replayed);
    assert_eq!(other.signatures().remember_nonce(&[2; 32], until).await.unwrap(), NonceUse::Fresh);
    h.clock.advance_ms(61_000);
    let later = h.store.now().plus_ms(60_000);
    assert_eq!(
        h.store.signatures().remember_nonce(&[1; 32], later).await.unwrap(),
        NonceUse::Fresh,
        "a row past its window no longer counts, even before clean-up"
    );
    assert_eq!(
        h.store.signatures().delete_expired_nonces(h.store.now(), 100).await.unwrap(),
        1,
        "only [2] had expired"
    );
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM signature_nonce", &[]).await, 1);
}

/// Nonces remembered together each get their own answer, in order: all new in one statement;
/// a batch holding a replay, a nonce listed twice, or a row left from a passed window is
/// decided nonce by nonce, on any node, and every fresh nonce of it is remembered.
pub async fn nonces_remembered_together_each_get_their_own_answer(h: &Harness) {
    use NonceUse::{Fresh, Replayed};
    let other = h.second_node().await;
    let until = h.store.now().plus_ms(60_000);
    let nonce = |n: u8| SignatureNonce { hash: [n; 32], until };
    let answers = |batch: Vec<Result<NonceUse, StoreError>>| -> Vec<NonceUse> {
        batch.into_iter().map(Result::unwrap).collect()
    };

    assert_eq!(answers(h.store.signatures().remember_nonces(&[nonce(1), nonce(2)]).await), [Fresh, Fresh]);
    assert_eq!(answers(h.store.signatures().remember_nonces(&[nonce(3), nonce(3)]).await), [Fresh, Replayed]);
    assert_eq!(
        answers(other.signatures().remember_nonces(&[nonce(4), nonce(2), nonce(5), nonce(4)]).await),
        [Fresh, Replayed, Fresh, Replayed],
        "a replay from the other node among new nonces"
    );
    assert_eq!(
        h.store.signatures().remember_nonce(&[4; 32], until).await.unwrap(),
        Replayed,
        "4 was remembered"
    );
    assert_eq!(
        h.store.signatures().remember_nonce(&[5; 32], until).await.unwrap(),
        Replayed,
        "5 was remembered"
    );
    assert!(h.store.signatures().remember_nonces(&[]).await.is_empty());
    assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM signature_nonce", &[]).await, 5);

    h.clock.advance_ms(61_000);
    let later = SignatureNonce { hash: [1; 32], until: h.store.now().plus_ms(60_000) };
    let new = SignatureNonce { hash: [6; 32], ..later };
    assert_eq!(
        answers(other.signatures().remember_nonces(&[later, new]).await),
        [Fresh, Fresh],
        "a row past its window no longer counts"
    );
    assert_eq!(answers(h.store.signatures().remember_nonces(&[later, new]).await), [Replayed, Replayed]);
}

/// Keys register once per id and tenant, up to a limit per agent, and retire.
pub async fn agent_keys_register_list_and_retire(h: &Harness) {
    let key = h.store.signatures().insert_agent_key(&new_key("t1", "alpha", "ak_1")).await.unwrap();
    assert!(key.is_live(h.store.now()));
    assert!(matches!(
        h.store.signatures().insert_agent_key(&new_key("t1", "beta", "ak_1")).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    h.store.signatures().insert_agent_key(&new_key("t2", "alpha", "ak_1")).await.expect("ids are per tenant");
    for n in 2..=AGENT_KEYS_PER_AGENT_MAX {
        h.store.signatures().insert_agent_key(&new_key("t1", "alpha", &format!("ak_{n}"))).await.unwrap();
    }
    assert!(matches!(
        h.store.signatures().insert_agent_key(&new_key("t1", "alpha", "ak_extra")).await,
        Err(StoreError::LimitReached { .. })
    ));
    let found =
        h.store.signatures().agent_key(&tenant("t1"), &KeyId::new("ak_1").unwrap()).await.unwrap().unwrap();
    assert_eq!(found.agent_id, agent_id("alpha"));
    assert_eq!(found.key_material, vec![7; 32]);
    let ak1 = KeyId::new("ak_1").unwrap();
    assert!(
        !h.store.signatures().retire_agent_key(&tenant("t1"), &agent_id("beta"), &ak1, 0).await.unwrap(),
        "another agent cannot retire the key"
    );
    assert!(
        h.store.signatures().retire_agent_key(&tenant("t1"), &agent_id("alpha"), &ak1, 5_000).await.unwrap()
    );
    assert!(
        h.store.signatures().agent_key(&tenant("t1"), &ak1).await.unwrap().unwrap().is_live(h.store.now())
    );
    h.clock.advance_ms(5_001);
    assert!(
        !h.store.signatures().agent_key(&tenant("t1"), &ak1).await.unwrap().unwrap().is_live(h.store.now())
    );
    let live = h.store.signatures().agent_keys(&tenant("t1"), &agent_id("alpha")).await.unwrap();
    assert_eq!(live.len() as u64, AGENT_KEYS_PER_AGENT_MAX - 1);
    h.store
        .signatures()
        .insert_agent_key(&new_key("t1", "alpha", "ak_extra"))
        .await
        .expect("a retired key frees a place");
}

/// An agent's first key needs no signature; once it has a live key, another is registered
/// only by a signed request. The rule is checked in the inserting transaction, so of two
/// unsigned registrations racing for an agent without keys (on two nodes) exactly one wins.
pub async fn a_second_agent_key_needs_a_signature_even_under_races(h: &Harness) {
    let unsigned = |agent: &str, key_id: &str| NewAgentKey { signed: false, ..new_key("t1", agent, key_id) };
    let second = h.second_node().await;
    let mut races = tokio::task::JoinSet::new();
    for n in 0..8 {
        let (first, other) = (h.store.clone(), second.clone());
        let (a, b) = (
            unsigned(&format!("racer{n}"), &format!("ak_{n}_a")),
            unsigned(&format!("racer{n}"), &format!("ak_{n}_b")),
        );
        races.spawn(async move {
            let (a, b) = tokio::join!(
                first.signatures().insert_agent_key(&a),
                other.signatures().insert_agent_key(&b)
            );
            (n, a, b)
        });
    }
    while let Some(race) = races.join_next().await {
        let (n, a, b) = race.unwrap();
        let won = [&a, &b].iter().filter(|r| r.is_ok()).count();
        let refused =
            [&a, &b].iter().filter(|r| matches!(r, Err(StoreError::SignatureRequired { .. }))).count();
        assert_eq!((won, refused), (1, 1), "racer{n}: exactly one unsigned first key wins ({a:?}, {b:?})");
        let live =
            h.store.signatures().agent_keys(&tenant("t1"), &agent_id(&format!("racer{n}"))).await.unwrap();
        assert_eq!(live.len(), 1, "racer{n} has one key");
    }
    assert!(matches!(
        h.store.signatures().insert_agent_key(&unsigned("racer0", "ak_0_c")).await,
        Err(StoreError::SignatureRequired { .. })
    ));
    h.store
        .signatures()
        .insert_agent_key(&new_key("t1", "racer0", "ak_0_c"))
        .await
        .expect("a signed request adds a second key");
    assert_eq!(h.store.signatures().agent_keys(&tenant("t1"), &agent_id("racer0")).await.unwrap().len(), 2);
}

/// A tenant without a policy has the default; a set policy is read back.
pub async fn tenant_policy_defaults_and_changes(h: &Harness) {
    assert_eq!(h.store.signatures().tenant_policy(&tenant("t1")).await.unwrap(), TenantPolicy::default());
    h.store
        .signatures()
        .set_tenant_policy(
            &tenant("t1"),
            TenantPolicy { signatures_required: true, ..TenantPolicy::default() },
        )
        .await
        .unwrap();
    assert!(h.store.signatures().tenant_policy(&tenant("t1")).await.unwrap().signatures_required);
    assert!(!h.store.signatures().tenant_policy(&tenant("t2")).await.unwrap().signatures_required);
    h.store
        .signatures()
        .set_tenant_policy(
            &tenant("t1"),
            TenantPolicy { signatures_required: false, ..TenantPolicy::default() },
        )
        .await
        .unwrap();
    assert!(!h.store.signatures().tenant_policy(&tenant("t1")).await.unwrap().signatures_required);
}

/// Registrations stay within their limits, are due only once active and past the delivered
/// head, are taken by one node at a time, and record every attempt.
pub async fn callback_registrations_deliver_through_the_database(h: &Harness) {
    let first = h.store.callbacks().create_registration(&registration("t1", "alpha"), LIMITS).await.unwrap();
    assert_eq!(first.state, VerificationState::PendingVerification);
    h.store.callbacks().create_registration(&registration("t1", "alpha"), LIMITS).await.unwrap();
    assert!(matches!(
        h.store.callbacks().create_registration(&registration("t1", "alpha"), LIMITS).await,
        Err(StoreError::LimitReached { limit: 2, .. })
    ));
    h.store.callbacks().create_registration(&registration("t1", "beta"), LIMITS).await.unwrap();
    assert!(matches!(
        h.store.callbacks().create_registration(&registration("t1", "gamma"), LIMITS).await,
        Err(StoreError::LimitReached { limit: 3, .. })
    ));
    h.store.callbacks().create_registration(&registration("t2", "gamma"), LIMITS).await.expect("per tenant");

    publish_to(h, "t1", "alpha", "{}").await;
    let now = h.store.now();
    assert!(h.store.callbacks().due_deliveries(now, 10).await.unwrap().is_empty(), "pending: nothing due");
    let id = first.registration_id.clone();
    assert!(h.store.callbacks().mark_verified(&tenant("t1"), &id).await.unwrap());
    let due = h.store.callbacks().due_deliveries(now, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].registration.registration_id.clone(), due[0].head_seq), (id.clone(), InboxSeq(1)));
    assert_eq!(due[0].registration.signing_secrets(now).len(), 1);

    let other = h.second_node().await;
    let seen = due[0].registration.next_attempt_at;
    let lease = now.plus_ms(30_000);
    assert!(h.store.callbacks().claim_delivery(&id, seen, lease).await.unwrap());
    assert!(!other.callbacks().claim_delivery(&id, seen, lease).await.unwrap(), "one node takes it");
    assert!(h.store.callbacks().due_deliveries(now, 10).await.unwrap().is_empty(), "leased");

    let retry_at = now.plus_ms(1_000);
    let failed =
        DeliveryResult::Failed { error: "timed out".into(), next_attempt_at: retry_at, give_up_head: None };
    h.store.callbacks().finish_delivery(&id, &failed).await.unwrap();
    let stored = h.store.callbacks().registration(&tenant("t1"), &id).await.unwrap().unwrap();
    assert_eq!((stored.failed_attempts, stored.last_error.as_deref()), (1, Some("timed out")));
    assert!(h.store.callbacks().due_deliveries(now, 10).await.unwrap().is_empty(), "backing off");
    h.clock.advance_ms(1_000);
    let due = h.store.callbacks().due_deliveries(h.store.now(), 10).await.unwrap();
    assert_eq!(due.len(), 1, "due again after the backoff");

    let delivered = DeliveryResult::Delivered { head_seq: InboxSeq(1), next_attempt_at: h.store.now() };
    h.store.callbacks().finish_delivery(&id, &delivered).await.unwrap();
    assert!(
        h.store.callbacks().due_deliveries(h.store.now(), 10).await.unwrap().is_empty(),
        "head 1 delivered"
    );
    publish_to(h, "t1", "alpha", "{}").await;
    publish_to(h, "t1", "alpha", "{}").await;
    let due = h.store.callbacks().due_deliveries(h.store.now(), 10).await.unwrap();
    assert_eq!(due[0].head_seq, InboxSeq(3), "publishes coalesce into the newest head");
    let given_up = DeliveryResult::Failed {
        error: "refused".into(),
        next_attempt_at: h.store.now(),
        give_up_head: Some(InboxSeq(3)),
    };
    h.store.callbacks().finish_delivery(&id, &given_up).await.unwrap();
    assert!(h.store.callbacks().due_deliveries(h.store.now(), 10).await.unwrap().is_empty());

    let attempt = CallbackAttempt {
        delivery_id: "d-1".into(),
        registration_id: id.clone(),
        tenant_id: tenant("t1"),
        kind: "hint".into(),
        head_seq: Some(3),
        attempt: 1,
        outcome: "failed".into(),
        http_status: Some(500),
        error: Some("x".repeat(400)),
        duration_ms: 12,
        created_at: h.store.now(),
    };
    h.store.callbacks().record_attempt(&attempt).await.unwrap();
    let log = h.store.callbacks().attempts(&tenant("t1"), &id, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].error.as_deref().map(str::len), Some(255), "long errors are cut");
    assert!(h.store.callbacks().attempts(&tenant("t2"), &id, 10).await.unwrap().is_empty(), "per tenant");
    assert_eq!(h.store.callbacks().delete_attempts_before(h.store.now().plus_ms(1), 10).await.unwrap(), 1);

    let rotated = h
        .store
        .callbacks()
        .rotate_secret(&tenant("t1"), &id, &KeyId::new("cbk_2").unwrap(), &[5; 32], 10_000)
        .await
        .unwrap()
        .unwrap();
    let secrets = rotated.signing_secrets(h.store.now());
    let ids: Vec<&str> = secrets.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(ids, ["cbk_2", "cbk_1"], "the new key signs first, the old one through the overlap");
    h.clock.advance_ms(10_001);
    assert_eq!(rotated.signing_secrets(h.store.now()).len(), 1);
    assert!(h.store.callbacks().delete_registration(&tenant("t1"), &id).await.unwrap());
    assert!(h.store.callbacks().registration(&tenant("t1"), &id).await.unwrap().is_none());
}

/// A rotation keeps the old token key verifying through the overlap and signing until the
/// new key activates; afterwards only the new key is loaded.
pub async fn signing_key_rotation_overlaps_then_retires(h: &Harness) {
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
