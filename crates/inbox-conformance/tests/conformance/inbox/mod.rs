//! The `inbox` subsystem's cases, by job.

mod browse;
mod claim_floor;
mod concurrency;
mod fair_claims;
mod handoff;
mod history;
mod leases;
mod publish;
mod quarantine;
mod scavenge;
