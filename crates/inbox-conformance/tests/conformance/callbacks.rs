//! Callback registrations with their limits, and deliveries driven by the database.

use inbox_conformance::vocabulary::{agent_id, publish_to, tenant};
use inbox_core::InboxSeq;
use inbox_store::{
    CallbackAttempt, CallbackLimits, DeliveryResult, KeyId, NewCallbackRegistration, StoreError,
    VerificationState,
};

fn registration(tenant_name: &str, agent: &str) -> NewCallbackRegistration {
    NewCallbackRegistration {
        tenant_id: tenant(tenant_name),
        recipient_id: agent_id(agent),
        callback_url: "https://agent.example.net/hook".to_owned(),
        key_id: KeyId::new("cbk_1").unwrap(),
        secret: vec![9; 32].into(),
        max_rate_per_minute: 60,
        replay_window_seconds: 300,
    }
}

const LIMITS: CallbackLimits = CallbackLimits { per_recipient_max: 2, per_tenant_max: 3 };

case! {
    /// Registrations stay within their limits, are due only once active and past the delivered
    /// head, are taken by one node at a time, and record every attempt.
    async fn callback_registrations_deliver_through_the_database(h: &Harness) {
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
}
