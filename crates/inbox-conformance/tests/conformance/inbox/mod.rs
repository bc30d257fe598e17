//! The `inbox` subsystem's cases, by job.

mod concurrency;
mod leases;
mod publish;
mod scavenge;
