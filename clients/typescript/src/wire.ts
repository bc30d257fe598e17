/**
 * The service's JSON wire types, as `/openapi.json` names them (seed 001's field names).
 * Sequence numbers are JSON integers; they stay far below 2^53 in practice.
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export type TransportName = "sse" | "websocket" | "long-poll" | "poll";

export interface SubscribeRequest {
  device_id?: string | null;
  supported_transports?: TransportName[];
  last_seen_seq?: number | null;
  wants_claims?: boolean;
}

export interface RecipientView {
  tenant_id: string;
  recipient_kind: string;
  recipient_id: string;
}

export interface SubscribeResponse {
  session_id: string;
  recipient: RecipientView;
  current_head_seq: number;
  recommended_transport: string;
  poll_after_cursor_url: string;
  sse_url?: string | null;
  websocket_url?: string | null;
  heartbeat_interval_seconds: number;
  lease_default_seconds: number;
  retention_days: number;
}

export interface Correlation {
  company_id?: string | null;
  workspace_id?: string | null;
  project_id?: string | null;
  meeting_room_id?: string | null;
  message_id?: string | null;
  routing_decision_id?: string | null;
  memory_update_id?: string | null;
  assignment_id?: string | null;
}

export interface PayloadRef {
  kind: string;
  id: string;
}

export type AckState =
  | "available"
  | "retry_scheduled"
  | "claimed"
  | "acked"
  | "dead_letter"
  | "quarantined"
  | "expired";

/** An event as agents see it, with the inline payload when there is one. */
export interface EventEnvelope {
  event_id: string;
  tenant_id: string;
  recipient_kind: string;
  recipient_id: string;
  inbox_seq: number;
  event_type: string;
  priority: string;
  availability_at_utc: string;
  expires_at_utc?: string | null;
  deduplication_key?: string | null;
  /** One of {@link AckState}, or a state newer than this client. */
  ack_state: string;
  delivery_attempts: number;
  visibility_lease_until_utc?: string | null;
  next_retry_at_utc?: string | null;
  dead_letter_state: string;
  correlation: Correlation;
  payload?: JsonObject | null;
  payload_ref?: PayloadRef | null;
  created_at_utc: string;
}

export interface PollRequest {
  after_seq: number;
  /** 1 to 500; default 100. */
  limit?: number;
  /** Long poll: wait up to this many seconds for an event past the cursor. */
  wait_seconds?: number;
  include_claimable_only?: boolean;
}

export interface PollResponse {
  head_seq: number;
  events: EventEnvelope[];
  next_cursor: number;
  more_available: boolean;
  /** A long poll ended because events behind the cursor went back to the inbox: claim. */
  nudged?: boolean;
}

export interface HeadResponse {
  tenant_id: string;
  recipient_kind: string;
  recipient_id: string;
  head_seq: number;
  oldest_available_seq: number;
}

export interface ClaimRequest {
  session_id?: string | null;
  event_ids?: string[];
  limit?: number;
  lease_seconds?: number;
}

export interface Claim {
  event_id: string;
  /** Shown once: keep it to acknowledge, release or heartbeat this event. */
  lease_token: string;
  visibility_lease_until_utc: string;
  ack_state: string;
  event: EventEnvelope;
}

export interface ItemError {
  code: string;
  detail: string;
}

/** A named event that could not be claimed, with the reason. */
export interface RejectedEvent {
  event_id: string;
  error: ItemError;
}

export interface ClaimResponse {
  claims: Claim[];
  rejected?: RejectedEvent[];
}

/** Why an event was set aside: the metric label operators see (seed 001's anomalies). */
export type QuarantineClass = "prompt_injection" | "malformed_payload" | "bad_signature" | "policy" | "other";

/** `failed` dead-letters the event; `quarantined` sets it aside for a person, with a reason. */
export type AckResult = "completed" | "failed" | "quarantined";

export interface AckEntry {
  event_id: string;
  lease_token: string;
  result?: AckResult;
  /** Required with `quarantined`: why (1 to 200 bytes, no control characters). */
  reason?: string;
  /** With `quarantined`: one of {@link QuarantineClass}; default `other`. */
  class?: QuarantineClass;
  /** A hand-off: publishes committed with this acknowledgement, only while its lease holds. */
  follow_ups?: PublishRequest[];
}

export interface AcknowledgeRequest {
  session_id?: string | null;
  acks: AckEntry[];
}

export interface AckOutcome {
  event_id: string;
  ack_state?: string | null;
  error?: ItemError | null;
  /** A hand-off's publishes, one per follow-up. */
  follow_ups?: PublishResponse[];
}

export interface AcknowledgeResponse {
  results: AckOutcome[];
}

export interface ReleaseRequest {
  event_id: string;
  lease_token: string;
  reason?: string | null;
  /** Not claimable again before this many seconds (at most 604800). */
  retry_after_seconds?: number;
}

export interface ReleaseResponse {
  event_id: string;
  ack_state: string;
  next_retry_at_utc?: string | null;
}

export interface HeartbeatEntry {
  event_id: string;
  lease_token: string;
  extend_by_seconds: number;
}

export interface HeartbeatRequest {
  session_id?: string | null;
  leases: HeartbeatEntry[];
}

export interface HeartbeatOutcome {
  event_id: string;
  visibility_lease_until_utc?: string | null;
  error?: ItemError | null;
}

export interface HeartbeatResponse {
  leases: HeartbeatOutcome[];
}

export interface ResyncResponse {
  head_seq: number;
  oldest_available_seq: number;
  resume_after_seq: number;
  open_events: EventEnvelope[];
  more_available: boolean;
}

export interface StreamTicketRequest {
  session_id?: string | null;
  ttl_seconds?: number;
}

export interface StreamTicketResponse {
  ticket: string;
  expires_at_utc: string;
  expires_in: number;
  sse_url: string;
  websocket_url: string;
}

export interface StreamCookieResponse {
  expires_at_utc: string;
  expires_in: number;
  sse_url: string;
  websocket_url: string;
}

/** The `data` of an SSE `inbox.updated` event: a hint, never the record. */
export interface StreamSignal {
  signal_type: string;
  tenant_id: string;
  recipient_id: string;
  head_seq: number;
  /** Events not yet acknowledged or parked when the hint was written (up to 10,000); absent when it could not be counted. */
  approximate_unacked?: number | null;
  sent_at_utc: string;
  delivery_id: string;
}

export interface SessionHeartbeatRequest {
  last_seen_seq?: number;
}

export interface SessionHeartbeatResponse {
  session_id: string;
  status: string;
  heartbeat_interval_seconds: number;
  gone_after_utc: string;
}

export interface PublishRequest {
  recipients: string[];
  event_type: string;
  priority?: string;
  available_at_utc?: string;
  expires_at_utc?: string;
  deduplication_key?: string;
  /** The source this event is fair to, under the tenant's fair claims (default: the publisher). */
  fairness_key?: string;
  correlation?: Correlation;
  payload?: JsonObject;
  payload_ref?: PayloadRef;
  max_attempts?: number;
}

export interface DeliveryView {
  recipient_kind: string;
  recipient_id: string;
  event_id: string;
  inbox_seq: number;
  deduplicated: boolean;
}

export interface PublishResponse {
  deliveries: DeliveryView[];
}

export interface AgentKeyRequest {
  algorithm: "ed25519" | "hmac-sha256";
  public_key?: string;
  key_id?: string;
}

export interface AgentKeyResponse {
  key_id: string;
  agent_id: string;
  algorithm: string;
  created_at_utc: string;
  retires_at_utc?: string | null;
  public_key?: string | null;
  secret?: string | null;
}

export interface AgentKeysResponse {
  keys: AgentKeyResponse[];
  signatures_required?: boolean;
}
