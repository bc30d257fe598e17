//! A2A tasks: a message and its inbox event commit together and a repeat answers the first; an
//! agent's report moves the task with its acknowledgement, only while the lease holds; what
//! the inbox does to the event (claims, plain acknowledgements, dead letters, quarantines)
//! the reconciler turns into the task's state; cancellation, the next turn of a task waiting
//! for input, listing, and push configs' delivery state.

use inbox_conformance::Harness;
use inbox_conformance::vocabulary::{ack_with, agent_id, claim_next, inbox_of, poll, tenant};
use inbox_core::{AckResult, AckState, EventType, LeaseToken, RefusalReason, UnixMillis};
use inbox_store::{
    CancelRefusal, ClaimedEvent, NewPushConfig, PushResult, Refusal, Report, ReportRefusal, SendMessage,
    SendRefusal, SendTarget, Sent, Task, TaskId, TaskOutcome, TaskQuery, TaskState, UpdateKind,
};
use serde_json::{Value, json};

fn message(id: &str, text: &str) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

fn send_new(h: &Harness, sender: &str, message_id: &str) -> SendMessage {
    SendMessage {
        tenant_id: tenant("t1"),
        agent_id: agent_id("alpha"),
        sender_id: agent_id(sender),
        message_id: message_id.to_owned(),
        message: message(message_id, "do it"),
        event_type: EventType::new("a2a.message").unwrap(),
        target: SendTarget::New { task_id: TaskId::new(h.store.now()), context_id: "ctx-1".to_owned() },
        push: None,
        fairness_key: None,
    }
}

async fn sent(h: &Harness, send: &SendMessage) -> Sent {
    h.store.a2a().send(send).await.unwrap().unwrap()
}

async fn claim(h: &Harness) -> ClaimedEvent {
    h.store.inbox().claim_next(&claim_next(&inbox_of("t1", "alpha"), 1)).await.unwrap().remove(0)
}

fn report(claimed: &ClaimedEvent, token: &LeaseToken, result: AckResult, outcome: TaskOutcome) -> Report {
    Report {
        inbox: inbox_of("t1", "alpha"),
        session_id: None,
        event_id: claimed.event.event_id,
        lease_token: token.clone(),
        result,
        reason: None,
        class: None,
        outcome,
    }
}

fn completed(text: &str) -> TaskOutcome {
    TaskOutcome {
        state: TaskState::Completed,
        message: Some(json!({"messageId": "r1", "role": "ROLE_AGENT", "parts": [{"text": "done"}]})),
        note: None,
        artifacts: vec![json!({"artifactId": "a1", "parts": [{"text": text}]})],
    }
}

async fn task(h: &Harness, task: &Task) -> Task {
    h.store.a2a().task(&tenant("t1"), &task.task_id).await.unwrap().expect("the task exists")
}

async fn kinds(h: &Harness, task: &Task) -> Vec<(UpdateKind, TaskState)> {
    let updates = h.store.a2a().updates_after(&tenant("t1"), &task.task_id, 0, 100).await.unwrap();
    updates.iter().map(|u| (u.kind, u.state)).collect()
}

case! {
    /// A message makes a submitted task and one inbox event carrying it, in one transaction;
    /// the same message again (same sender and messageId) answers that task and publishes
    /// nothing; another sender's message of the same id is a message of its own.
    async fn a_message_makes_one_task_and_one_event_however_often_it_is_sent(h: &Harness) {
        let first = sent(h, &send_new(h, "client", "m-1")).await;
        assert!(!first.repeated);
        assert_eq!(first.task.state(), TaskState::Submitted);
        assert_eq!((first.task.last_seq, first.task.history.len()), (1, 1));
        assert_eq!(first.task.history[0]["taskId"], first.task.task_id.as_str());
        assert_eq!(first.task.history[0]["contextId"], "ctx-1");
        let events = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", "alpha"), 0, 10)).await.unwrap().events;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_id, first.event_id);
        assert_eq!(events[0].event_type.as_str(), "a2a.message");
        let inbox_core::EventBody::Json(body) = &events[0].body else { panic!("an inline payload") };
        let payload: Value = serde_json::from_str(body).unwrap();
        assert_eq!(payload["task_id"], first.task.task_id.as_str());
        assert_eq!((payload["sender_id"].as_str(), payload["message"]["parts"][0]["text"].as_str()), (Some("client"), Some("do it")));
        assert_eq!(kinds(h, &first.task).await, vec![(UpdateKind::Task, TaskState::Submitted)]);

        let again = sent(h, &send_new(h, "client", "m-1")).await;
        assert!(again.repeated && again.receipt.is_none());
        assert_eq!((again.task.task_id.clone(), again.event_id), (first.task.task_id.clone(), first.event_id));
        let other = sent(h, &send_new(h, "someone_else", "m-1")).await;
        assert!(!other.repeated);
        assert_ne!(other.task.task_id, first.task.task_id);
        let events = h.store.inbox().poll_after_cursor(&poll(&inbox_of("t1", "alpha"), 0, 10)).await.unwrap().events;
        assert_eq!(events.len(), 2, "one event per distinct message");
    }
}

case! {
    /// The report and the acknowledgement commit together, only under the live lease: a
    /// foreign token and a lease past its end change neither; the holder of the live lease
    /// completes the task with its artifact and message; a repeat answers the same.
    async fn a_report_moves_its_task_with_the_acknowledgement_only_while_the_lease_holds(h: &Harness) {
        let first = sent(h, &send_new(h, "client", "m-1")).await;
        let held = claim(h).await;
        let moved = h.store.a2a().mark_working(&tenant("t1"), &[held.event.event_id]).await.unwrap();
        assert_eq!(moved.len(), 1);
        assert_eq!(task(h, &first.task).await.state(), TaskState::Working);

        let foreign = LeaseToken::from_random([7; 16]);
        let refused = h.store.a2a().report(&report(&held, &foreign, AckResult::Completed, completed("x"))).await.unwrap();
        assert!(matches!(refused, Err(ReportRefusal::Event(ref r)) if r.reason == Refusal::Refused(RefusalReason::LeaseMismatch)), "{refused:?}");

        h.clock.advance_ms(61_000);
        let lapsed = h.store.a2a().report(&report(&held, &held.lease_token, AckResult::Completed, completed("late"))).await.unwrap();
        assert!(matches!(lapsed, Err(ReportRefusal::Event(ref r)) if r.reason == Refusal::Refused(RefusalReason::LeaseExpired)), "{lapsed:?}");
        assert_eq!(task(h, &first.task).await.state(), TaskState::Working, "nothing of a refused report commits");

        // The lease ran out: the event goes back, another worker takes it and finishes it.
        h.store.inbox().scavenge(100).await.unwrap();
        h.clock.advance_ms(600_000);
        let again = claim(h).await;
        assert_eq!(again.event.event_id, held.event.event_id);
        let stale = h.store.a2a().report(&report(&held, &held.lease_token, AckResult::Completed, completed("stale"))).await.unwrap();
        assert!(stale.is_err(), "the first worker's lease is stale: {stale:?}");
        let done = h.store.a2a().report(&report(&again, &again.lease_token, AckResult::Completed, completed("result"))).await.unwrap().unwrap();
        assert_eq!(done.ack.state, AckState::Acked);
        let after = done.task.unwrap();
        assert_eq!(after.state(), TaskState::Completed);
        assert_eq!(after.artifacts, vec![json!({"artifactId": "a1", "parts": [{"text": "result"}]})]);
        assert_eq!(after.status.message.as_ref().unwrap()["messageId"], "r1");
        assert_eq!(after.history.len(), 2, "the user's message and the agent's");
        assert_eq!(
            kinds(h, &first.task).await,
            vec![
                (UpdateKind::Task, TaskState::Submitted),
                (UpdateKind::Status, TaskState::Working),
                (UpdateKind::Artifact, TaskState::Working),
                (UpdateKind::Status, TaskState::Completed),
            ]
        );
        let repeat = h.store.a2a().report(&report(&again, &again.lease_token, AckResult::Completed, completed("result"))).await.unwrap().unwrap();
        assert_eq!(repeat.task.unwrap().last_seq, after.last_seq, "a repeat changes nothing");
        let stored = h.store.inbox().event(&inbox_of("t1", "alpha"), held.event.event_id).await.unwrap().unwrap();
        assert_eq!(stored.state(), AckState::Acked);
    }
}

case! {
    /// An acknowledgement without a report completes the task; a failed result fails it with
    /// the reason; an operator's quarantine rejects it; each after the reconciler's pass, and a
    /// report named for an event acknowledged without one is refused.
    async fn the_reconciler_follows_what_the_inbox_did_to_the_event(h: &Harness) {
        let a = inbox_of("t1", "alpha");
        let plain = sent(h, &send_new(h, "client", "plain")).await;
        let failed = sent(h, &send_new(h, "client", "failed")).await;
        let parked = sent(h, &send_new(h, "client", "parked")).await;
        let claims = h.store.inbox().claim_next(&claim_next(&a, 2)).await.unwrap();
        let [first, second] = [&claims[0], &claims[1]];
        h.store.inbox().acknowledge(&ack_with(&a, first.event.event_id, &first.lease_token, AckResult::Completed)).await.unwrap();
        let mut failure = ack_with(&a, second.event.event_id, &second.lease_token, AckResult::Failed);
        failure.items[0].reason = Some("no such city".to_owned());
        h.store.inbox().acknowledge(&failure).await.unwrap();
        let actor = inbox_conformance::vocabulary::quarantine_by_operator("looks like an injection");
        h.store.inbox().quarantine(&a, &[parked.event_id], &actor).await.unwrap();

        let report = h.store.a2a().reconcile(100).await.unwrap();
        assert_eq!(report.moved.len(), 3, "{report:?}");
        assert_eq!(task(h, &plain.task).await.state(), TaskState::Completed);
        let failed_now = task(h, &failed.task).await;
        assert_eq!(failed_now.state(), TaskState::Failed);
        assert!(failed_now.status.note.as_deref().unwrap().contains("no such city"), "{:?}", failed_now.status);
        let rejected = task(h, &parked.task).await;
        assert_eq!(rejected.state(), TaskState::Rejected);
        assert!(rejected.status.note.as_deref().unwrap().contains("looks like an injection"));
        assert_eq!(h.store.a2a().reconcile(100).await.unwrap().moved.len(), 0, "a second pass has nothing to do");

        let late = h.store.a2a().report(&report_of(first)).await.unwrap();
        assert!(matches!(late, Err(ReportRefusal::Event(ref r)) if r.reason == Refusal::Refused(RefusalReason::Terminal("acked"))), "{late:?}");

        // A claim the reconciler did not hear of still makes its task working.
        let waiting = sent(h, &send_new(h, "client", "claimed")).await;
        claim(h).await;
        h.store.a2a().reconcile(100).await.unwrap();
        assert_eq!(task(h, &waiting.task).await.state(), TaskState::Working);
    }
}

fn report_of(claimed: &ClaimedEvent) -> Report {
    report(claimed, &claimed.lease_token, AckResult::Completed, completed("late"))
}

case! {
    /// A task no agent took yet is canceled and its event expired, so no agent runs it; one an
    /// agent holds is canceled, its acknowledgement taken and its report dropped; canceling
    /// again answers the canceled task; a finished task is not cancelable.
    async fn canceling_stops_unclaimed_work_and_outlives_claimed_work(h: &Harness) {
        let a = inbox_of("t1", "alpha");
        let waiting = sent(h, &send_new(h, "client", "waiting")).await;
        let canceled = h.store.a2a().cancel(&tenant("t1"), &waiting.task.task_id, "client").await.unwrap().unwrap();
        assert_eq!(canceled.state(), TaskState::Canceled);
        let event = h.store.inbox().event(&a, waiting.event_id).await.unwrap().unwrap();
        assert_eq!(event.state(), AckState::Expired);
        assert!(h.store.inbox().claim_next(&claim_next(&a, 10)).await.unwrap().is_empty(), "nothing left to run");
        let again = h.store.a2a().cancel(&tenant("t1"), &waiting.task.task_id, "client").await.unwrap().unwrap();
        assert_eq!(again.last_seq, canceled.last_seq, "a repeat changes nothing");

        let running = sent(h, &send_new(h, "client", "running")).await;
        let held = claim(h).await;
        h.store.a2a().cancel(&tenant("t1"), &running.task.task_id, "client").await.unwrap().unwrap();
        let done = h.store.a2a().report(&report_of(&held)).await.unwrap().unwrap();
        assert_eq!(done.ack.state, AckState::Acked, "the agent's acknowledgement is taken");
        assert_eq!(task(h, &running.task).await.state(), TaskState::Canceled, "the task stays canceled");
        h.store.a2a().reconcile(100).await.unwrap();
        assert_eq!(task(h, &running.task).await.state(), TaskState::Canceled);

        let finished = sent(h, &send_new(h, "client", "finished")).await;
        let held = claim(h).await;
        h.store.a2a().report(&report_of(&held)).await.unwrap().unwrap();
        let refused = h.store.a2a().cancel(&tenant("t1"), &finished.task.task_id, "client").await.unwrap();
        assert_eq!(refused.unwrap_err(), CancelRefusal::NotCancelable(TaskState::Completed));
        let unknown = TaskId::new(h.store.now());
        assert_eq!(h.store.a2a().cancel(&tenant("t1"), &unknown, "client").await.unwrap().unwrap_err(), CancelRefusal::NotFound);
    }
}

case! {
    /// An agent that asks for input leaves the task waiting; the client's next message with the
    /// task's id is a new event for the same task; a task not waiting, a finished one, another
    /// sender's and a mismatching context are refused.
    async fn a_task_waiting_for_input_continues_with_the_next_message(h: &Harness) {
        let first = sent(h, &send_new(h, "client", "m-1")).await;
        let continue_with = |id: &str, context: Option<&str>| SendMessage {
            target: SendTarget::Continue { task_id: first.task.task_id.clone(), context_id: context.map(str::to_owned) },
            message: message(id, "more"),
            message_id: id.to_owned(),
            ..send_new(h, "client", id)
        };
        let busy = h.store.a2a().send(&continue_with("m-2", None)).await.unwrap();
        assert_eq!(busy.unwrap_err(), SendRefusal::NotAwaitingInput(TaskState::Submitted));
        let held = claim(h).await;
        let asking = TaskOutcome { state: TaskState::InputRequired, message: None, note: None, artifacts: Vec::new() };
        h.store.a2a().report(&report(&held, &held.lease_token, AckResult::Completed, asking)).await.unwrap().unwrap();
        assert_eq!(task(h, &first.task).await.state(), TaskState::InputRequired);

        let mismatch = h.store.a2a().send(&continue_with("m-2", Some("ctx-other"))).await.unwrap();
        assert_eq!(mismatch.unwrap_err(), SendRefusal::ContextMismatch { context_id: "ctx-1".to_owned() });
        let stranger = SendMessage { sender_id: agent_id("stranger"), ..continue_with("m-2", None) };
        assert_eq!(h.store.a2a().send(&stranger).await.unwrap().unwrap_err(), SendRefusal::TaskNotFound);

        let next = sent(h, &continue_with("m-2", Some("ctx-1"))).await;
        assert_eq!(next.task.task_id, first.task.task_id);
        assert_ne!(next.event_id, first.event_id);
        assert_eq!(next.task.state(), TaskState::Submitted);
        assert_eq!(next.task.history.len(), 2);
        let held = claim(h).await;
        assert_eq!(held.event.event_id, next.event_id);
        h.store.a2a().report(&report_of(&held)).await.unwrap().unwrap();
        let over = h.store.a2a().send(&continue_with("m-3", None)).await.unwrap();
        assert_eq!(over.unwrap_err(), SendRefusal::Terminal(TaskState::Completed));
    }
}

case! {
    /// A sender's tasks of an agent, newest status first, by page, with filters and a count;
    /// an operator's query (no sender) sees every sender's.
    async fn tasks_list_newest_first_by_page(h: &Harness) {
        let mut ids = Vec::new();
        for n in 0..5 {
            h.clock.advance_ms(10);
            ids.push(sent(h, &send_new(h, "client", &format!("m-{n}"))).await.task.task_id);
        }
        h.clock.advance_ms(10);
        sent(h, &send_new(h, "other", "theirs")).await;
        let query = |cursor| TaskQuery {
            tenant_id: tenant("t1"),
            agent_id: agent_id("alpha"),
            sender_id: Some(agent_id("client")),
            context_id: None,
            state: None,
            changed_after: None,
            cursor,
            limit: 2,
        };
        let first = h.store.a2a().list(&query(None)).await.unwrap();
        assert_eq!(first.total, 5);
        assert_eq!(first.tasks.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>(), vec![ids[4].clone(), ids[3].clone()]);
        let second = h.store.a2a().list(&query(first.next.clone())).await.unwrap();
        assert_eq!(second.tasks[0].task_id, ids[2]);
        let last = h.store.a2a().list(&query(second.next)).await.unwrap();
        assert_eq!((last.tasks.len(), last.next), (1, None));

        let everyone = TaskQuery { sender_id: None, limit: 100, ..query(None) };
        assert_eq!(h.store.a2a().list(&everyone).await.unwrap().total, 6);
        let by_state = TaskQuery { state: Some(TaskState::Working), ..everyone.clone() };
        assert_eq!(h.store.a2a().list(&by_state).await.unwrap().total, 0);
        let by_context = TaskQuery { context_id: Some("ctx-1".into()), ..everyone.clone() };
        assert_eq!(h.store.a2a().list(&by_context).await.unwrap().total, 6);
        let recent = TaskQuery { changed_after: Some(UnixMillis(h.store.now().get() - 15)), ..everyone };
        assert_eq!(h.store.a2a().list(&recent).await.unwrap().total, 2);
    }
}

case! {
    /// A push config gets the updates after the one newest when it was made, one node at a
    /// time: due after each change of its task, held by one claim, let go with the outcome,
    /// idle once caught up; its token comes back opened; a task has at most so many configs.
    async fn push_configs_are_due_after_each_update_and_held_by_one_node(h: &Harness) {
        let first = sent(h, &send_new(h, "client", "m-1")).await;
        let config = |id: &str| NewPushConfig {
            tenant_id: tenant("t1"),
            task_id: first.task.task_id.clone(),
            config_id: id.to_owned(),
            url: "https://client.example.net/hook".to_owned(),
            token: "tok-1".to_owned(),
            auth_scheme: Some("Bearer".to_owned()),
            credentials: Some("secret-credential".to_owned()),
        };
        let created = h.store.a2a().create_push(&config("p1")).await.unwrap().unwrap().unwrap();
        assert_eq!((created.token.as_str(), created.delivered_seq), ("tok-1", 1));
        assert!(h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap().is_empty(), "nothing new yet");

        let held = claim(h).await;
        h.store.a2a().mark_working(&tenant("t1"), &[held.event.event_id]).await.unwrap();
        let due = h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].config.credentials.as_deref(), due[0].last_seq), (Some("secret-credential"), 2));
        let lease = h.store.now().plus_ms(30_000);
        assert!(h.store.a2a().claim_push(&due[0].config, lease).await.unwrap());
        assert!(!h.store.a2a().claim_push(&due[0].config, lease).await.unwrap(), "held by the first claim");
        assert!(h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap().is_empty());
        let failure = PushResult::Failed { seq: 1, error: "no answer".into(), next_attempt_at: h.store.now().plus_ms(1_000),
            attempts: 1, give_up: false };
        assert!(h.store.a2a().finish_push(&due[0].config, lease, &failure).await.unwrap());
        assert!(h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap().is_empty(), "backing off");
        h.clock.advance_ms(1_000);
        let due = h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap();
        assert_eq!(due[0].config.failed_attempts, 1);
        let lease = h.store.now().plus_ms(30_000);
        assert!(h.store.a2a().claim_push(&due[0].config, lease).await.unwrap());
        assert!(h.store.a2a().finish_push(&due[0].config, lease, &PushResult::Delivered { seq: 2 }).await.unwrap());
        assert!(h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap().is_empty(), "caught up");
        let stored = h.store.a2a().push_config(&tenant("t1"), &first.task.task_id, "p1").await.unwrap().unwrap();
        assert_eq!((stored.delivered_seq, stored.failed_attempts, stored.consecutive_failures), (2, 0, 0));

        h.store.a2a().report(&report_of(&held)).await.unwrap().unwrap();
        assert_eq!(h.store.a2a().due_pushes(h.store.now(), 10).await.unwrap()[0].last_seq, 4, "artifact and status");

        for n in 2..=inbox_store::PUSH_CONFIGS_PER_TASK_MAX {
            h.store.a2a().create_push(&config(&format!("p{n}"))).await.unwrap().unwrap();
        }
        let over = h.store.a2a().create_push(&config("one-too-many")).await.unwrap();
        assert_eq!(over.unwrap_err(), inbox_store::PUSH_CONFIGS_PER_TASK_MAX);
        let replaced = NewPushConfig { url: "https://client.example.net/other".into(), ..config("p1") };
        let replaced = h.store.a2a().create_push(&replaced).await.unwrap().unwrap().unwrap();
        assert_eq!(replaced.url, "https://client.example.net/other", "an id named again is replaced");
        let listed = h.store.a2a().push_configs(&tenant("t1"), &first.task.task_id, None, 100).await.unwrap();
        assert_eq!(listed.len(), inbox_store::PUSH_CONFIGS_PER_TASK_MAX);
        assert!(h.store.a2a().delete_push(&tenant("t1"), &first.task.task_id, "p1").await.unwrap());
        assert!(!h.store.a2a().delete_push(&tenant("t1"), &first.task.task_id, "p1").await.unwrap());
        let census = h.store.secrets().census().await.unwrap();
        assert_eq!(census.not_under(&h.store.secrets().sealing_key_id().await.unwrap()), 0, "sealed, every one");
    }
}

case! {
    /// A task finished before the cut-off goes with its log, messages and push configs (its
    /// messageId may then be sent again); an open task stays however old it is.
    async fn finished_tasks_are_pruned_with_everything_they_kept(h: &Harness) {
        let done = sent(h, &send_new(h, "client", "old")).await;
        let held = claim(h).await;
        h.store.a2a().report(&report_of(&held)).await.unwrap().unwrap();
        let waiting = sent(h, &send_new(h, "client", "open")).await;
        h.clock.advance_ms(10_000);
        assert_eq!(h.store.a2a().prune(UnixMillis(h.store.now().get() - 20_000), 10).await.unwrap(), 0, "too recent");
        assert_eq!(h.store.a2a().prune(h.store.now(), 10).await.unwrap(), 1);
        assert!(h.store.a2a().task(&tenant("t1"), &done.task.task_id).await.unwrap().is_none());
        assert!(h.store.a2a().updates_after(&tenant("t1"), &done.task.task_id, 0, 10).await.unwrap().is_empty());
        assert_eq!(task(h, &waiting.task).await.state(), TaskState::Submitted, "an open task stays");
        let again = sent(h, &send_new(h, "client", "old")).await;
        assert!(!again.repeated, "the pruned message's id is free again");
        assert_ne!(again.task.task_id, done.task.task_id);
    }
}
