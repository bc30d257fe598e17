//! Each event's history: every claim, acknowledgement, release, lease expiry, dead-lettering,
//! expiry, quarantine and requeue recorded once, in order, on the right row, by the fast paths,
//! the slow path and the scavenger alike; kept through retention into the archive; and not
//! recorded at all when turned off.

use inbox_conformance::vocabulary::{
    ack_of, ack_with, actions, claim_next, event, history_of, inbox_of, operator, publish_to,
    quarantine_by_operator,
};
use inbox_core::{AckResult, AckState, Clock, EventId, RecipientKey, SessionId};
use inbox_store::{
    AckItem, Acknowledge, Actor, ClaimByIds, ClaimNext, ConnectOptions, HISTORY_ENTRIES_MAX, HistoryAction,
    HistoryEntry, Release, SqlStore, StoreConfig,
};

/// An entry without its time: action, state, attempt, actor, session, reason.
type Step<'a> = (HistoryAction, AckState, u32, &'a str, Option<&'a str>, Option<&'a str>);

fn session(name: &str) -> SessionId {
    SessionId::new(name).unwrap()
}

fn release(inbox: &RecipientKey, claimed: &inbox_store::ClaimedEvent, reason: Option<&str>) -> Release {
    Release {
        inbox: inbox.clone(),
        event_id: claimed.event.event_id,
        lease_token: claimed.lease_token.clone(),
        retry_after_ms: 0,
        reason: reason.map(str::to_owned),
    }
}

fn claim_ids(inbox: &RecipientKey, ids: &[EventId], session_id: Option<SessionId>) -> ClaimByIds {
    ClaimByIds { inbox: inbox.clone(), session_id, event_ids: ids.to_vec(), lease_ms: Some(10_000) }
}

case! {
    /// Claim, release and acknowledge on their one-statement fast paths: each entry says when,
    /// what, the state and attempt after, the lease's session and the agent; a fan-out
    /// publish's other recipient's row records nothing of it.
    galera async fn fast_paths_record_each_transition_once_in_order(h: &Harness) {
        let (alpha, beta) = (inbox_of("t1", "alpha"), inbox_of("t1", "beta"));
        let receipt = h.store.inbox().publish(&event("t1", &["alpha", "beta"], "{}")).await.unwrap();
        let alpha_id = receipt.deliveries.iter().find(|d| d.recipient.id.as_str() == "alpha").unwrap().event_id;
        let beta_id = receipt.deliveries.iter().find(|d| d.recipient.id.as_str() == "beta").unwrap().event_id;

        let t0 = h.clock.now();
        let claim = ClaimNext { session_id: Some(session("s-1")), ..claim_next(&alpha, 1) };
        let first = h.store.inbox().claim_next(&claim).await.unwrap().remove(0);
        h.clock.advance_ms(5);
        let t1 = h.clock.now();
        let released = h.store.inbox().release(&release(&alpha, &first, Some("busy"))).await.unwrap();
        assert_eq!(released.state, AckState::Available);
        h.clock.advance_ms(5);
        let t2 = h.clock.now();
        let claim = ClaimNext { session_id: Some(session("s-2")), ..claim_next(&alpha, 1) };
        let second = h.store.inbox().claim_next(&claim).await.unwrap().remove(0);
        h.clock.advance_ms(5);
        let t3 = h.clock.now();
        h.store.inbox().acknowledge(&ack_of(&alpha, &second)).await.unwrap()[0].as_ref().unwrap();

        let entry = |at, action, state, attempt, session_id: &str| HistoryEntry {
            session_id: Some(session(session_id)),
            ..HistoryEntry::new(at, action, state, attempt, &Actor::Agent)
        };
        assert_eq!(
            history_of(h, &alpha, alpha_id).await,
            vec![
                entry(t0, HistoryAction::Claimed, AckState::Claimed, 1, "s-1"),
                HistoryEntry {
                    reason: Some("busy".into()),
                    ..entry(t1, HistoryAction::Released, AckState::Available, 1, "s-1")
                },
                entry(t2, HistoryAction::Claimed, AckState::Claimed, 2, "s-2"),
                entry(t3, HistoryAction::Acknowledged, AckState::Acked, 2, "s-2"),
            ]
        );
        assert!(history_of(h, &beta, beta_id).await.is_empty(), "only the recipient's row records it");

        // Claims by id and an acknowledge that names its session; a lease without a session.
        let id = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let by_id = h.store.inbox().claim_by_ids(&claim_ids(&alpha, &[id], None)).await.unwrap().remove(0).unwrap();
        let ack = Acknowledge { session_id: Some(session("s-3")), ..ack_of(&alpha, &by_id) };
        h.store.inbox().acknowledge(&ack).await.unwrap()[0].as_ref().unwrap();
        let history = history_of(h, &alpha, id).await;
        assert_eq!(actions(&history), [HistoryAction::Claimed, HistoryAction::Acknowledged]);
        assert_eq!(history[0].session_id, None, "the claim named no session");
        assert_eq!(history[1].session_id, Some(session("s-3")), "the acknowledging session is named");
        assert_eq!(history[1].attempt, 1);
    }
}

case! {
    /// The slow path and the scavenger: a lease that runs out, a release with no attempts left
    /// (its own entry, then `dead_lettered` with the reason), an operator's requeue, a failed
    /// acknowledgement, and expiry, whether the event waited or its lease ended past it.
    galera async fn slow_paths_and_the_scavenger_record_their_entries(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let mut p = event("t1", &["alpha"], "{}");
        p.max_attempts = Some(2);
        let id = h.store.inbox().publish(&p).await.unwrap().deliveries[0].event_id;

        let claims = |s: &'static str| claim_ids(&inbox, &[id], Some(session(s)));
        h.store.inbox().claim_by_ids(&claims("s-1")).await.unwrap().remove(0).unwrap();
        h.clock.advance_ms(10_000);
        assert_eq!(h.store.inbox().scavenge(100).await.unwrap().leases_returned, 1);
        h.clock.advance_ms(h.store.config().backoff.ceiling_ms);
        let second = h.store.inbox().claim_by_ids(&claims("s-2")).await.unwrap().remove(0).unwrap();
        let parked = h.store.inbox().release(&release(&inbox, &second, Some("gave up"))).await.unwrap();
        assert_eq!(parked.state, AckState::DeadLetter);
        let requeued = h.store.inbox().requeue(&inbox, &[id], &operator()).await.unwrap();
        assert_eq!(requeued[0].as_ref().unwrap().state(), AckState::Available);
        let third = h.store.inbox().claim_by_ids(&claims("s-3")).await.unwrap().remove(0).unwrap();
        let mut failed = ack_with(&inbox, id, &third.lease_token, AckResult::Failed);
        failed.items[0].reason = Some("schema v3 is not supported".into());
        h.store.inbox().acknowledge(&failed).await.unwrap()[0].as_ref().unwrap();

        let history = history_of(h, &inbox, id).await;
        let steps: Vec<Step> = history
            .iter()
            .map(|e| {
                (e.action, e.state, e.attempt, e.actor.as_str(), e.session_id.as_ref().map(SessionId::as_str), e.reason.as_deref())
            })
            .collect();
        use HistoryAction::*;
        assert_eq!(
            steps,
            [
                (Claimed, AckState::Claimed, 1, "agent", Some("s-1"), None),
                (LeaseExpired, AckState::Available, 1, "scavenger", Some("s-1"), None),
                (Claimed, AckState::Claimed, 2, "agent", Some("s-2"), None),
                (Released, AckState::DeadLetter, 2, "agent", Some("s-2"), Some("gave up")),
                (DeadLettered, AckState::DeadLetter, 2, "agent", None, Some("max_attempts_exceeded")),
                (Requeued, AckState::Available, 2, "operator:ops", None, None),
                (Claimed, AckState::Claimed, 3, "agent", Some("s-3"), None),
                (Acknowledged, AckState::DeadLetter, 3, "agent", Some("s-3"), Some("schema v3 is not supported")),
                (DeadLettered, AckState::DeadLetter, 3, "agent", None, Some("handler_failed")),
            ]
        );
        assert!(history.windows(2).all(|w| w[0].at <= w[1].at), "in the order they happened");

        // Expiry: one event waits past it; another's lease ends past it.
        let mut waiting = event("t1", &["alpha"], "{}");
        waiting.expires_at = Some(h.clock.now().plus_ms(30_000));
        let waiting = h.store.inbox().publish(&waiting).await.unwrap().deliveries[0].event_id;
        let mut held = event("t1", &["alpha"], "{}");
        held.expires_at = Some(h.clock.now().plus_ms(5_000));
        let held = h.store.inbox().publish(&held).await.unwrap().deliveries[0].event_id;
        h.store.inbox().claim_by_ids(&claim_ids(&inbox, &[held], None)).await.unwrap().remove(0).unwrap();
        h.clock.advance_ms(30_000);
        let report = h.store.inbox().scavenge(100).await.unwrap();
        assert_eq!(report.expired, 1);
        let waited = history_of(h, &inbox, waiting).await;
        assert_eq!(actions(&waited), [Expired]);
        assert_eq!((waited[0].state, waited[0].actor.as_str()), (AckState::Expired, "scavenger"));
        let ended = history_of(h, &inbox, held).await;
        assert_eq!(actions(&ended), [Claimed, LeaseExpired, Expired]);
        assert!(ended[1..].iter().all(|e| e.state == AckState::Expired));
    }
}

case! {
    /// Retention moves the history with the event: the detail view finds it in the archive,
    /// and the export carries it as the row's `history_json` column.
    async fn history_survives_retention_into_the_archive(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let id = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        h.store.inbox().acknowledge(&ack_of(&inbox, &claimed)).await.unwrap();
        let live = h.store.inbox().event_detail(&inbox, id).await.unwrap().unwrap();
        assert!(!live.archived);

        h.clock.advance_ms(h.store.config().retention_ms + 1);
        while h.store.inbox().scavenge(500).await.unwrap().archived > 0 {}
        let archived = h.store.inbox().event_detail(&inbox, id).await.unwrap().expect("the archive has it");
        assert!(archived.archived);
        assert_eq!(archived.history, live.history, "the same history, moved with the row");
        assert_eq!(actions(&archived.history), [HistoryAction::Claimed, HistoryAction::Acknowledged]);
        assert_eq!(archived.record.state(), AckState::Acked);
        assert!(h.store.inbox().event_detail(&inbox_of("t2", "alpha"), id).await.unwrap().is_none(), "another tenant's inbox does not");

        let page = h.store.inbox().archived_page(h.clock.now().plus_ms(1), None, 10).await.unwrap();
        let text = page[0].columns["history_json"].as_str().expect("the export carries the history");
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));
    }
}

case! {
    /// A rewrite by the slow path keeps only the newest entries, so a quarantine loop cannot
    /// grow the row without end.
    async fn the_slow_path_keeps_the_newest_entries(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        let id = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let rounds = HISTORY_ENTRIES_MAX / 3 + 2;
        for _ in 0..rounds {
            h.store.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
            let pulled = h.store.inbox().quarantine(&inbox, &[id], &quarantine_by_operator("look")).await.unwrap();
            assert_eq!(pulled[0].as_ref().unwrap().state(), AckState::Quarantined);
            h.store.inbox().release_quarantined(&inbox, &[id], &operator()).await.unwrap()[0].as_ref().unwrap();
        }
        let history = history_of(h, &inbox, id).await;
        assert_eq!(history.len(), HISTORY_ENTRIES_MAX);
        assert_eq!(history.last().unwrap().action, HistoryAction::ReleasedFromQuarantine);
        assert_eq!(history.last().unwrap().attempt as usize, rounds, "the newest are kept");
    }
}

case! {
    /// With `record_history` off nothing is written, and every transition still works: a
    /// second store on the same database, as the benchmark compares them.
    async fn history_is_not_recorded_when_turned_off(h: &Harness) {
        let config = StoreConfig { record_history: false, ..h.store.config().clone() };
        let quiet = SqlStore::connect_with_clock(&ConnectOptions::new(&h.url), config, h.clock.clone()).await.unwrap();
        let inbox = inbox_of("t1", "alpha");
        let id = publish_to(h, "t1", "alpha", "{}").await.event_id;
        let first = quiet.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        quiet.inbox().release(&release(&inbox, &first, None)).await.unwrap();
        let second = quiet.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        let item = AckItem { reason: Some("odd".into()), ..AckItem::new(id, second.lease_token.clone(), AckResult::Quarantined) };
        let ack = Acknowledge { inbox: inbox.clone(), session_id: None, items: vec![item] };
        assert_eq!(quiet.inbox().acknowledge(&ack).await.unwrap()[0].as_ref().unwrap().state, AckState::Quarantined);
        quiet.inbox().release_quarantined(&inbox, &[id], &operator()).await.unwrap()[0].as_ref().unwrap();
        let third = quiet.inbox().claim_next(&claim_next(&inbox, 1)).await.unwrap().remove(0);
        quiet.inbox().acknowledge(&ack_of(&inbox, &third)).await.unwrap()[0].as_ref().unwrap();
        let detail = quiet.inbox().event_detail(&inbox, id).await.unwrap().unwrap();
        assert_eq!(detail.record.state(), AckState::Acked);
        assert_eq!(detail.record.lifecycle.delivery_attempts, 3);
        assert!(detail.history.is_empty(), "nothing recorded: {:?}", detail.history);
        assert_eq!(
            h.scalar("SELECT COUNT(*) AS n FROM agent_inbox WHERE history_json IS NOT NULL", &[]).await,
            0
        );
        quiet.close().await;
    }
}
