//! Every SQL statement of the `inbox` subsystem, by name: publish, read, leases, the slow
//! path, scavenge, operator work and cold storage.
//!
//! A constant where the text is fixed (an [`Sql`] pair where the backends differ); a function
//! only where the text depends on a count (IN lists, multi-row inserts), on a lock clause the
//! caller chooses, or on whether the history is recorded. The binds of each are listed in
//! order; "inbox" stands for tenant, recipient kind and recipient id.
//!
//! One folder for one table: every statement that reads or writes `agent_inbox`, `inbox_head`
//! and the archive is here, so a schema change is checked against these files. This file holds
//! what they share (the column lists, the inbox clause, the recipients predicate); the
//! statements are grouped by what they do: `writing`, `claiming`, `reading`, `upkeep`.

#[macro_use]
mod shared;

mod claiming;
mod reading;
mod upkeep;
mod writing;

pub(in crate::inbox) use claiming::*;
pub(in crate::inbox) use reading::*;
pub(in crate::inbox) use shared::{EVENT_COLUMN_COUNT, recipients_predicate};
pub(in crate::inbox) use upkeep::*;
pub(in crate::inbox) use writing::*;
