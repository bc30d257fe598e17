//! Visibility leases: claiming by priority or by id, acknowledging, releasing with retries and dead letters, heartbeats.

use inbox_store::Field;
use std::collections::HashSet;

use inbox_conformance::vocabulary::{
    ack_of, ack_with, assert_invalid, claim_next, event, inbox_of, publish_to, refusal,
};
use inbox_core::{
    AckResult, AckState, Clock, DeadLetterReason, EventBody, EventId, LeaseToken, Priority, RefusalReason,
    SessionId,
};
use inbox_store::{
    AckItem, Acknowledge, ClaimByIds, ClaimNext, Heartbeat, HeartbeatItem, Refusal, Release, StoreError,
};

case! {
    /// Claims take the most urgent event first, then the oldest; tokens are shown once and only
    /// their hash is stored.
    galera async fn claim_next_orders_by_priority_then_sequence(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for (n, priority) in [Priority::Low, Priority::Normal, Priority::Urgent, Priority::Normal, Priority::High]
            .into_iter()
            .enumerate()
        {
            let mut p = event("t1", &["alpha"], &format!("{{\"n\":{n}}}"));
            p.priority = priority;
            h.store.inbox().publish(&p).await.unwrap();
        }
        let session = SessionId::new("sess_1").unwrap();
        let claim = ClaimNext { session_id: Some(session.clone()), ..claim_next(&inbox, 4) };
        let claimed = h.store.inbox().claim_next(&claim).await.unwrap();
        let seqs: Vec<u64> = claimed.iter().map(|c| c.event.inbox_seq.get()).collect();
        assert_eq!(seqs, [3, 5, 2, 4]);
        for c in &claimed {
            assert_eq!(c.event.state(), AckState::Claimed);
            assert_eq!(c.event.lifecycle.delivery_attempts, 1);
            assert_eq!(c.lease_until, h.clock.now().plus_ms(60_000));
            assert_eq!(c.event.lease_owner_session_id.as_ref(), Some(&session));
            assert!(matches!(c.event.body, EventBody::Json(_)), "a claim delivers the payload");
        }
        let tokens: HashSet<&str> = claimed.iter().map(|c| c.lease_token.as_str()).collect();
        assert_eq!(tokens.len(), 4, "every lease has its own token");
        let stored = h.store.inbox().event(&inbox, claimed[0].event.event_id).await.unwrap().unwrap();
        assert_eq!(
            stored.lifecycle.lease.unwrap().token_hash,
            claimed[0].lease_token.hash(),
            "only the hash is kept"
        );
        let rest = h.store.inbox().claim_next(&claim_next(&inbox, 10)).await.unwrap();
        assert_eq!(rest.iter().map(|c| c.event.inbox_seq.get()).collect::<Vec<_>>(), [1]);
        assert!(h.store.inbox().claim_next(&claim_next(&inbox, 10)).await.unwrap().is_empty());
        assert_invalid(
            h.store.inbox().claim_next(&ClaimNext { lease_ms: Some(500), ..claim_next(&inbox, 1) }).await, Field::LeaseLength);
        assert_invalid(
            h.store.inbox().claim_next(&ClaimNext { lease_ms: Some(u64::MAX), ..claim_next(&inbox, 1) }).await, Field::LeaseLength);
        assert_invalid(h.store.inbox().claim_next(&claim_next(&inbox, 0)).await, Field::Limit);
    }
}

case! {
    /// Claiming named events gives each its own outcome.
    galera async fn claim_by_ids_reports_each_event(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let a = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let b = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let c = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let elsewhere = publish_to(h, "t1", "beta", "{}").await.event_id;
        let unknown = EventId::new_v7(h.clock.now(), [9; 10]);
        let first = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![b],
                lease_ms: None,
            })
            .await
            .unwrap();
        let held = first[0].as_ref().unwrap();
        h.store.inbox().acknowledge(&ack_of(&inbox, held)).await.unwrap();
        h.store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![c],
                lease_ms: None,
            })
            .await
            .unwrap();

        let outcomes = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![a, b, c, unknown, elsewhere],
                lease_ms: Some(30_000),
            })
            .await
            .unwrap();
        let claimed = outcomes[0].as_ref().unwrap();
        assert_eq!(claimed.event.event_id, a);
        assert_eq!(claimed.lease_until, h.clock.now().plus_ms(30_000));
        assert_eq!(refusal(&outcomes[1]), Refusal::Refused(RefusalReason::NotClaimable("acked")));
        assert_eq!(refusal(&outcomes[2]), Refusal::Refused(RefusalReason::NotClaimable("claimed")));
        assert_eq!(refusal(&outcomes[3]), Refusal::NotFound);
        assert_eq!(refusal(&outcomes[4]), Refusal::NotFound, "another recipient's event is not in this inbox");
        assert_invalid(
            h.store
                .inbox()
                .claim_by_ids(&ClaimByIds {
                    inbox: inbox.clone(),
                    session_id: None,
                    event_ids: vec![a, a],
                    lease_ms: None,
                })
                .await, Field::EventIds);
    }
}

case! {
    /// Acknowledging is idempotent for the lease holder, clears the payload but keeps the row,
    /// and refuses everyone else precisely.
    galera async fn acknowledge_is_idempotent_and_refuses_strangers(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        publish_to(h, "t1", "alpha", r#"{"secret":"payload"}"#).await;
        publish_to(h, "t1", "alpha", "{}").await;
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
        let (first, second) = (&claimed[0], &claimed[1]);

        let foreign = LeaseToken::from_random([1; 16]);
        let outcome = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, first.event.event_id, &foreign, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(refusal(&outcome[0]), Refusal::Refused(RefusalReason::LeaseMismatch));
        let swapped = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, first.event.event_id, &second.lease_token, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(
            refusal(&swapped[0]),
            Refusal::Refused(RefusalReason::LeaseMismatch),
            "another event's token does not fit"
        );

        for _ in 0..3 {
            let outcome = h.store.inbox().acknowledge(&ack_of(&inbox, first)).await.unwrap();
            assert_eq!(outcome[0].as_ref().unwrap().state, AckState::Acked, "repeats succeed");
        }
        let stored = h.store.inbox().event(&inbox, first.event.event_id).await.unwrap().unwrap();
        assert_eq!(stored.state(), AckState::Acked);
        assert_eq!(stored.body, EventBody::Empty, "payload cleared");
        assert_eq!(stored.acked_at, Some(h.clock.now()));
        assert_eq!(stored.event_type, first.event.event_type, "metadata kept");
        let stranger = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, first.event.event_id, &foreign, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(refusal(&stranger[0]), Refusal::Refused(RefusalReason::AlreadyAcked));
        let unknown = EventId::new_v7(h.clock.now(), [3; 10]);
        let outcome = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, unknown, &foreign, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(refusal(&outcome[0]), Refusal::NotFound);

        // A batch: one good, one bad; the good one lands.
        let batch = Acknowledge {
            inbox: inbox.clone(),
            session_id: None,
            items: vec![
                AckItem::new(second.event.event_id, second.lease_token.clone(), AckResult::Failed),
                AckItem::new(unknown, foreign.clone(), AckResult::Completed),
            ],
        };
        let outcome = h.store.inbox().acknowledge(&batch).await.unwrap();
        assert_eq!(outcome[0].as_ref().unwrap().state, AckState::DeadLetter, "a failed result parks the event");
        assert_eq!(refusal(&outcome[1]), Refusal::NotFound);
        let parked = h.store.inbox().event(&inbox, second.event.event_id).await.unwrap().unwrap();
        assert_eq!(parked.lifecycle.dead_letter_reason, DeadLetterReason::HandlerFailed);
        assert!(matches!(parked.body, EventBody::Json(_)), "a parked event keeps its payload for requeue");
        assert_invalid(
            h.store.inbox().acknowledge(&Acknowledge { inbox: inbox.clone(), session_id: None, items: vec![] }).await, Field::Acks);
    }
}

case! {
    /// Release returns the event, after `retry_after` if asked; the holder's repeat is harmless,
    /// a stranger is refused, and the last attempt dead-letters.
    galera async fn release_schedules_retries_and_dead_letters_at_the_limit(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let mut p = event("t1", &["alpha"], "{}");
        p.max_attempts = Some(2);
        let id = h.store.inbox().publish(&p).await.unwrap().deliveries[0].event_id;
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        let release = Release {
            inbox: inbox.clone(),
            event_id: id,
            lease_token: claimed.lease_token.clone(),
            retry_after_ms: 60_000,
            reason: Some("transient_dependency_failure".into()),
        };
        let stranger = Release { lease_token: LeaseToken::from_random([2; 16]), ..release.clone() };
        match h.store.inbox().release(&stranger).await {
            Err(StoreError::Event(item)) => {
                assert_eq!(item.reason, Refusal::Refused(RefusalReason::LeaseMismatch))
            }
            other => panic!("expected lease_mismatch, got {other:?}"),
        }
        let receipt = h.store.inbox().release(&release).await.unwrap();
        assert_eq!(receipt.state, AckState::Available);
        assert_eq!(receipt.next_retry_at, Some(h.clock.now().plus_ms(60_000)));
        assert_eq!(
            h.store.inbox().release(&release).await.unwrap().state,
            AckState::Available,
            "a repeated release is harmless"
        );
        let stored = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
        assert_eq!(stored.lifecycle.display_state(h.clock.now()).as_str(), "retry_scheduled");
        assert_eq!(stored.last_error.as_deref(), Some("transient_dependency_failure"));
        assert!(
            h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().is_empty(),
            "not before retry_after"
        );
        let ack = h.store.inbox().acknowledge(&ack_of(&inbox, &claimed)).await.unwrap();
        assert_eq!(refusal(&ack[0]), Refusal::Refused(RefusalReason::LeaseExpired), "a released lease is over");

        h.clock.advance_ms(60_000);
        let second = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        assert_eq!(second.event.lifecycle.delivery_attempts, 2);
        let last = Release { lease_token: second.lease_token.clone(), retry_after_ms: 0, ..release.clone() };
        assert_eq!(h.store.inbox().release(&last).await.unwrap().state, AckState::DeadLetter, "no attempts left");
        let stored = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
        assert_eq!(stored.lifecycle.dead_letter_reason, DeadLetterReason::MaxAttemptsExceeded);
        assert_invalid(
            h.store
                .inbox()
                .release(&Release { retry_after_ms: inbox_store::RETRY_AFTER_MS_MAX + 1, ..release.clone() })
                .await, Field::RetryDelay);
        assert_invalid(
            h.store.inbox().release(&Release { reason: Some("x".repeat(201)), ..release }).await, Field::Reason);
    }
}

case! {
    /// Heartbeats extend live leases up to the maximum, never revive dead ones, and refuse
    /// strangers.
    galera async fn heartbeat_extends_only_live_leases(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        publish_to(h, "t1", "alpha", "{}").await;
        publish_to(h, "t1", "alpha", "{}").await;
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
        let beat = |items: Vec<(usize, u64)>| Heartbeat {
            inbox: inbox.clone(),
            items: items
                .into_iter()
                .map(|(i, extend_ms)| HeartbeatItem {
                    event_id: claimed[i].event.event_id,
                    lease_token: claimed[i].lease_token.clone(),
                    extend_ms,
                })
                .collect(),
        };
        h.clock.advance_ms(50_000);
        let now = h.clock.now();
        let receipts = h.store.inbox().heartbeat(&beat(vec![(0, 120_000), (1, 120_000)])).await.unwrap();
        assert!(receipts.iter().all(|r| r.as_ref().unwrap().lease_until == now.plus_ms(120_000)));
        // Different extensions, one shorter than the lease already held: the lease never shrinks.
        let receipts = h.store.inbox().heartbeat(&beat(vec![(0, 10_000), (1, 180_000)])).await.unwrap();
        assert_eq!(receipts[0].as_ref().unwrap().lease_until, now.plus_ms(120_000));
        assert_eq!(receipts[1].as_ref().unwrap().lease_until, now.plus_ms(180_000));
        let stranger = Heartbeat {
            inbox: inbox.clone(),
            items: vec![HeartbeatItem {
                event_id: claimed[0].event.event_id,
                lease_token: LeaseToken::from_random([5; 16]),
                extend_ms: 60_000,
            }],
        };
        assert_eq!(
            refusal(&h.store.inbox().heartbeat(&stranger).await.unwrap()[0]),
            Refusal::Refused(RefusalReason::LeaseMismatch)
        );
        h.clock.advance_ms(150_000);
        let receipts = h.store.inbox().heartbeat(&beat(vec![(0, 60_000), (1, 60_000)])).await.unwrap();
        assert_eq!(
            refusal(&receipts[0]),
            Refusal::Refused(RefusalReason::LeaseExpired),
            "a dead lease is not revived"
        );
        assert!(receipts[1].is_ok());
        assert_invalid(h.store.inbox().heartbeat(&beat(vec![(0, 500)])).await, Field::LeaseExtension);
        assert_invalid(
            h.store.inbox().heartbeat(&beat(vec![(0, h.store.config().lease_ms_max + 1_000)])).await, Field::LeaseExtension);
    }
}

case! {
    /// Acknowledgements gathered in one batch answer as each would alone: a request whose every
    /// token fits is acknowledged (in one statement with its batch mates); a request with a stale
    /// or another event's token gets its own refusal while its good items land; a token never
    /// acknowledges an event of another request or inbox; an invalid request fails alone.
    galera async fn batched_acknowledgements_keep_per_item_outcomes_and_fencing(h: &Harness) {
        let (alpha, beta) = (inbox_of("t1", "alpha"), inbox_of("t1", "beta"));
        for _ in 0..3 {
            publish_to(h, "t1", "alpha", "{}").await;
            publish_to(h, "t1", "beta", "{}").await;
        }
        let a = h.store.inbox().claim_next(&claim_next(&alpha, 3)).await.unwrap();
        let b = h.store.inbox().claim_next(&claim_next(&beta, 3)).await.unwrap();
        let stale = LeaseToken::from_random([7; 16]);
        let mixed = Acknowledge {
            inbox: beta.clone(),
            session_id: None,
            items: vec![
                AckItem::new(b[0].event.event_id, b[0].lease_token.clone(), AckResult::Completed),
                AckItem::new(b[1].event.event_id, stale, AckResult::Completed),
            ],
        };
        let requests = vec![
            // Wholly good.
            ack_of(&alpha, &a[0]),
            // A good item and a stale token: the good one lands, the stale one is refused.
            mixed,
            // alpha's event with its own token, named in beta's inbox: not found there.
            ack_with(&beta, a[2].event.event_id, &a[2].lease_token, AckResult::Completed),
            // Invalid: a quarantine without a reason.
            ack_with(&beta, b[2].event.event_id, &b[2].lease_token, AckResult::Quarantined),
            // Another event's token does not fit.
            ack_with(&alpha, a[1].event.event_id, &b[2].lease_token, AckResult::Completed),
        ];
        let answers = h.store.inbox().acknowledge_batch(&requests).await;
        assert_eq!(answers.len(), requests.len());
        let state = |outcome: &inbox_store::ItemOutcome<inbox_store::AckReceipt>| outcome.as_ref().unwrap().state;
        assert_eq!(state(&answers[0].as_ref().unwrap()[0]), AckState::Acked);
        let mixed = answers[1].as_ref().unwrap();
        assert_eq!(state(&mixed[0]), AckState::Acked, "a good item lands beside a stale one");
        assert_eq!(refusal(&mixed[1]), Refusal::Refused(RefusalReason::LeaseMismatch));
        assert_eq!(refusal(&answers[2].as_ref().unwrap()[0]), Refusal::NotFound, "not in beta's inbox");
        assert!(matches!(answers[3], Err(StoreError::Invalid { field: Field::Reason, .. })), "{:?}", answers[3]);
        assert_eq!(refusal(&answers[4].as_ref().unwrap()[0]), Refusal::Refused(RefusalReason::LeaseMismatch));

        let stored = |inbox: &inbox_core::RecipientKey, id: EventId| {
            let (store, inbox) = (h.store.clone(), inbox.clone());
            async move { store.inbox().event(&inbox, id).await.unwrap().unwrap().state() }
        };
        let expected = [
            (&alpha, &a[0], AckState::Acked),
            (&alpha, &a[1], AckState::Claimed),
            (&alpha, &a[2], AckState::Claimed),
            (&beta, &b[0], AckState::Acked),
            (&beta, &b[1], AckState::Claimed),
            (&beta, &b[2], AckState::Claimed),
        ];
        for (inbox, claimed, state) in expected {
            assert_eq!(stored(inbox, claimed.event.event_id).await, state, "{:?}", claimed.event.event_id);
        }

        // A repeat beside first acknowledgements: every one answered as done, every event acked.
        let rest: Vec<Acknowledge> =
            [(&alpha, &a[0]), (&alpha, &a[1]), (&alpha, &a[2]), (&beta, &b[1]), (&beta, &b[2])]
                .into_iter()
                .map(|(inbox, claimed)| ack_of(inbox, claimed))
                .collect();
        for answer in h.store.inbox().acknowledge_batch(&rest).await {
            assert_eq!(state(&answer.unwrap()[0]), AckState::Acked);
        }
        for (inbox, claimed, _) in expected {
            assert_eq!(stored(inbox, claimed.event.event_id).await, AckState::Acked);
        }
    }
}
