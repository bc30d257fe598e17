//! Sessions, stream tickets and the single-active-session policy.

use inbox_conformance::Harness;
use inbox_conformance::vocabulary::{ack_of, claim_next, inbox_of, publish_to, tenant};
use inbox_core::{Clock, InboxSeq, Recipient, RecipientId, SessionId};
use inbox_store::Field;
use inbox_store::{SessionRecord, SessionStanding, SessionTouch, SignalKind, TenantPolicyChange};

fn record(session: &str, agent: &str) -> SessionRecord {
    SessionRecord {
        session_id: SessionId::new(session).unwrap(),
        tenant_id: tenant("t1"),
        agent_id: RecipientId::new(agent).unwrap(),
        device_id: None,
        transport: "sse".into(),
        last_seen_seq: InboxSeq(0),
        auth_subject: agent.into(),
    }
}

async fn standing(h: &Harness, agent: &str, session: &str) -> SessionStanding {
    h.store
        .sessions()
        .standing(&tenant("t1"), &RecipientId::new(agent).unwrap(), &SessionId::new(session).unwrap())
        .await
        .unwrap()
}

fn older(newest: &str) -> SessionStanding {
    SessionStanding::Older { newest: SessionId::new(newest).unwrap() }
}

async fn status(h: &Harness, session: &str) -> String {
    let superseded = h
        .scalar(
            "SELECT CASE status WHEN 'active' THEN 1 WHEN 'gone' THEN 2 WHEN 'superseded' THEN 3 ELSE 0 END AS n \
             FROM agent_session WHERE session_id = ?",
            &[session],
        )
        .await;
    ["?", "active", "gone", "superseded"][superseded as usize].to_owned()
}

case! {
    /// A stream ticket is redeemed once, on any node; an expired one never; a cookie credential
    /// until it expires.
    async fn stream_tickets_redeem_once_on_any_node(h: &Harness) {
        use inbox_store::{StreamCredential, StreamGrant};
        let grant = StreamGrant {
            tenant_id: tenant("t1"),
            subject: "alpha".into(),
            kind: "agent".into(),
            scope: "stream.subscribe inbox.claim".into(),
            session_id: Some(SessionId::new("sess_1").unwrap()),
        };
        let ticket = [7u8; 32];
        h.store
            .sessions()
            .insert_stream_credential(&ticket, StreamCredential::Ticket, &grant, 60_000)
            .await
            .unwrap();
        let second = h.second_node().await;
        let (a, b) = tokio::join!(
            h.store.sessions().redeem_stream_credential(&ticket, StreamCredential::Ticket),
            second.sessions().redeem_stream_credential(&ticket, StreamCredential::Ticket)
        );
        let winners: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(winners, vec![grant.clone()], "exactly one node redeems it");
        assert_eq!(
            h.store.sessions().redeem_stream_credential(&ticket, StreamCredential::Cookie).await.unwrap(),
            None
        );

        let late = [8u8; 32];
        h.store
            .sessions()
            .insert_stream_credential(&late, StreamCredential::Ticket, &grant, 60_000)
            .await
            .unwrap();
        let cookie = [9u8; 32];
        h.store
            .sessions()
            .insert_stream_credential(&cookie, StreamCredential::Cookie, &grant, 120_000)
            .await
            .unwrap();
        for _ in 0..2 {
            assert_eq!(
                h.store
                    .sessions()
                    .redeem_stream_credential(&cookie, StreamCredential::Cookie)
                    .await
                    .unwrap()
                    .as_ref(),
                Some(&grant),
                "a cookie is reusable"
            );
        }
        assert_eq!(
            h.store.sessions().redeem_stream_credential(&cookie, StreamCredential::Ticket).await.unwrap(),
            None
        );
        h.clock.advance_ms(60_001);
        assert_eq!(
            h.store.sessions().redeem_stream_credential(&late, StreamCredential::Ticket).await.unwrap(),
            None,
            "expired"
        );
        assert_eq!(h.store.sessions().delete_expired_stream_credentials(h.store.now()).await.unwrap(), 2);
        assert!(
            h.store
                .sessions()
                .redeem_stream_credential(&cookie, StreamCredential::Cookie)
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            h.store
                .sessions()
                .insert_stream_credential(&[1u8; 32], StreamCredential::Ticket, &grant, 0)
                .await
                .is_err(),
            "a credential must live a while"
        );
    }
}

case! {
    /// A touched session stays active and records its transport and progress; a silent one is
    /// swept as gone and a touch revives it; a stranger's touch finds nothing.
    async fn sessions_are_touched_and_swept(h: &Harness) {
        use inbox_store::{SessionRecord, SessionTouch};
        let session_id = SessionId::new("sess_touch").unwrap();
        let (t1, alpha) = (tenant("t1"), RecipientId::new("alpha").unwrap());
        h.store
            .sessions()
            .open(&SessionRecord {
                session_id: session_id.clone(),
                tenant_id: t1.clone(),
                agent_id: alpha.clone(),
                device_id: Some("laptop".into()),
                transport: "sse".into(),
                last_seen_seq: InboxSeq(4),
                auth_subject: "alpha".into(),
            })
            .await
            .unwrap();
        let touch = SessionTouch {
            session_id: &session_id,
            tenant_id: &t1,
            agent_id: &alpha,
            transport: Some("websocket"),
            last_seen_seq: Some(InboxSeq(2)),
        };
        h.clock.advance_ms(1_000);
        assert!(h.store.sessions().touch(&touch).await.unwrap());
        let status = || {
            h.scalar(
                "SELECT (CASE WHEN status = 'active' THEN 1 ELSE 0 END) * 1000 + last_seen_seq AS n \
                 FROM agent_session WHERE session_id = 'sess_touch'",
                &[],
            )
        };
        assert_eq!(status().await, 1_004, "active, and a lower last_seen_seq does not move it back");
        assert_eq!(
            h.scalar("SELECT COUNT(*) AS n FROM agent_session WHERE transport = 'websocket'", &[]).await,
            1
        );
        h.clock.advance_ms(100_000);
        assert_eq!(h.store.sessions().mark_silent_gone(h.store.now().minus_ms(90_000)).await.unwrap(), 1);
        assert_eq!(status().await, 4, "gone");
        assert!(
            h.store
                .sessions()
                .touch(&SessionTouch { last_seen_seq: Some(InboxSeq(9)), transport: None, ..touch.clone() })
                .await
                .unwrap()
        );
        assert_eq!(status().await, 1_009, "revived, with progress");
        assert!(
            h.store.sessions().touch(&touch).await.unwrap(),
            "a touch in the same millisecond still finds it"
        );
        let beta = RecipientId::new("beta").unwrap();
        assert!(!h.store.sessions().touch(&SessionTouch { agent_id: &beta, ..touch.clone() }).await.unwrap());
        assert!(
            h.store.sessions().touch(&SessionTouch { transport: Some("Bad Transport"), ..touch }).await.is_err()
        );
    }
}

case! {
    /// Every subscribe makes its session the agent's newest. Without the policy nothing else
    /// changes; with it, the agent's earlier sessions are marked superseded (touches do not revive
    /// them, the sweeper leaves them), one signal tells every node, and other agents are untouched.
    async fn a_subscribe_supersedes_earlier_sessions_under_the_policy(h: &Harness) {
        let opened = h.store.sessions().open(&record("sess_a1", "alpha")).await.unwrap();
        assert_eq!(opened.superseded, 0);
        assert_eq!(standing(h, "alpha", "sess_a1").await, SessionStanding::Newest);
        h.store.sessions().open(&record("sess_a2", "alpha")).await.unwrap();
        assert_eq!(standing(h, "alpha", "sess_a1").await, older("sess_a2"), "newest even without the policy");
        assert_eq!(standing(h, "alpha", "sess_a2").await, SessionStanding::Newest);
        assert_eq!(status(h, "sess_a1").await, "active", "no policy, nothing superseded");
        assert_eq!(standing(h, "beta", "sess_a1").await, SessionStanding::Unknown, "another agent's");
        assert_eq!(standing(h, "alpha", "sess_none").await, SessionStanding::Unknown);
        h.store.sessions().open(&record("sess_b1", "beta")).await.unwrap();

        // Policy changes keep the setting they do not name.
        let signed = TenantPolicyChange { signatures_required: Some(true), ..TenantPolicyChange::default() };
        h.store.signatures().change_tenant_policy(&tenant("t1"), signed).await.unwrap();
        let single = TenantPolicyChange { single_active_session: Some(true), ..TenantPolicyChange::default() };
        let policy = h.store.signatures().change_tenant_policy(&tenant("t1"), single).await.unwrap();
        assert!(policy.signatures_required && policy.single_active_session);
        assert_eq!(h.store.signatures().tenant_policy(&tenant("t1")).await.unwrap(), policy);
        assert!(!h.store.signatures().tenant_policy(&tenant("t2")).await.unwrap().single_active_session);

        let signals_before = h.store.signals().after(0, 100).await.unwrap().len();
        let opened = h.store.sessions().open(&record("sess_a3", "alpha")).await.unwrap();
        assert_eq!(opened.superseded, 2, "both earlier sessions of alpha");
        for old in ["sess_a1", "sess_a2"] {
            assert_eq!(status(h, old).await, "superseded");
            assert_eq!(standing(h, "alpha", old).await, older("sess_a3"));
            let by = h
                .scalar(
                    "SELECT COUNT(*) AS n FROM agent_session WHERE session_id = ? \
                     AND superseded_by_session_id = 'sess_a3' AND superseded_at_utc IS NOT NULL",
                    &[old],
                )
                .await;
            assert_eq!(by, 1, "{old} records who took over, and when");
        }
        assert_eq!(
            (status(h, "sess_b1").await, standing(h, "beta", "sess_b1").await),
            ("active".into(), SessionStanding::Newest)
        );

        // Every node reads the signal; it names the agent and moves no head.
        let signals = h.second_node().await.signals().after(0, 100).await.unwrap();
        assert_eq!(signals.len(), signals_before + 1);
        let signal = signals.last().unwrap();
        assert_eq!(signal.kind, SignalKind::SessionSuperseded);
        assert_eq!(signal.heads, vec![(Recipient::agent(RecipientId::new("alpha").unwrap()), InboxSeq(0))]);

        // A superseded session stays superseded: touched (an old stream beating) or swept.
        let alpha = RecipientId::new("alpha").unwrap();
        let a1 = SessionId::new("sess_a1").unwrap();
        let touch = SessionTouch {
            session_id: &a1,
            tenant_id: &tenant("t1"),
            agent_id: &alpha,
            transport: None,
            last_seen_seq: Some(InboxSeq(3)),
        };
        assert!(h.store.sessions().touch(&touch).await.unwrap(), "it still exists");
        assert_eq!(status(h, "sess_a1").await, "superseded");
        h.clock.advance_ms(100_000);
        assert_eq!(
            h.store.sessions().mark_silent_gone(h.store.now().minus_ms(90_000)).await.unwrap(),
            2,
            "a3 and b1"
        );
        assert_eq!(status(h, "sess_a2").await, "superseded");
        assert_eq!(standing(h, "alpha", "sess_a3").await, SessionStanding::Newest, "gone is not superseded");

        // The next subscribe supersedes only what is not superseded yet, and writes one signal.
        assert_eq!(h.store.sessions().open(&record("sess_a4", "alpha")).await.unwrap().superseded, 1);
        assert_eq!(h.store.signals().after(0, 100).await.unwrap().len(), signals_before + 2);
    }
}

case! {
    /// Concurrent subscribes of one agent on two nodes leave exactly one newest session; each
    /// superseded the one before it, so every other session is superseded exactly once.
    async fn concurrent_subscribes_leave_one_newest_session(h: &Harness) {
        const SUBSCRIBES: usize = 8;
        let single = TenantPolicyChange { single_active_session: Some(true), ..TenantPolicyChange::default() };
        h.store.signatures().change_tenant_policy(&tenant("t1"), single).await.unwrap();
        let other = h.second_node().await;
        let mut tasks = Vec::new();
        for n in 0..SUBSCRIBES {
            let store = if n % 2 == 0 { h.store.clone() } else { other.clone() };
            tasks.push(tokio::spawn(async move {
                store.sessions().open(&record(&format!("sess_c{n}"), "alpha")).await.unwrap().superseded
            }));
        }
        let mut superseded = 0;
        for task in tasks {
            superseded += task.await.unwrap();
        }
        assert_eq!(superseded, SUBSCRIBES as u64 - 1, "each subscribe superseded exactly its predecessor");
        let mut newest = Vec::new();
        for n in 0..SUBSCRIBES {
            let session = format!("sess_c{n}");
            match standing(h, "alpha", &session).await {
                SessionStanding::Newest => newest.push(session),
                SessionStanding::Older { .. } => assert_eq!(status(h, &session).await, "superseded"),
                SessionStanding::Unknown => panic!("{session} was lost"),
            }
        }
        assert_eq!(newest.len(), 1, "one newest session: {newest:?}");
        assert_eq!(status(h, &newest[0]).await, "active");
    }
}

case! {
    /// Open events page after a sequence in sequence order; acknowledged ones are left out.
    async fn open_events_page_after_a_sequence(h: &Harness) {
        let inbox = inbox_of("t1", "alpha");
        for n in 0..5 {
            publish_to(h, "t1", "alpha", &format!("{{\"n\":{n}}}")).await;
        }
        let claimed = h.store.inbox().claim_next(&claim_next(&inbox, 2)).await.unwrap();
        h.store.inbox().acknowledge(&ack_of(&inbox, &claimed[1])).await.unwrap();
        let page = |after: u64, limit: u32| {
            let inbox = inbox.clone();
            async move {
                let (events, more) = h.store.inbox().open_events(&inbox, InboxSeq(after), limit).await.unwrap();
                (events.iter().map(|e| e.inbox_seq.get()).collect::<Vec<_>>(), more)
            }
        };
        assert_eq!(page(0, 2).await, (vec![1, 3], true), "claimed 1 is open, acked 2 is not");
        assert_eq!(page(3, 2).await, (vec![4, 5], false));
        assert_eq!(page(5, 2).await, (vec![], false));
        assert_eq!(page(0, 500).await, (vec![1, 3, 4, 5], false));
    }
}

case! {
    /// Operators list a tenant's sessions (or one agent's), most recently heard from first,
    /// with device, transport, status and who superseded whom.
    async fn sessions_are_listed_for_operators(h: &Harness) {
        let policy = TenantPolicyChange { single_active_session: Some(true), ..Default::default() };
        h.store.signatures().change_tenant_policy(&tenant("t1"), policy).await.unwrap();
        let opened_at = h.clock.now();
        h.store.sessions().open(&SessionRecord { device_id: Some("laptop".into()), ..record("s-1", "alpha") }).await.unwrap();
        h.clock.advance_ms(1_000);
        h.store.sessions().open(&record("s-2", "alpha")).await.unwrap();
        h.clock.advance_ms(1_000);
        h.store.sessions().open(&record("s-3", "beta")).await.unwrap();
        h.store.sessions().open(&SessionRecord { tenant_id: tenant("t2"), ..record("s-4", "alpha") }).await.unwrap();

        let all = h.store.sessions().list(&tenant("t1"), None, 10).await.unwrap();
        let ids: Vec<&str> = all.iter().map(|s| s.session_id.as_str()).collect();
        assert_eq!(ids, ["s-3", "s-2", "s-1"], "newest sign of life first, this tenant only");
        let first = &all[2];
        assert_eq!((first.agent_id.as_str(), first.device_id.as_deref(), first.transport.as_str()), ("alpha", Some("laptop"), "sse"));
        assert_eq!((first.connected_at, first.status.as_str()), (opened_at, "superseded"));
        assert_eq!(first.superseded_by.as_ref().map(SessionId::as_str), Some("s-2"));
        assert_eq!(first.superseded_at, Some(opened_at.plus_ms(1_000)));
        assert_eq!((all[1].status.as_str(), all[1].superseded_by.as_ref()), ("active", None));

        let alpha = h.store.sessions().list(&tenant("t1"), Some(&RecipientId::new("alpha").unwrap()), 1).await.unwrap();
        assert_eq!(alpha.iter().map(|s| s.session_id.as_str()).collect::<Vec<_>>(), ["s-2"]);
        assert!(matches!(
            h.store.sessions().list(&tenant("t1"), None, 0).await,
            Err(inbox_store::StoreError::Invalid { field: Field::Limit, .. })
        ));
    }
}
