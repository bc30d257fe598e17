//! Every metric the service exports, declared once: its kind, its name (after the
//! `agent_inbox_` prefix), its label names and its help text. Each line becomes a method of
//! [`Metrics`](super::Metrics) returning the metric's handle, and a family in the exposition,
//! so a metric that is recorded is always exported, and a misspelled name does not compile.
//!
//! The order here is the order of `/metrics`.

use super::{Counter, Gauge, Histogram, SizeHistogram};

declare_metrics! {
    Counter http_requests_total("route", "status")
        "HTTP requests by route template and status";
    Histogram http_request_duration_seconds("route")
        "HTTP request latency by route template";
    Counter log_lines_dropped_total()
        "Log lines dropped because the log's writer fell behind (its queue holds 65,536 lines)";
    Histogram publish_commit_seconds()
        "Publish-to-inbox commit latency, per request";
    SizeHistogram publish_batch_size()
        "Publishes committed together in one transaction";
    Histogram publish_queue_wait_seconds("tenant")
        "Time a publish waited in this node's batcher before its batch began to commit, by tenant (fair shares bound a flooding tenant's effect on the others)";
    Histogram publish_linger_seconds()
        "How long a publish batch gathered before its commit started";
    Counter events_published_total("tenant")
        "Inbox rows written by publishes, by tenant";
    Counter events_deduplicated_total("tenant")
        "Publishes answered with an existing event, by tenant";
    Counter claims_total("tenant")
        "Events claimed, by tenant";
    Counter duplicate_claims_total("tenant")
        "Claims of events already claimed or finished, by tenant";
    Counter acks_total("tenant", "state")
        "Acknowledgements accepted, by tenant and result";
    Histogram ack_latency_seconds()
        "Acknowledge request latency";
    Histogram delivery_latency_seconds()
        "Time from an event becoming available to its first claim";
    Counter lease_expirations_total()
        "Leases that ran out and returned their event to the inbox";
    Counter dead_lettered_total()
        "Events dead-lettered by the scavenger";
    Counter quarantined_total("by", "class")
        "Events quarantined, by who set them aside (agent or operator) and the class of anomaly (an agent's retried acknowledgement counts again, as in acks_total)";
    Counter quarantine_releases_total()
        "Quarantined events an operator released back to the inbox (repeats not counted)";
    Counter requeued_total()
        "Parked events an operator requeued with a fresh budget of attempts (repeats not counted)";
    Counter expired_total()
        "Events that passed expires_at unclaimed";
    Counter archived_total()
        "Terminal events moved to the archive by retention";
    Counter cursor_resets_total("tenant")
        "Polls answered with cursor_reset_required, by tenant";
    Counter quota_refusals_total("tenant", "limit")
        "Publishes refused by a tenant quota, by tenant and limit (pending_events, stored_bytes)";
    Counter rate_limited_total("code")
        "Requests refused by a rate limit or waiter cap, by code";
    Counter auth_failures_total("code")
        "Requests refused for authentication, by code";
    Gauge database_up()
        "1 while the database answers, 0 while it is unreachable";
    Counter database_unavailable_total()
        "Requests answered 503 database_unavailable because the database could not be reached";
    Counter tls_reloads_total("result")
        "TLS certificate reloads, by result (loaded or refused)";
    Gauge secrets_key_loaded("key_id")
        "1 for each key of the secrets key file this node holds (0 once removed); every node needs a key before `keys rewrap` names it";
    Counter secrets_key_reloads_total("result")
        "Secrets key file reloads after a change, by result (loaded or refused)";
    Gauge secrets_decryptions()
        "Sealed secrets this node decrypted since it started; a secret read again comes from memory, so this moves when keys are created, loaded or rewrapped, never per request";
    Gauge backlog("tenant")
        "Unacknowledged events (available, scheduled, claimed) per tenant";
    Gauge parked("tenant")
        "Dead-lettered and quarantined events per tenant";
    Gauge oldest_unacked_age_seconds("tenant")
        "Age of the oldest unacknowledged event per tenant";
    Gauge inbox_depth("tenant", "agent")
        "Unacknowledged events of the deepest inboxes (top 20 per tenant)";
    Gauge db_history_list_length()
        "InnoDB history list length: undo records waiting for purge; it climbs while an old read view (a backup, a long query) is open (MySQL/MariaDB only)";
    Gauge db_oldest_transaction_age_seconds()
        "Age of the oldest open InnoDB transaction, from information_schema.innodb_trx (MySQL/MariaDB with the PROCESS privilege)";
    Histogram publish_to_signal_seconds()
        "Publish-to-signal latency: outbox row written to the notifier handing its hint to this node";
    Counter signals_read_total()
        "outbox_signal rows the notifier read (re-reads included)";
    Counter signal_gaps_abandoned_total()
        "Skipped outbox ids the notifier stopped waiting for (rolled back, or later than the grace period)";
    Counter signals_deleted_total()
        "outbox_signal rows deleted by retention";
    Counter stream_connects_total("transport")
        "SSE and WebSocket streams opened, by transport";
    Counter stream_reconnects_total("transport")
        "Streams opened with a Last-Event-ID (a client resuming), by transport";
    Gauge connected_streams("transport")
        "Open streams and waiting long polls on this node, by transport";
    Counter streams_refused_total("transport", "code")
        "Streams refused for capacity, by transport and problem code (streams_at_capacity: the node's streams_max; too_many_waiters: an agent's or tenant's cap)";
    Counter connections_closed_stalled_total()
        "Connections closed because nothing they were sent was taken for write_stall_timeout: a client that stopped reading, or a peer that vanished (TCP user timeout)";
    Counter hints_sent_total("tenant", "transport")
        "inbox.updated hints written to streams, by tenant and transport; fetches/hints is the hint-to-fetch ratio";
    Counter fetches_total("tenant", "kind")
        "Poll and claim requests (what a hint should lead to), by tenant and kind";
    Counter ws_requests_total("op", "status")
        "Operations sent over WebSockets, by op and status";
    Counter long_polls_total("outcome")
        "Long polls by outcome (events, nudged, timeout, shutdown); timeout/total is the long-poll timeout ratio";
    Counter head_requests_total("result")
        "Head checks by result (not_modified, modified); not_modified/total is the 304 ratio";
    Counter head_checks_from_memory_total()
        "Head checks answered 304 from this node's cache of current heads, without a database read";
    Counter signature_verifications_total("result")
        "Signed requests checked, by result (valid, refused); refusals also count under auth failures by code";
    Histogram signature_verify_seconds()
        "Time to verify one request signature, key lookup included (its nonce is written afterwards)";
    Histogram signature_nonce_seconds()
        "Time a signed request waits for its nonce to be recorded (shared statements, see nonce_writer)";
    Counter signature_nonce_writes_total()
        "Statements that recorded signature nonces; nonces recorded are valid verifications";
    Counter signature_replays_total()
        "Signed requests refused as replays of a used nonce";
    Counter callback_challenges_total("outcome")
        "Callback registration challenges, by outcome";
    Counter callback_deliveries_total("tenant", "outcome")
        "Webhook hint deliveries by tenant and outcome (delivered, failed, abandoned, disabled)";
    Histogram callback_delivery_seconds()
        "Duration of one webhook delivery attempt";
    Counter callback_fanout_deferred_total()
        "Due webhook deliveries left for a later pass by the per-tenant fan-out cap";
    Counter callback_origin_deferred_total()
        "Due webhook deliveries left for a later pass because their origin had callbacks_in_flight_per_origin_max deliveries in flight";
    Counter callback_endpoints_disabled_total("tenant")
        "Callback registrations disabled after failing past callbacks_disable_after_failures and callbacks_disable_after";
}
