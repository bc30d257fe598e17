// Generated from openapi.json by scripts/generate-wire-types.sh: do not edit. The service's
// bounds the client's own code uses, each read from the schema that states it.

/** `components.schemas.AckEntry.properties.reason.maxLength` */
export const REASON_BYTES_MAX = 200;

/** `components.schemas.ReleaseRequest.properties.retry_after_seconds.maximum` */
export const RETRY_AFTER_SECONDS_MAX = 604800;

/** `components.schemas.ClaimRequest.properties.limit.maximum` */
export const BATCH_EVENTS_MAX = 500;
