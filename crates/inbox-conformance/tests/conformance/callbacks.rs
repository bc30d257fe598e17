//! Callback registrations with their limits, and deliveries driven by the database.

use inbox_conformance::Harness;
use inbox_conformance::vocabulary::{agent_id, publish_to, tenant};
use inbox_core::{InboxSeq, UnixMillis};
use inbox_store::{
    CallbackAttempt, CallbackLimits, CallbackRegistration, DeliveryResult, DueDelivery, KeyId,
    NewCallbackRegistration, RegistrationId, StoreError, VerificationState,
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

/// Takes a due delivery as the worker does; returns its lease.
async fn claim(h: &Harness, due: &DueDelivery) -> UnixMillis {
    let lease = h.store.now().plus_ms(30_000);
    let id = &due.registration.registration_id;
    assert!(h.store.callbacks().claim_delivery(id, due.registration.next_attempt_at, lease).await.unwrap());
    lease
}

/// An active registration of `agent` in t1 with one event waiting.
async fn active_with_news(h: &Harness, agent: &str) -> RegistrationId {
    let created = h.store.callbacks().create_registration(&registration("t1", agent), LIMITS).await.unwrap();
    assert!(h.store.callbacks().mark_verified(&tenant("t1"), &created.registration_id).await.unwrap());
    publish_to(h, "t1", agent, "{}").await;
    created.registration_id
}

async fn stored(h: &Harness, id: &RegistrationId) -> CallbackRegistration {
    h.store.callbacks().registration(&tenant("t1"), id).await.unwrap().unwrap()
}

async fn due_now(h: &Harness) -> Vec<DueDelivery> {
    h.store.callbacks().due_deliveries(h.store.now(), None, 10).await.unwrap()
}

fn failure(
    next_attempt_at: UnixMillis,
    give_up_head: Option<InboxSeq>,
    disable: Option<&str>,
) -> DeliveryResult {
    DeliveryResult::Failed {
        error: "no answer within 5s".into(),
        next_attempt_at,
        give_up_head,
        disable: disable.map(str::to_owned),
    }
}

case! {
    /// Failures in a row count across heads (a head given up on does not reset them) and
    /// remember when they started; a success starts both over.
    async fn callback_failures_in_a_row_count_across_heads_until_a_success(h: &Harness) {
        let id = active_with_news(h, "alpha").await;
        let first_failure = h.store.now();
        let lease = claim(h, &due_now(h).await[0]).await;
        assert!(h.store.callbacks().finish_delivery(&id, lease, &failure(h.store.now(), None, None)).await.unwrap());
        h.clock.advance_ms(1_000);
        let lease = claim(h, &due_now(h).await[0]).await;
        let give_up = failure(h.store.now(), Some(InboxSeq(1)), None);
        assert!(h.store.callbacks().finish_delivery(&id, lease, &give_up).await.unwrap());
        let after = stored(h, &id).await;
        assert_eq!((after.failed_attempts, after.consecutive_failures), (0, 2), "per head, and in a row");
        assert_eq!(after.failing_since, Some(first_failure), "since the first failure");
        assert!(after.disabled.is_none());

        publish_to(h, "t1", "alpha", "{}").await;
        let due = due_now(h).await;
        assert_eq!(due[0].registration.consecutive_failures, 2);
        let lease = claim(h, &due[0]).await;
        let delivered = DeliveryResult::Delivered { head_seq: InboxSeq(2), next_attempt_at: h.store.now() };
        assert!(h.store.callbacks().finish_delivery(&id, lease, &delivered).await.unwrap());
        let after = stored(h, &id).await;
        assert_eq!((after.consecutive_failures, after.failing_since, after.last_error), (0, None, None));
    }
}

case! {
    /// A registration disabled for a reason gets no deliveries and cannot be claimed, however
    /// much is published; re-enabling starts its counts over and makes the current head due
    /// at once. Re-enabling one that is not disabled changes nothing.
    async fn a_disabled_callback_gets_nothing_until_re_enabled(h: &Harness) {
        let id = active_with_news(h, "alpha").await;
        let healthy = active_with_news(h, "beta").await;
        let due = due_now(h).await;
        let mine = due.iter().find(|d| d.registration.registration_id == id).unwrap();
        let lease = claim(h, mine).await;
        let reason = "50 failed deliveries in a row over 24h; the last: no answer within 5s";
        let disabled = failure(h.store.now(), None, Some(reason));
        assert!(h.store.callbacks().finish_delivery(&id, lease, &disabled).await.unwrap());
        let after = stored(h, &id).await;
        let state = after.disabled.clone().expect("disabled");
        assert_eq!((state.at, state.reason.as_str()), (h.store.now(), reason));

        publish_to(h, "t1", "alpha", "{}").await;
        h.clock.advance_ms(60_000);
        let due = due_now(h).await;
        let ids: Vec<&RegistrationId> = due.iter().map(|d| &d.registration.registration_id).collect();
        assert_eq!(ids, [&healthy], "only the enabled registration is due");
        assert!(
            !h.store.callbacks().claim_delivery(&id, after.next_attempt_at, h.store.now()).await.unwrap(),
            "a disabled registration cannot be claimed"
        );
        assert!(!h.store.callbacks().enable(&tenant("t2"), &id).await.unwrap(), "another tenant's");

        assert!(h.store.callbacks().enable(&tenant("t1"), &id).await.unwrap());
        let enabled = stored(h, &id).await;
        assert_eq!((enabled.disabled.clone(), enabled.consecutive_failures, enabled.failing_since), (None, 0, None));
        let due = due_now(h).await;
        let mine = due.iter().find(|d| d.registration.registration_id == id).expect("due at once");
        assert_eq!(mine.head_seq, InboxSeq(2), "the current head");
        assert!(!h.store.callbacks().enable(&tenant("t1"), &id).await.unwrap(), "not disabled: unchanged");
    }
}

case! {
    /// An outcome is recorded only under the lease it was claimed with: a delivery that
    /// outlived its lease, or a registration re-enabled meanwhile, records nothing.
    async fn a_delivery_outcome_is_recorded_only_under_its_lease(h: &Harness) {
        let id = active_with_news(h, "alpha").await;
        let lease = claim(h, &due_now(h).await[0]).await;
        let stale = UnixMillis(lease.get() - 1);
        assert!(!h.store.callbacks().finish_delivery(&id, stale, &failure(h.store.now(), None, Some("x"))).await.unwrap());
        let after = stored(h, &id).await;
        assert_eq!((after.consecutive_failures, after.disabled), (0, None), "nothing recorded");
        assert!(h.store.callbacks().finish_delivery(&id, lease, &failure(h.store.now(), None, None)).await.unwrap());
    }
}

case! {
    /// Due deliveries come soonest first, then by id, and page on after a given one, so a
    /// worker that defers the first of a page still reaches the rest.
    async fn due_deliveries_page_on_after_a_given_one(h: &Harness) {
        let mut ids = Vec::new();
        for agent in ["alpha", "beta", "gamma"] {
            let created = h.store.callbacks().create_registration(&registration("t1", agent), LIMITS).await.unwrap();
            h.store.callbacks().mark_verified(&tenant("t1"), &created.registration_id).await.unwrap();
            publish_to(h, "t1", agent, "{}").await;
            ids.push(created.registration_id);
        }
        ids.sort();
        let now = h.store.now();
        let first = h.store.callbacks().due_deliveries(now, None, 1).await.unwrap();
        assert_eq!(first[0].registration.registration_id, ids[0]);
        let at = first[0].registration.next_attempt_at;
        let rest = h.store.callbacks().due_deliveries(now, Some((at, &ids[0])), 10).await.unwrap();
        let rest: Vec<RegistrationId> = rest.into_iter().map(|d| d.registration.registration_id).collect();
        assert_eq!(rest, ids[1..]);
    }
}

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
        assert!(h.store.callbacks().due_deliveries(now, None, 10).await.unwrap().is_empty(), "pending: nothing due");
        let id = first.registration_id.clone();
        assert!(h.store.callbacks().mark_verified(&tenant("t1"), &id).await.unwrap());
        let due = h.store.callbacks().due_deliveries(now, None, 10).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].registration.registration_id.clone(), due[0].head_seq), (id.clone(), InboxSeq(1)));
        assert_eq!(due[0].registration.signing_secrets(now).len(), 1);

        let other = h.second_node().await;
        let seen = due[0].registration.next_attempt_at;
        let lease = now.plus_ms(30_000);
        assert!(h.store.callbacks().claim_delivery(&id, seen, lease).await.unwrap());
        assert!(!other.callbacks().claim_delivery(&id, seen, lease).await.unwrap(), "one node takes it");
        assert!(h.store.callbacks().due_deliveries(now, None, 10).await.unwrap().is_empty(), "leased");

        let retry_at = now.plus_ms(1_000);
        let failed = DeliveryResult::Failed {
            error: "timed out".into(),
            next_attempt_at: retry_at,
            give_up_head: None,
            disable: None,
        };
        assert!(h.store.callbacks().finish_delivery(&id, lease, &failed).await.unwrap());
        let stored = h.store.callbacks().registration(&tenant("t1"), &id).await.unwrap().unwrap();
        assert_eq!((stored.failed_attempts, stored.last_error.as_deref()), (1, Some("timed out")));
        assert!(h.store.callbacks().due_deliveries(now, None, 10).await.unwrap().is_empty(), "backing off");
        h.clock.advance_ms(1_000);
        let due = h.store.callbacks().due_deliveries(h.store.now(), None, 10).await.unwrap();
        assert_eq!(due.len(), 1, "due again after the backoff");

        let lease = claim(h, &due[0]).await;
        let delivered = DeliveryResult::Delivered { head_seq: InboxSeq(1), next_attempt_at: h.store.now() };
        assert!(h.store.callbacks().finish_delivery(&id, lease, &delivered).await.unwrap());
        assert!(
            h.store.callbacks().due_deliveries(h.store.now(), None, 10).await.unwrap().is_empty(),
            "head 1 delivered"
        );
        publish_to(h, "t1", "alpha", "{}").await;
        publish_to(h, "t1", "alpha", "{}").await;
        let due = h.store.callbacks().due_deliveries(h.store.now(), None, 10).await.unwrap();
        assert_eq!(due[0].head_seq, InboxSeq(3), "publishes coalesce into the newest head");
        let lease = claim(h, &due[0]).await;
        let given_up = DeliveryResult::Failed {
            error: "refused".into(),
            next_attempt_at: h.store.now(),
            give_up_head: Some(InboxSeq(3)),
            disable: None,
        };
        assert!(h.store.callbacks().finish_delivery(&id, lease, &given_up).await.unwrap());
        assert!(h.store.callbacks().due_deliveries(h.store.now(), None, 10).await.unwrap().is_empty());

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
