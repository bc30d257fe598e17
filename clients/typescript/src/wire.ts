/**
 * The service's JSON wire types, by the names `/openapi.json` gives them. They are generated
 * from that document into `openapi.ts` (`scripts/generate-wire-types.sh`, which the tests run
 * to check the committed file is what the document gives); this module names the ones the
 * client uses and adds what a schema does not say.
 *
 * A union of string literals (`ack_state`, `priority`...) is what the service sends today; the
 * client still takes a value it does not know as open (see `scan.ts`). Sequence numbers are
 * JSON integers; they stay far below 2^53 in practice.
 */

import type { components } from "./openapi.js";

type Schemas = components["schemas"];

/** Any JSON value; a payload is a JSON object. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export type SubscribeRequest = Schemas["SubscribeRequest"];
export type RecipientView = Schemas["RecipientView"];
export type SubscribeResponse = Schemas["SubscribeResponse"];
export type Correlation = Schemas["Correlation"];
export type PayloadRef = Schemas["PayloadRef"];
/** An event as agents see it, with the inline payload when there is one. */
export type EventEnvelope = Schemas["EventEnvelope"];
export type PollRequest = Schemas["PollRequest"];
export type PollResponse = Schemas["PollResponse"];
export type HeadResponse = Schemas["HeadResponse"];
export type ClaimRequest = Schemas["ClaimRequest"];
export type Claim = Schemas["Claim"];
export type ItemError = Schemas["ItemError"];
/** A named event that could not be claimed, with the reason. */
export type RejectedEvent = Schemas["RejectedEvent"];
export type ClaimResponse = Schemas["ClaimResponse"];
export type AckEntry = Schemas["AckEntry"];
export type AcknowledgeRequest = Schemas["AcknowledgeRequest"];
export type AckOutcome = Schemas["AckOutcome"];
export type AcknowledgeResponse = Schemas["AcknowledgeResponse"];
export type ReleaseRequest = Schemas["ReleaseRequest"];
export type ReleaseResponse = Schemas["ReleaseResponse"];
export type HeartbeatEntry = Schemas["HeartbeatEntry"];
export type HeartbeatRequest = Schemas["HeartbeatRequest"];
export type HeartbeatOutcome = Schemas["HeartbeatOutcome"];
export type HeartbeatResponse = Schemas["HeartbeatResponse"];
export type ResyncResponse = Schemas["ResyncResponse"];
export type StreamTicketRequest = Schemas["StreamTicketRequest"];
export type StreamTicketResponse = Schemas["StreamTicketResponse"];
export type StreamCookieResponse = Schemas["StreamCookieResponse"];
/** The `data` of an SSE `inbox.updated` event: a hint, never the record. */
export type StreamSignal = Schemas["StreamSignal"];
export type SessionHeartbeatRequest = Schemas["SessionHeartbeatRequest"];
export type SessionHeartbeatResponse = Schemas["SessionHeartbeatResponse"];
export type PublishRequest = Schemas["PublishRequest"];
export type DeliveryView = Schemas["DeliveryView"];
export type PublishResponse = Schemas["PublishResponse"];
export type AgentKeyRequest = Schemas["AgentKeyRequest"];
export type AgentKeyResponse = Schemas["AgentKeyResponse"];
export type AgentKeysResponse = Schemas["AgentKeysResponse"];
/** The RFC 9457 problem document every refusal carries. */
export type Problem = Schemas["Problem"];

/** The transports a subscription may name. */
export type TransportName = NonNullable<SubscribeRequest["supported_transports"]>[number];
/** An event's state, as the service names them today. */
export type AckState = EventEnvelope["ack_state"];
/** Why an event was set aside: the metric label operators see (seed 001's anomalies). */
export type QuarantineClass = NonNullable<AckEntry["class"]>;
/** `failed` dead-letters the event; `quarantined` sets it aside for a person, with a reason. */
export type AckResult = NonNullable<AckEntry["result"]>;
