//! Nonces refused once on any node, agent keys (and the second-key rule under races), tenant policy.

use inbox_conformance::vocabulary::{agent_id, tenant};
use inbox_store::Field;

use inbox_store::{
    AGENT_KEYS_PER_AGENT_MAX, KeyId, NewAgentKey, NonceUse, SignatureNonce, StoreError, TenantPolicy,
};

fn new_key(tenant_name: &str, agent: &str, key_id: &str) -> NewAgentKey {
    NewAgentKey {
        tenant_id: tenant(tenant_name),
        key_id: KeyId::new(key_id).unwrap(),
        agent_id: agent_id(agent),
        algorithm: inbox_trust::Algorithm::Ed25519,
        key_material: vec![7; 32].into(),
        signed: true,
    }
}

case! {
    /// A nonce is fresh once and a replay after, on any node, until its window has passed.
    async fn nonces_are_refused_once_on_any_node(h: &Harness) {
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
}

case! {
    /// Nonces remembered together each get their own answer, in order: all new in one statement;
    /// a batch holding a replay, a nonce listed twice, or a row left from a passed window is
    /// decided nonce by nonce, on any node, and every fresh nonce of it is remembered.
    async fn nonces_remembered_together_each_get_their_own_answer(h: &Harness) {
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
}

case! {
    /// Keys register once per id and tenant, up to a limit per agent, and retire.
    async fn agent_keys_register_list_and_retire(h: &Harness) {
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
        assert_eq!(found.key_material.as_slice(), [7; 32]);
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
}

case! {
    /// An agent's first key needs no signature; once it has a live key, another is registered
    /// only by a signed request. The rule is checked in the inserting transaction, so of two
    /// unsigned registrations racing for an agent without keys (on two nodes) exactly one wins.
    async fn a_second_agent_key_needs_a_signature_even_under_races(h: &Harness) {
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
}

case! {
    /// A tenant without a policy has the default; a set policy is read back.
    async fn tenant_policy_defaults_and_changes(h: &Harness) {
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
}

case! {
    /// Operators list every key of their tenant, live and retired, by agent; never another
    /// tenant's.
    async fn a_tenants_agent_keys_are_listed_with_retired_ones(h: &Harness) {
        let signatures = h.store.signatures();
        signatures.insert_agent_key(&new_key("t1", "beta", "k-b1")).await.unwrap();
        signatures.insert_agent_key(&new_key("t1", "alpha", "k-a1")).await.unwrap();
        h.clock.advance_ms(1);
        signatures.insert_agent_key(&new_key("t1", "alpha", "k-a2")).await.unwrap();
        signatures.insert_agent_key(&new_key("t2", "alpha", "k-other")).await.unwrap();
        assert!(signatures.retire_agent_key(&tenant("t1"), &agent_id("alpha"), &KeyId::new("k-a1").unwrap(), 0).await.unwrap());

        let keys = signatures.tenant_agent_keys(&tenant("t1"), 10).await.unwrap();
        let listed: Vec<(&str, &str, bool)> =
            keys.iter().map(|k| (k.agent_id.as_str(), k.key_id.as_str(), k.retired_at.is_some())).collect();
        assert_eq!(listed, [("alpha", "k-a1", true), ("alpha", "k-a2", false), ("beta", "k-b1", false)]);
        assert_eq!(signatures.tenant_agent_keys(&tenant("t1"), 1).await.unwrap().len(), 1);
        assert!(matches!(signatures.tenant_agent_keys(&tenant("t1"), 0).await, Err(StoreError::Invalid { field: Field::Limit, .. })));
    }
}
