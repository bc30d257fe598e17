//! What operators read: an inbox's events by display state, the backlog numbers with the
//! agents' sessions, and a tenant's activity per minute from live and archived rows.

use inbox_conformance::Harness;
use inbox_conformance::vocabulary::{
    ack_of, ack_with, assert_invalid, claim_next, inbox_of, publish_to, quarantine_by_operator, tenant,
};
use inbox_core::{AckResult, Clock, InboxSeq, RecipientId, SessionId, UnixMillis};
use inbox_store::Field;
use inbox_store::{ACTIVITY_WINDOW_MS_MAX, EventState, EventsQuery, Release, SessionRecord};

fn events(inbox: &inbox_core::RecipientKey, state: Option<EventState>) -> EventsQuery {
    EventsQuery {
        inbox: inbox.clone(),
        state,
        after_seq: None,
        newest_first: false,
        before_seq: None,
        limit: 100,
    }
}

async fn seqs(h: &Harness, query: &EventsQuery) -> Vec<u64> {
    h.store.inbox().events(query).await.unwrap().iter().map(|e| e.inbox_seq.get()).collect()
}

case! {
    /// Each display state lists exactly its events, in sequence order, and pages after a seq.
    async fn events_are_listed_by_display_state(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for n in 0..7 {
            publish_to(h, "t1", "alpha", &format!("{{\"n\":{n}}}")).await;
        }
        publish_to(h, "t1", "beta", "{}").await;
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 5)).await.unwrap();
        // 1 acked, 2 dead letter, 3 quarantined, 4 retry scheduled, 5 claimed; 6, 7 available.
        h.store.inbox().acknowledge(&ack_of(&inbox, &claimed[0])).await.unwrap();
        let second = &claimed[1];
        h.store.inbox().acknowledge(&ack_with(&inbox, second.event.event_id, &second.lease_token, AckResult::Failed)).await.unwrap();
        h.store.inbox().quarantine(&inbox, &[claimed[2].event.event_id], &quarantine_by_operator("odd")).await.unwrap();
        let fourth = &claimed[3];
        let release = Release {
            inbox: inbox.clone(),
            event_id: fourth.event.event_id,
            lease_token: fourth.lease_token.clone(),
            retry_after_ms: 60_000,
            reason: None,
        };
        h.store.inbox().release(&release).await.unwrap();

        use EventState::*;
        for (state, expected) in [
            (Available, vec![6, 7]),
            (RetryScheduled, vec![4]),
            (Claimed, vec![5]),
            (Acked, vec![1]),
            (DeadLetter, vec![2]),
            (Quarantined, vec![3]),
            (Expired, vec![]),
        ] {
            assert_eq!(seqs(h, &events(&inbox, Some(state))).await, expected, "{}", state.as_str());
            assert_eq!(EventState::parse(state.as_str()), Some(state));
        }
        assert_eq!(seqs(h, &events(&inbox, None)).await, [1, 2, 3, 4, 5, 6, 7]);
        let page = EventsQuery { after_seq: Some(InboxSeq(2)), limit: 3, ..events(&inbox, None) };
        assert_eq!(seqs(h, &page).await, [3, 4, 5]);
        h.clock.advance_ms(60_000);
        assert_eq!(seqs(h, &events(&inbox, Some(Available))).await, [4, 6, 7], "the retry time has come");
        assert!(seqs(h, &events(&inbox_of("t2", "alpha"), None)).await.is_empty());
        assert_invalid(h.store.inbox().events(&EventsQuery { limit: 0, ..events(&inbox, None) }).await, Field::Limit);

        // Newest first: from the newest, then on before the last one listed, in any state.
        let newest = |before_seq: Option<u64>, limit, state| EventsQuery {
            newest_first: true,
            before_seq: before_seq.map(InboxSeq),
            limit,
            ..events(&inbox, state)
        };
        assert_eq!(seqs(h, &newest(None, 3, None)).await, [7, 6, 5]);
        assert_eq!(seqs(h, &newest(Some(5), 3, None)).await, [4, 3, 2]);
        assert_eq!(seqs(h, &newest(Some(2), 3, None)).await, [1]);
        assert_eq!(seqs(h, &newest(None, 10, Some(Available))).await, [7, 6, 4]);
        assert_eq!(seqs(h, &newest(Some(6), 10, Some(Available))).await, [4]);
        // Both bounds at once: the events between them, in either order.
        let between = EventsQuery { after_seq: Some(InboxSeq(2)), ..newest(Some(6), 10, None) };
        assert_eq!(seqs(h, &between).await, [5, 4, 3]);
        assert_eq!(seqs(h, &EventsQuery { newest_first: false, ..between }).await, [3, 4, 5]);
    }
}

case! {
    /// The backlog numbers count retry-scheduled events and the agent's sessions: online ones
    /// (neither gone nor superseded) and the newest sign of life.
    async fn inbox_stats_count_retries_and_online_sessions(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for _ in 0..3 {
            publish_to(h, "t1", "alpha", "{}").await;
        }
        publish_to(h, "t1", "beta", "{}").await;
        let open = |session: &str| SessionRecord {
            session_id: SessionId::new(session).unwrap(),
            tenant_id: tenant("t1"),
            agent_id: RecipientId::new("alpha").unwrap(),
            device_id: Some("laptop".into()),
            transport: "sse".into(),
            last_seen_seq: InboxSeq(0),
            auth_subject: "alpha".into(),
        };
        h.store.sessions().open(&open("s-old")).await.unwrap();
        h.clock.advance_ms(120_000);
        h.store.sessions().mark_silent_gone(h.clock.now().minus_ms(60_000)).await.unwrap();
        h.store.sessions().open(&open("s-new")).await.unwrap();
        let newest = h.clock.now();
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        let release = Release {
            inbox: inbox.clone(),
            event_id: claimed.event.event_id,
            lease_token: claimed.lease_token.clone(),
            retry_after_ms: 30_000,
            reason: None,
        };
        h.store.inbox().release(&release).await.unwrap();

        let stats = h.store.inbox().inbox_stats(&tenant("t1"), 10).await.unwrap();
        let alpha = stats.iter().find(|s| s.recipient.id.as_str() == "alpha").unwrap();
        assert_eq!((alpha.depth, alpha.claimed, alpha.retry_scheduled, alpha.parked), (3, 0, 1, 0));
        assert_eq!((alpha.online_sessions, alpha.last_seen_at), (1, Some(newest)), "s-old is gone");
        let beta = stats.iter().find(|s| s.recipient.id.as_str() == "beta").unwrap();
        assert_eq!((beta.depth, beta.retry_scheduled, beta.online_sessions, beta.last_seen_at), (1, 0, 0, None));
        h.clock.advance_ms(30_000);
        let stats = h.store.inbox().inbox_stats(&tenant("t1"), 10).await.unwrap();
        assert_eq!(stats.iter().find(|s| s.recipient.id.as_str() == "alpha").unwrap().retry_scheduled, 0);
    }
}

case! {
    /// Published and acknowledged events per minute, from the live table and the archive, for
    /// the tenant asked about only.
    async fn activity_counts_publishes_and_acks_per_minute(h: &Harness) {
        // Start on a minute boundary so the buckets are known.
        let start = h.clock.now();
        h.clock.advance_ms(60_000 - (start.get() % 60_000) as u64);
        let minute0 = h.clock.now();
        let inbox = inbox_of("t1", "alpha");
        for _ in 0..3 {
            publish_to(h, "t1", "alpha", "{}").await;
        }
        publish_to(h, "t2", "alpha", "{}").await;
        h.clock.advance_ms(61_000);
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
        for c in &claimed {
            h.store.inbox().acknowledge(&ack_of(&inbox, c)).await.unwrap();
        }
        publish_to(h, "t1", "alpha", "{}").await;
        let minute1 = UnixMillis(minute0.get() + 60_000);

        let activity = h.store.inbox().activity(&tenant("t1"), minute0).await.unwrap();
        let rows: Vec<(i64, u64, u64)> =
            activity.iter().map(|m| (m.minute_start.get(), m.published, m.acked)).collect();
        assert_eq!(rows, [(minute0.get(), 3, 0), (minute1.get(), 1, 2)]);
        let later = h.store.inbox().activity(&tenant("t1"), minute1).await.unwrap();
        assert_eq!(later.iter().map(|m| (m.published, m.acked)).collect::<Vec<_>>(), [(1, 2)]);

        // Archived rows still count while they are inside the window.
        let retention = h.store.config().retention_ms;
        let config = inbox_store::StoreConfig { retention_ms: 1_000, ..h.store.config().clone() };
        let short = inbox_store::SqlStore::connect_with_clock(
            &inbox_store::ConnectOptions::new(&h.url),
            config,
            h.clock.clone(),
        )
        .await
        .unwrap();
        h.clock.advance_ms(2_000);
        assert!(short.inbox().scavenge(100).await.unwrap().archived >= 1, "retention {retention} ms moved acked rows");
        let after = h.store.inbox().activity(&tenant("t1"), minute0).await.unwrap();
        assert_eq!(after, activity, "the archive's rows count the same");
        short.close().await;

        assert_invalid(
            h.store.inbox().activity(&tenant("t1"), h.clock.now().minus_ms(ACTIVITY_WINDOW_MS_MAX + 1)).await, Field::ActivityWindow);
    }
}
