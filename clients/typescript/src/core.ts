/** Everything that is the same in browsers and in Node. */

export { Agent, resyncSnapshot, setDefaultPlatform } from "./agent.js";
export type { AgentOptions, HandOff, Handler, HandlerContext, InboxEvent, Outcome, Progress, ResyncHandler, RunSummary } from "./contract.js";
export { handOff } from "./contract.js";
export { InboxApi, checkBaseUrl } from "./api.js";
export type { AccessTokenProvider, CallOptions, HeadResult, InboxApiOptions } from "./api.js";
export {
  ConfigError,
  Fatal,
  InboxError,
  LocalStateError,
  NetworkError,
  ProblemError,
  ProtocolError,
  QUARANTINE_CLASSES,
  QuarantineError,
  ResyncError,
  RetryLater,
  SessionSupersededError,
} from "./errors.js";
export type { ProblemDocument } from "./errors.js";
export { quarantineReason } from "./errors.js";
export type { HeldLock, HintStream, LifecycleChange, Platform, StreamHandlers, StreamTarget, TabChannel, TabMessage, TabPrimitives } from "./platform.js";
export * as schedule from "./schedule.js";
export { Scan } from "./scan.js";
export { SigningKey, contentDigest, normalizeAuthority, serializeParams, signInboxRequest, signMessage, signatureBase } from "./signing.js";
export type { Component, SignatureParameter, SignatureParams, SignedMessage, SignedRequestHeaders, SigningAlgorithm } from "./signing.js";
export { SseParser } from "./sse.js";
export type { SseEvent } from "./sse.js";
export { MemoryState, PROCESSED_CAPACITY_DEFAULT } from "./state.js";
export type { LocalState, ProcessedResult, QuarantineDetail, StateSnapshot } from "./state.js";
export { TabGroup, DEFAULT_TAB_TIMING } from "./tabs.js";
export type { TabGroupTiming } from "./tabs.js";
export { HintTransport, DEFAULT_TRANSPORT_CONFIG } from "./transport.js";
export type { TransportConfig, TransportKind, TransportStatus } from "./transport.js";
export type * from "./wire.js";
