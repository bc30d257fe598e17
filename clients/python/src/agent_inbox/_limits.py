"""Generated from openapi.json by scripts/generate-wire-types.sh: do not edit. The service's
bounds the SDK's own code uses, each read from the schema that states it."""

#: ``components.schemas.AckEntry.properties.reason.maxLength``
REASON_BYTES_MAX = 200

#: ``components.schemas.ReleaseRequest.properties.retry_after_seconds.maximum``
RETRY_AFTER_SECONDS_MAX = 604800

#: ``components.schemas.ClaimRequest.properties.limit.maximum``
BATCH_EVENTS_MAX = 500
