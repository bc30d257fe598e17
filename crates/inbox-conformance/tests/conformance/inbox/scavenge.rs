//! The scavenger (expired leases and events), retention into the archive, cold storage, and the operators' tools for parked events.

use inbox_conformance::archive_acknowledged;
use inbox_conformance::vocabulary::{
    ack_of, ack_with, assert_invalid, claim_next, event, inbox_of, poll, publish_to, refusal, tenant,
};
use inbox_core::{AckResult, AckState, Clock, EventId, InboxSeq, QuarantineClass, RefusalReason};
use inbox_store::Field;
use inbox_store::{Actor, ClaimByIds, ParkedQuery, QuarantineRequest, Refusal, Release, StoreError};

case! {
    /// Expired leases return with backoff or dead-letter, expired events expire, and the old
    /// holder's late calls are refused precisely.
    galera async fn scavenger_returns_expired_leases_and_expires_events(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let mut p = event("t1", &["alpha"], "{}");
        p.max_attempts = Some(2);
        let id = h.store.inbox().publish(&p).await.unwrap().deliveries[0].event_id;
        let mut short = event("t1", &["alpha"], "{}");
        short.expires_at = Some(h.clock.now().plus_ms(30_000));
        let short_id = h.store.inbox().publish(&short).await.unwrap().deliveries[0].event_id;
        let first = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![id],
                lease_ms: Some(10_000),
            })
            .await
            .unwrap()
            .remove(0)
            .unwrap();

        assert_eq!(
            h.store.inbox().scavenge(100).await.unwrap(),
            inbox_store::ScavengeReport::default(),
            "nothing is due yet"
        );
        h.clock.advance_ms(10_000);
        let late_ack_before_scavenge = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
        assert_eq!(late_ack_before_scavenge.state(), AckState::Claimed);
        let report = h.store.inbox().scavenge(100).await.unwrap();
        assert_eq!(report.leases_returned, 1);
        let returned = h.store.inbox().event(&inbox, id).await.unwrap().unwrap();
        assert_eq!(returned.state(), AckState::Available);
        assert_eq!(returned.lifecycle.delivery_attempts, 1, "attempts are kept");
        let retry_at = returned.lifecycle.next_retry_at.expect("a backoff delay");
        assert!(retry_at > h.clock.now() && retry_at <= h.clock.now().plus_ms(h.store.config().backoff.base_ms));
        let late = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, id, &first.lease_token, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(refusal(&late[0]), Refusal::Refused(RefusalReason::LeaseExpired));

        h.clock.advance_ms(h.store.config().backoff.base_ms);
        let second = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![id],
                lease_ms: Some(10_000),
            })
            .await
            .unwrap()
            .remove(0)
            .unwrap();
        let stale = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, id, &first.lease_token, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(
            refusal(&stale[0]),
            Refusal::Refused(RefusalReason::LeaseMismatch),
            "someone else holds it now"
        );
        h.clock.advance_ms(20_000);
        let report = h.store.inbox().scavenge(100).await.unwrap();
        assert_eq!((report.dead_lettered, report.expired), (1, 1));
        assert_eq!(h.store.inbox().event(&inbox, id).await.unwrap().unwrap().state(), AckState::DeadLetter);
        assert_eq!(h.store.inbox().event(&inbox, short_id).await.unwrap().unwrap().state(), AckState::Expired);
        let late = h
            .store
            .inbox()
            .acknowledge(&ack_with(&inbox, id, &second.lease_token, AckResult::Completed))
            .await
            .unwrap();
        assert_eq!(refusal(&late[0]), Refusal::Refused(RefusalReason::LeaseExpired));
        assert_invalid(h.store.inbox().scavenge(0).await, Field::ScavengeBatch);
    }
}

case! {
    /// Terminal events older than the retention window move to the archive as a prefix of the
    /// sequence, and a cursor into the archived range is told to resync.
    galera async fn retention_archives_a_prefix_and_requires_cursor_reset(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for _ in 0..5 {
            publish_to(h, "t1", "alpha", "{}").await;
        }
        // Ack 1, 2, 4 and 5; 3 stays available and holds back everything after it.
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 5)).await.unwrap();
        for c in claimed.iter().filter(|c| c.event.inbox_seq != InboxSeq(3)) {
            h.store.inbox().acknowledge(&ack_of(&inbox, c)).await.unwrap();
        }
        let three = claimed.iter().find(|c| c.event.inbox_seq == InboxSeq(3)).unwrap();
        h.store
            .inbox()
            .release(&Release {
                inbox: inbox.clone(),
                event_id: three.event.event_id,
                lease_token: three.lease_token.clone(),
                retry_after_ms: 0,
                reason: None,
            })
            .await
            .unwrap();
        h.clock.advance_ms(h.store.config().retention_ms - 1);
        assert_eq!(h.store.inbox().scavenge(100).await.unwrap().archived, 0, "not old enough yet");
        h.clock.advance_ms(2);
        assert_eq!(h.store.inbox().scavenge(100).await.unwrap().archived, 2);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await, 2);
        assert_eq!(h.scalar("SELECT MIN(inbox_seq) AS n FROM agent_inbox", &[]).await, 3);
        let head = h.store.inbox().head(&inbox).await.unwrap();
        assert_eq!((head.head_seq, head.oldest_available_seq), (InboxSeq(5), InboxSeq(3)));
        match h.store.inbox().poll_after_cursor(&poll(&inbox, 1, 10)).await {
            Err(StoreError::CursorResetRequired { oldest_available_seq, head_seq, .. }) => {
                assert_eq!((oldest_available_seq, head_seq), (InboxSeq(3), InboxSeq(5)))
            }
            other => panic!("expected cursor_reset_required, got {other:?}"),
        }
        let page = h.store.inbox().poll_after_cursor(&poll(&inbox, 2, 10)).await.unwrap();
        assert_eq!(page.events.first().map(|e| e.inbox_seq), Some(InboxSeq(3)));

        // Once 3 is acknowledged and old, the rest follows; new publishes continue the sequence.
        let again = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        h.store.inbox().acknowledge(&ack_of(&inbox, &again)).await.unwrap();
        h.clock.advance_ms(h.store.config().retention_ms + 1);
        assert_eq!(h.store.inbox().scavenge(100).await.unwrap().archived, 3);
        assert_eq!(h.store.inbox().head(&inbox).await.unwrap().oldest_available_seq, InboxSeq(6));
        assert_eq!(publish_to(h, "t1", "alpha", "{}").await.inbox_seq, InboxSeq(6));
        assert!(h.store.inbox().poll_after_cursor(&poll(&inbox, 5, 10)).await.is_ok());
    }
}

case! {
    /// Parked events can be listed, requeued with a fresh budget, quarantined and purged; live
    /// events are refused by requeue and purge.
    async fn operators_list_requeue_quarantine_and_purge(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let ids: Vec<EventId> = {
            let mut ids = Vec::new();
            for _ in 0..3 {
                ids.push(publish_to(h, "t1", "alpha", "{}").await.event_id);
            }
            ids
        };
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        h.store
            .inbox()
            .acknowledge(&ack_with(&inbox, claimed.event.event_id, &claimed.lease_token, AckResult::Failed))
            .await
            .unwrap();
        let request = QuarantineRequest {
            reason: "signature anomaly".into(),
            class: Some(QuarantineClass::BadSignature),
            actor: Actor::operator("ops").unwrap(),
        };
        let mut outcomes = h.store.inbox().quarantine(&inbox, &[ids[1]], &request).await.unwrap();
        let quarantined = outcomes.pop().unwrap().unwrap();
        assert_eq!(quarantined.state(), AckState::Quarantined);
        assert_eq!(quarantined.last_error.as_deref(), Some("signature anomaly"));
        let refused = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![ids[1]],
                lease_ms: None,
            })
            .await
            .unwrap();
        assert_eq!(refusal(&refused[0]), Refusal::Refused(RefusalReason::NotClaimable("quarantined")));

        let all = ParkedQuery { tenant_id: tenant("t1"), recipient: None, state: None, limit: 10 };
        assert_eq!(h.store.inbox().list_parked(&all).await.unwrap().len(), 2);
        let dead = ParkedQuery { state: Some(AckState::DeadLetter), ..all.clone() };
        assert_eq!(h.store.inbox().list_parked(&dead).await.unwrap()[0].event_id, ids[0]);
        assert_invalid(
            h.store.inbox().list_parked(&ParkedQuery { state: Some(AckState::Acked), ..all.clone() }).await, Field::ParkedState);
        assert!(
            h.store
                .inbox()
                .list_parked(&ParkedQuery { tenant_id: tenant("t2"), ..all.clone() })
                .await
                .unwrap()
                .is_empty()
        );

        let stats = h.store.inbox().inbox_stats(&tenant("t1"), 10).await.unwrap();
        assert_eq!(stats.len(), 1);
        assert_eq!(
            (stats[0].depth, stats[0].claimed, stats[0].parked, stats[0].head_seq),
            (1, 0, 2, InboxSeq(3))
        );
        assert!(stats[0].oldest_unacked_at.is_some());

        let outcomes = h.store.inbox().requeue(&inbox, &[ids[0], ids[2]], &Actor::operator("ops").unwrap()).await.unwrap();
        let requeued = outcomes[0].as_ref().unwrap();
        assert_eq!((requeued.state(), requeued.lifecycle.delivery_attempts), (AckState::Available, 1));
        assert_eq!(requeued.lifecycle.max_attempts, 1 + h.store.config().max_attempts_default);
        assert_eq!(refusal(&outcomes[1]), Refusal::Refused(RefusalReason::NotParked("available")));
        let again = h
            .store
            .inbox()
            .claim_by_ids(&ClaimByIds {
                inbox: inbox.clone(),
                session_id: None,
                event_ids: vec![ids[0]],
                lease_ms: None,
            })
            .await
            .unwrap();
        assert!(again[0].is_ok(), "a requeued event is claimable");

        let purged = h.store.inbox().purge(&inbox, &[ids[1], ids[2]]).await.unwrap();
        assert_eq!(purged[0].as_ref().unwrap(), &ids[1]);
        assert_eq!(refusal(&purged[1]), Refusal::Refused(RefusalReason::NotParked("available")));
        assert!(h.store.inbox().event(&inbox, ids[1]).await.unwrap().is_none());
        assert!(h.store.inbox().event(&inbox, ids[2]).await.unwrap().is_some());
    }
}

case! {
    /// An export pages through the rows archived before a time in key order, each with all its
    /// metadata; deleting the keys it read removes exactly those rows, and rows archived later stay.
    galera async fn cold_storage_pages_in_key_order_and_deletes_exactly_the_keys_given(h: &Harness) {
        assert_eq!(archive_acknowledged(h, &["alpha", "beta"], 7).await, 14);
        let before = h.store.now().plus_ms(1);
        h.clock.advance_ms(10);
        // Archived after `before`: must survive the export.
        assert_eq!(archive_acknowledged(h, &["gamma"], 3).await, 17);

        let mut rows = Vec::new();
        let mut after = None;
        loop {
            let page = h.store.inbox().archived_page(before, after.as_ref(), 4).await.unwrap();
            let Some(last) = page.last() else { break };
            after = Some(last.key.clone());
            rows.extend(page);
        }
        assert_eq!(rows.len(), 14);
        let keys: Vec<inbox_store::ArchiveKey> = rows.iter().map(|r| r.key.clone()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "pages come in key order without repeats");
        sorted.dedup();
        assert_eq!(sorted.len(), 14);
        let first = &rows[0].columns;
        assert_eq!(first["recipient_id"], "alpha");
        assert_eq!(first["ack_state"], "acked");
        assert_eq!(first["event_id"].as_str().map(str::len), Some(32), "binary ids as hex");
        assert!(first.contains_key("archived_at_utc") && first.contains_key("payload_json"));
        assert_eq!(inbox_store::archive_key_of_line(first).as_ref(), Some(&keys[0]));

        // Deleting half the keys removes exactly those; a key archived after `before` is kept.
        let (gone, kept) = keys.split_at(5);
        assert_eq!(h.store.inbox().delete_archived(before, gone).await.unwrap(), 5);
        assert_eq!(
            h.store.inbox().delete_archived(before, gone).await.unwrap(),
            0,
            "deleting again changes nothing"
        );
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await, 12);
        let left = h.store.inbox().archived_page(before, None, 100).await.unwrap();
        assert_eq!(left.iter().map(|r| r.key.clone()).collect::<Vec<_>>(), kept);
        let late = h.store.inbox().archived_page(h.store.now().plus_ms(1), None, 100).await.unwrap();
        let late_key = late.iter().find(|r| r.key.recipient_id == "gamma").unwrap().key.clone();
        assert_eq!(
            h.store.inbox().delete_archived(before, &[late_key]).await.unwrap(),
            0,
            "archived after the cut"
        );
    }
}

case! {
    /// The scavenger prunes archived rows once they are older than `archive_retention`, at most
    /// one batch per pass, and never younger ones.
    galera async fn scavenger_prunes_the_archive_after_archive_retention(h: &Harness) {
        assert_eq!(archive_acknowledged(h, &["alpha"], 6).await, 6);
        h.clock.advance_ms(h.store.config().archive_retention_ms - 1);
        assert_eq!(h.store.inbox().scavenge(4).await.unwrap().pruned, 0, "not old enough yet");
        h.clock.advance_ms(2);
        assert_eq!(h.store.inbox().scavenge(4).await.unwrap().pruned, 4, "one bounded batch");
        assert_eq!(h.store.inbox().scavenge(4).await.unwrap().pruned, 2);
        assert_eq!(h.scalar("SELECT COUNT(*) AS n FROM agent_inbox_archive", &[]).await, 0);
    }
}
