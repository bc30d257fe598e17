//! The event state machine of seed 001, as pure transition functions.
//!
//! ```text
//! available --claim--> claimed --ack(completed)--> acked
//!     ^                   |  \--ack(failed)------> dead_letter
//!     |                   |--release / lease expiry (attempts left)--> available (retry later)
//!     |                   |--release / lease expiry (attempts spent)--> dead_letter
//!     |                   \--lease expiry past expires_at--> expired
//!     |--past expires_at--> expired
//!     |--anomaly (agent's ack, or an operator; also from claimed)--> quarantined
//!     |--release from quarantine (operator)-- quarantined
//!     \--requeue (operator)-- dead_letter | quarantined
//! ```
//!
//! "retry scheduled" is `available` with `next_retry_at` in the future, so one index serves
//! the claim query. The stores run the common paths as single SQL statements and fall back
//! to these functions to decide the rare ones and to explain every refusal.

use serde::{Deserialize, Serialize};

use crate::{LeaseTokenHash, UnixMillis};

/// Where an event is in its life. Stored as the snake-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AckState {
    Available,
    Claimed,
    Acked,
    DeadLetter,
    Quarantined,
    Expired,
}

impl AckState {
    pub const ALL: [AckState; 6] = [
        AckState::Available,
        AckState::Claimed,
        AckState::Acked,
        AckState::DeadLetter,
        AckState::Quarantined,
        AckState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AckState::Available => "available",
            AckState::Claimed => "claimed",
            AckState::Acked => "acked",
            AckState::DeadLetter => "dead_letter",
            AckState::Quarantined => "quarantined",
            AckState::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<AckState> {
        AckState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// No delivery happens from here. Only an operator's requeue leaves `dead_letter` or
    /// `quarantined`; nothing leaves `acked` or `expired`.
    pub fn is_terminal(self) -> bool {
        !matches!(self, AckState::Available | AckState::Claimed)
    }

    /// Parked events wait for an operator: list, requeue or purge.
    pub fn is_parked(self) -> bool {
        matches!(self, AckState::DeadLetter | AckState::Quarantined)
    }
}

/// An event's state as clients and operators are shown it: the stored state, with
/// `available` split into claimable-now `available` and waiting `retry_scheduled` (an event
/// whose retry delay has not passed). Operators filter event listings by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    Available,
    RetryScheduled,
    Claimed,
    Acked,
    DeadLetter,
    Quarantined,
    Expired,
}

impl EventState {
    pub const ALL: [EventState; 7] = [
        EventState::Available,
        EventState::RetryScheduled,
        EventState::Claimed,
        EventState::Acked,
        EventState::DeadLetter,
        EventState::Quarantined,
        EventState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Available => "available",
            EventState::RetryScheduled => "retry_scheduled",
            EventState::Claimed => "claimed",
            EventState::Acked => "acked",
            EventState::DeadLetter => "dead_letter",
            EventState::Quarantined => "quarantined",
            EventState::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<EventState> {
        EventState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl From<AckState> for EventState {
    fn from(state: AckState) -> Self {
        match state {
            AckState::Available => EventState::Available,
            AckState::Claimed => EventState::Claimed,
            AckState::Acked => EventState::Acked,
            AckState::DeadLetter => EventState::DeadLetter,
            AckState::Quarantined => EventState::Quarantined,
            AckState::Expired => EventState::Expired,
        }
    }
}

/// What the agent reports when it acknowledges an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AckResult {
    /// The work is done.
    #[default]
    Completed,
    /// The work can never succeed; park the event for an operator instead of retrying.
    Failed,
    /// The event looks wrong (a suspected prompt injection, a bad payload or signature): set
    /// it aside for a person, neither retried nor dead-lettered.
    Quarantined,
}

impl AckResult {
    pub fn as_str(self) -> &'static str {
        match self {
            AckResult::Completed => "completed",
            AckResult::Failed => "failed",
            AckResult::Quarantined => "quarantined",
        }
    }
}

/// Why an event is parked (the seed's `dead_letter_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReason {
    #[default]
    None,
    MaxAttemptsExceeded,
    HandlerFailed,
    Anomaly,
}

impl DeadLetterReason {
    pub const ALL: [DeadLetterReason; 4] = [
        DeadLetterReason::None,
        DeadLetterReason::MaxAttemptsExceeded,
        DeadLetterReason::HandlerFailed,
        DeadLetterReason::Anomaly,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::None => "none",
            DeadLetterReason::MaxAttemptsExceeded => "max_attempts_exceeded",
            DeadLetterReason::HandlerFailed => "handler_failed",
            DeadLetterReason::Anomaly => "anomaly",
        }
    }

    pub fn parse(text: &str) -> Option<DeadLetterReason> {
        DeadLetterReason::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// A visibility lease. The hash of the most recent lease is kept after it ends, so a retried
/// ack is recognised as a repeat and a late one gets a precise refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub token_hash: LeaseTokenHash,
    pub until: UnixMillis,
}

/// The state-machine view of one inbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLifecycle {
    pub state: AckState,
    pub delivery_attempts: u32,
    pub max_attempts: u32,
    pub available_at: UnixMillis,
    pub expires_at: Option<UnixMillis>,
    pub next_retry_at: Option<UnixMillis>,
    /// The current lease while `claimed`; the last one afterwards.
    pub lease: Option<Lease>,
    pub dead_letter_reason: DeadLetterReason,
}

/// Everything that can happen to an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transition {
    Claim {
        token_hash: LeaseTokenHash,
        now: UnixMillis,
        lease_ms: u64,
    },
    Acknowledge {
        token_hash: LeaseTokenHash,
        now: UnixMillis,
        result: AckResult,
    },
    Release {
        token_hash: LeaseTokenHash,
        now: UnixMillis,
        retry_after_ms: u64,
    },
    Heartbeat {
        token_hash: LeaseTokenHash,
        now: UnixMillis,
        extend_ms: u64,
        lease_ms_max: u64,
    },
    /// The scavenger found the lease past its end; `backoff_ms` delays the next claim.
    LeaseExpired {
        now: UnixMillis,
        backoff_ms: u64,
    },
    /// The scavenger found an unclaimed event past `expires_at`.
    Expire {
        now: UnixMillis,
    },
    /// An operator sets an available or claimed event aside; a claimed one's lease ends, so
    /// its holder's later acknowledge or heartbeat is refused. Repeating it changes nothing.
    Quarantine {
        now: UnixMillis,
    },
    /// An operator sends a parked event back, with a fresh budget of `max_attempts` attempts.
    Requeue {
        now: UnixMillis,
        max_attempts: u32,
    },
    /// An operator lets a quarantined event be delivered again, with a fresh budget like
    /// [`Transition::Requeue`]. Repeating it (the event is available) changes nothing.
    ReleaseQuarantine {
        now: UnixMillis,
        max_attempts: u32,
    },
}

/// Why a transition was refused. Each maps to one stable error code at the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RefusalReason {
    #[error("the event is not available to claim: it is {0}")]
    NotClaimable(&'static str),
    #[error("the event is not available before {0}")]
    NotYetAvailable(UnixMillis),
    #[error("the event is scheduled for retry at {0}")]
    RetryScheduled(UnixMillis),
    #[error("the event passed its expiry time")]
    PastExpiry,
    #[error("the event has used all {0} delivery attempts")]
    AttemptsExhausted(u32),
    #[error("the lease token does not hold this event")]
    LeaseMismatch,
    #[error("the lease ended before this call; the event went back to the inbox or was parked")]
    LeaseExpired,
    #[error("the event was already acknowledged under another lease")]
    AlreadyAcked,
    #[error("the event is {0} and can no longer change")]
    Terminal(&'static str),
    #[error("the lease has not ended yet")]
    LeaseStillLive,
    #[error("only dead-lettered or quarantined events can be requeued; this one is {0}")]
    NotParked(&'static str),
    #[error("only quarantined events can be released from quarantine; this one is {0}")]
    NotQuarantined(&'static str),
}

/// The result of an accepted transition: the new state, and whether anything changed (an
/// idempotent repeat, such as a second ack with the same token, changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub next: EventLifecycle,
    pub changed: bool,
}

impl EventLifecycle {
    /// A freshly published event.
    pub fn published(available_at: UnixMillis, expires_at: Option<UnixMillis>, max_attempts: u32) -> Self {
        Self {
            state: AckState::Available,
            delivery_attempts: 0,
            max_attempts,
            available_at,
            expires_at,
            next_retry_at: None,
            lease: None,
            dead_letter_reason: DeadLetterReason::None,
        }
    }

    /// Whether a claim at `now` would succeed.
    pub fn claimable_at(&self, now: UnixMillis) -> Result<(), RefusalReason> {
        if self.state != AckState::Available {
            return Err(RefusalReason::NotClaimable(self.state.as_str()));
        }
        if self.expires_at.is_some_and(|at| at <= now) {
            return Err(RefusalReason::PastExpiry);
        }
        if self.available_at > now {
            return Err(RefusalReason::NotYetAvailable(self.available_at));
        }
        if let Some(at) = self.next_retry_at.filter(|at| *at > now) {
            return Err(RefusalReason::RetryScheduled(at));
        }
        if self.delivery_attempts >= self.max_attempts {
            return Err(RefusalReason::AttemptsExhausted(self.max_attempts));
        }
        Ok(())
    }

    /// The state shown to clients: `retry_scheduled` is `available` waiting for its retry time.
    pub fn display_state(&self, now: UnixMillis) -> EventState {
        match self.state {
            AckState::Available if self.next_retry_at.is_some_and(|at| at > now) => {
                EventState::RetryScheduled
            }
            state => state.into(),
        }
    }

    pub fn apply(&self, transition: Transition) -> Result<Applied, RefusalReason> {
        match transition {
            Transition::Claim { token_hash, now, lease_ms } => {
                self.claimable_at(now)?;
                Ok(self.changed(|next| {
                    next.state = AckState::Claimed;
                    next.delivery_attempts += 1;
                    next.next_retry_at = None;
                    next.lease = Some(Lease { token_hash, until: now.plus_ms(lease_ms) });
                }))
            }
            Transition::Acknowledge { token_hash, result, .. } => {
                let holds_last_lease = self.holds_last_lease(token_hash);
                match self.state {
                    AckState::Claimed if holds_last_lease => Ok(self.changed(|next| match result {
                        AckResult::Completed => next.state = AckState::Acked,
                        AckResult::Failed => {
                            next.state = AckState::DeadLetter;
                            next.dead_letter_reason = DeadLetterReason::HandlerFailed;
                        }
                        AckResult::Quarantined => next.quarantine(),
                    })),
                    AckState::Acked if holds_last_lease => Ok(self.unchanged()),
                    AckState::DeadLetter
                        if holds_last_lease && self.dead_letter_reason == DeadLetterReason::HandlerFailed =>
                    {
                        Ok(self.unchanged())
                    }
                    // The agent's own quarantine, repeated. An operator's pull of the claimed
                    // event also leaves this lease last, but only a quarantining ack agrees.
                    AckState::Quarantined if holds_last_lease && result == AckResult::Quarantined => {
                        Ok(self.unchanged())
                    }
                    AckState::Acked => Err(RefusalReason::AlreadyAcked),
                    _ => Err(self.refuse_lease(token_hash)),
                }
            }
            Transition::Release { token_hash, now, retry_after_ms } => match self.state {
                AckState::Claimed if self.holds_last_lease(token_hash) => Ok(self.changed(|next| {
                    next.end_lease(now);
                    if next.delivery_attempts >= next.max_attempts {
                        next.park(DeadLetterReason::MaxAttemptsExceeded);
                    } else if retry_after_ms > 0 {
                        next.next_retry_at = Some(now.plus_ms(retry_after_ms));
                    }
                })),
                // A retried release whose first answer was lost: nothing more to do.
                AckState::Available if self.holds_last_lease(token_hash) => Ok(self.unchanged()),
                _ => Err(self.refuse_lease(token_hash)),
            },
            Transition::Heartbeat { token_hash, now, extend_ms, lease_ms_max } => match self.state {
                AckState::Claimed if self.holds_last_lease(token_hash) => {
                    let lease = self.lease.expect("a claimed event has a lease");
                    if lease.until <= now {
                        return Err(RefusalReason::LeaseExpired);
                    }
                    let until = lease.until.max(now.plus_ms(extend_ms.min(lease_ms_max)));
                    Ok(self.changed(|next| next.lease = Some(Lease { until, ..lease })))
                }
                _ => Err(self.refuse_lease(token_hash)),
            },
            Transition::LeaseExpired { now, backoff_ms } => {
                let lease = match (self.state, self.lease) {
                    (AckState::Claimed, Some(lease)) => lease,
                    (state, _) => return Err(RefusalReason::NotClaimable(state.as_str())),
                };
                if lease.until > now {
                    return Err(RefusalReason::LeaseStillLive);
                }
                Ok(self.changed(|next| {
                    next.end_lease(now);
                    if next.expires_at.is_some_and(|at| at <= now) {
                        next.state = AckState::Expired;
                    } else if next.delivery_attempts >= next.max_attempts {
                        next.park(DeadLetterReason::MaxAttemptsExceeded);
                    } else {
                        next.next_retry_at = Some(now.plus_ms(backoff_ms));
                    }
                }))
            }
            Transition::Expire { now } => match self.state {
                AckState::Available if self.expires_at.is_some_and(|at| at <= now) => {
                    Ok(self.changed(|next| next.state = AckState::Expired))
                }
                AckState::Available => Err(RefusalReason::NotClaimable("not past its expiry time")),
                state => Err(RefusalReason::NotClaimable(state.as_str())),
            },
            Transition::Quarantine { now } => match self.state {
                AckState::Available | AckState::Claimed => Ok(self.changed(|next| {
                    if let Some(lease) = next.lease.as_mut() {
                        lease.until = lease.until.min(now);
                    }
                    next.quarantine();
                })),
                AckState::Quarantined => Ok(self.unchanged()),
                state => Err(RefusalReason::Terminal(state.as_str())),
            },
            Transition::Requeue { now, max_attempts } => match self.state {
                AckState::DeadLetter | AckState::Quarantined => {
                    Ok(self.changed(|next| next.send_back(now, max_attempts)))
                }
                state => Err(RefusalReason::NotParked(state.as_str())),
            },
            Transition::ReleaseQuarantine { now, max_attempts } => match self.state {
                AckState::Quarantined => Ok(self.changed(|next| next.send_back(now, max_attempts))),
                // Released already (and not claimed since): a retried release.
                AckState::Available => Ok(self.unchanged()),
                state => Err(RefusalReason::NotQuarantined(state.as_str())),
            },
        }
    }

    fn changed(&self, edit: impl FnOnce(&mut EventLifecycle)) -> Applied {
        let mut next = self.clone();
        edit(&mut next);
        Applied { next, changed: true }
    }

    fn unchanged(&self) -> Applied {
        Applied { next: self.clone(), changed: false }
    }

    fn holds_last_lease(&self, token_hash: LeaseTokenHash) -> bool {
        self.lease.is_some_and(|lease| lease.token_hash == token_hash)
    }

    /// Explains why `token_hash` may not act on this event.
    fn refuse_lease(&self, token_hash: LeaseTokenHash) -> RefusalReason {
        match self.state {
            AckState::Acked | AckState::Expired if !self.holds_last_lease(token_hash) => {
                RefusalReason::Terminal(self.state.as_str())
            }
            _ if self.holds_last_lease(token_hash) => RefusalReason::LeaseExpired,
            AckState::Quarantined | AckState::Expired => RefusalReason::Terminal(self.state.as_str()),
            _ => RefusalReason::LeaseMismatch,
        }
    }

    fn end_lease(&mut self, now: UnixMillis) {
        self.state = AckState::Available;
        if let Some(lease) = self.lease.as_mut() {
            lease.until = lease.until.min(now);
        }
    }

    fn park(&mut self, reason: DeadLetterReason) {
        self.state = AckState::DeadLetter;
        self.dead_letter_reason = reason;
    }

    fn quarantine(&mut self) {
        self.state = AckState::Quarantined;
        self.dead_letter_reason = DeadLetterReason::Anomaly;
    }

    /// Back to the inbox from a parked state, claimable at once.
    fn send_back(&mut self, now: UnixMillis, max_attempts: u32) {
        self.state = AckState::Available;
        self.dead_letter_reason = DeadLetterReason::None;
        self.next_retry_at = None;
        self.available_at = self.available_at.min(now);
        // Attempts never decrease; the event gets a fresh budget on top of them.
        self.max_attempts = self.delivery_attempts.saturating_add(max_attempts.max(1));
    }
}
