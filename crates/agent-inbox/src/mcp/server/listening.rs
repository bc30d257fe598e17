//! Task states pushed to listeners: a `subscriptions/listen` stream follows `inbox://head` if
//! it asked and the tasks it named, and a handshake-era session hears of the tasks it made
//! when they finish.

use super::*;
impl InboxServer {
    /// A `subscriptions/listen` stream: `inbox://head`'s changes if it asked for them, and the
    /// state of each task it named that this agent made, now and when the task finishes.
    pub(super) async fn follow_listen(
        &self,
        context: &SubscriptionContext,
        task_ids: Vec<String>,
    ) -> Result<(), McpError> {
        let wants_head = context
            .accepted()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.iter().any(|u| u == HEAD_URI));
        let mut inbox = match wants_head {
            true => Some(self.inbox.subscribe().await),
            false => None,
        };
        let mut followed: Vec<(String, WaitTask)> = match &self.tasks {
            Some(watch) => task_ids
                .into_iter()
                .filter_map(|id| watch.tasks().open_id(&id).map(|task| (id, task)))
                .collect(),
            None => Vec::new(),
        };
        let mut task_changes = match (&self.tasks, followed.is_empty()) {
            (Some(watch), false) => Some(watch.changes()),
            _ => None,
        };
        let peer = &context.request_context().peer;
        let subscription_id = &context.request_context().id;
        // The client was told its subscription is honored before this runs (rmcp acknowledges,
        // then calls `listen`), so a publish in between changed the inbox unseen: one "look
        // again" now covers it. Hints are only ever that, so an extra one costs a read. A
        // followed task's state is sent at once for the same reason.
        if inbox.is_some() && context.sink().notify_resource_updated(HEAD_URI).await.is_err() {
            return Ok(());
        }
        if !self.push_task_states(peer, subscription_id, &mut followed, true).await {
            return Ok(());
        }
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                update = recv_or_wait(inbox.as_mut().map(|inbox| &mut inbox.changes)) => match update {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        if context.sink().notify_resource_updated(HEAD_URI).await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(RecvError::Closed) => inbox = None,
                },
                finished = recv_or_wait(task_changes.as_mut()) => {
                    let pushed = match finished {
                        Ok(task_id) if !followed.iter().any(|(id, _)| *id == task_id) => true,
                        Ok(_) | Err(RecvError::Lagged(_)) => {
                            self.push_task_states(peer, subscription_id, &mut followed, false).await
                        }
                        Err(RecvError::Closed) => {
                            task_changes = None;
                            true
                        }
                    };
                    if !pushed {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Sends the state of each followed task (`all`), or of those that finished, and stops
    /// following the finished ones (their state is final). `false` when the client is gone.
    async fn push_task_states(
        &self,
        peer: &Peer<RoleServer>,
        subscription_id: &RequestId,
        followed: &mut Vec<(String, WaitTask)>,
        all: bool,
    ) -> bool {
        let Some(watch) = &self.tasks else { return true };
        let mut kept = Vec::with_capacity(followed.len());
        for (task_id, task) in followed.drain(..) {
            let finished = match watch.tasks().outcome(&task_id, &task) {
                Ok(finished) => finished,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read a task's outcome to push it");
                    None
                }
            };
            let state = tasks::detailed(&task_id, &task, finished.as_ref());
            if (all || finished.is_some()) && !send_task_state(peer, state, Some(subscription_id)).await {
                return false;
            }
            if finished.is_none() && !task.expired() {
                kept.push((task_id, task));
            }
        }
        *followed = kept;
        true
    }
}

/// The next item of a feed, or never when there is none.
async fn recv_or_wait<T: Clone>(receiver: Option<&mut broadcast::Receiver<T>>) -> Result<T, RecvError> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// `notifications/tasks` with the task's state, on a listen stream when `subscription` names
/// one; `false` when the client is gone.
async fn send_task_state(
    peer: &Peer<RoleServer>,
    state: DetailedTask,
    subscription: Option<&RequestId>,
) -> bool {
    let mut params = TaskStatusNotificationParams::new(state);
    if let Some(subscription) = subscription {
        let mut meta = NotificationMetaObject::new();
        meta.set_subscription_id(subscription.clone());
        params = params.with_meta(meta);
    }
    let notification = ServerNotification::TaskStatusNotification(TaskStatusNotification::new(params));
    peer.send_notification(notification).await.is_ok()
}

/// Sends a handshake-era session the state of the task it made once the task finishes; gives
/// up at the task's expiry or when the session is gone.
pub(super) async fn push_when_finished(
    peer: Peer<RoleServer>,
    mut changes: broadcast::Receiver<String>,
    tasks: Arc<Tasks>,
    task_id: String,
    task: WaitTask,
) {
    let expiry = std::time::Duration::from_millis(task.expires_ms().saturating_sub(tasks::now_ms()));
    let expired = tokio::time::sleep(expiry);
    tokio::pin!(expired);
    loop {
        tokio::select! {
            received = changes.recv() => match received {
                Ok(finished) if finished != task_id => continue,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            () = &mut expired => return,
        }
        match tasks.outcome(&task_id, &task) {
            Ok(Some(finished)) => {
                send_task_state(&peer, tasks::detailed(&task_id, &task, Some(&finished)), None).await;
                return;
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(error = %err, "cannot read a task's outcome to push it"),
        }
    }
}
