//! Runs every case of `inbox_store::conformance` against SQLite and against MariaDB, each in
//! a fresh database. MariaDB's URL comes from `AGENT_INBOX_TEST_MYSQL_URL`.
//!
//! The cases that matter where one server becomes several (publish, claim, ack, release,
//! heartbeat, dedup, scavenge, retention, two nodes at once) also run on a MariaDB Galera
//! cluster when `AGENT_INBOX_TEST_GALERA_URLS` names its members (`scripts/galera.sh start`
//! prints it; `scripts/test.sh` starts the cluster and sets it), with the store's connections
//! spread over the members and the second node on another member.

use inbox_store::conformance::{self, Backend, Harness};

macro_rules! conformance_suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let harness = Harness::new(Backend::Sqlite).await;
                    conformance::$case(&harness).await;
                }
            )*
        }
        mod mysql {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let harness = Harness::new(Backend::MySql).await;
                    conformance::$case(&harness).await;
                }
            )*
        }
    };
}

macro_rules! galera_suite {
    ($($case:ident),* $(,)?) => {
        mod galera {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    if conformance::galera_urls().is_none() {
                        eprintln!("{} is not set: no Galera cluster to run on (scripts/galera.sh start)", conformance::GALERA_URLS_ENV);
                        return;
                    }
                    let harness = Harness::new(Backend::Galera).await;
                    conformance::$case(&harness).await;
                }
            )*
        }
    };
}

galera_suite!(
    engine_check_proves_skip_locked_and_read_committed,
    migrations_are_idempotent,
    publish_assigns_per_recipient_sequences,
    publish_in_host_transaction_is_atomic,
    deduplication_key_returns_the_existing_event,
    deduplication_sees_commits_after_the_host_snapshot,
    poll_after_cursor_pages_in_order,
    claim_next_orders_by_priority_then_sequence,
    claim_by_ids_reports_each_event,
    acknowledge_is_idempotent_and_refuses_strangers,
    release_schedules_retries_and_dead_letters_at_the_limit,
    heartbeat_extends_only_live_leases,
    scavenger_returns_expired_leases_and_expires_events,
    retention_archives_a_prefix_and_requires_cursor_reset,
    scavengers_on_two_nodes_do_each_event_once,
    concurrent_fan_outs_never_deadlock,
    claimers_on_two_nodes_never_share_an_event,
    publishers_on_two_nodes_keep_sequences_dense_and_in_one_order,
    signals_appear_only_after_commit,
    cold_storage_pages_in_key_order_and_deletes_exactly_the_keys_given,
    scavenger_prunes_the_archive_after_archive_retention,
);

conformance_suite!(
    cold_storage_pages_in_key_order_and_deletes_exactly_the_keys_given,
    scavenger_prunes_the_archive_after_archive_retention,
    engine_check_proves_skip_locked_and_read_committed,
    claimers_on_two_nodes_never_share_an_event,
    publishers_on_two_nodes_keep_sequences_dense_and_in_one_order,
    publish_assigns_per_recipient_sequences,
    publish_in_host_transaction_is_atomic,
    deduplication_key_returns_the_existing_event,
    deduplication_sees_commits_after_the_host_snapshot,
    publish_refusals_change_nothing,
    envelope_round_trips,
    poll_after_cursor_pages_in_order,
    claim_next_orders_by_priority_then_sequence,
    claim_by_ids_reports_each_event,
    acknowledge_is_idempotent_and_refuses_strangers,
    release_schedules_retries_and_dead_letters_at_the_limit,
    heartbeat_extends_only_live_leases,
    scavenger_returns_expired_leases_and_expires_events,
    retention_archives_a_prefix_and_requires_cursor_reset,
    operators_list_requeue_quarantine_and_purge,
    tenants_and_recipients_are_isolated,
    migrations_are_idempotent,
    sixteen_workers_drain_a_backlog_while_publishers_insert,
    concurrent_fan_outs_never_deadlock,
    batched_publishes_keep_per_recipient_order_without_gaps,
    batched_publishes_deduplicate_within_and_across_batches,
    a_batch_mate_refused_by_the_database_fails_alone,
    batched_fan_outs_sharing_recipients_never_deadlock,
    scavengers_on_two_nodes_do_each_event_once,
    room_post_writes_message_and_member_events_together,
    room_post_failing_part_way_leaves_nothing,
    room_posts_deduplicate_per_room,
    room_membership_changes_affect_later_posts_only,
    room_operations_refuse_unknown_rooms,
    room_requests_are_validated,
    concurrent_room_posts_deduplicate_exactly_once,
    signals_appear_only_after_commit,
    stream_tickets_redeem_once_on_any_node,
    sessions_are_touched_and_swept,
    a_subscribe_supersedes_earlier_sessions_under_the_policy,
    concurrent_subscribes_leave_one_newest_session,
    open_events_page_after_a_sequence,
    nonces_are_refused_once_on_any_node,
    nonces_remembered_together_each_get_their_own_answer,
    agent_keys_register_list_and_retire,
    a_second_agent_key_needs_a_signature_even_under_races,
    tenant_policy_defaults_and_changes,
    callback_registrations_deliver_through_the_database,
    signing_key_rotation_overlaps_then_retires,
);
