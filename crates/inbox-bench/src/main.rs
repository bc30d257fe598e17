//! `inbox-bench`: measures `inbox_store::SqlStore` against a raw-SQL baseline that runs the
//! same statements, in one process against MariaDB/MySQL, and prints one table row per
//! workload and concurrency; and, as subcommands, the hints, the HTTP API, the trust layer,
//! publishing, the agent side and the cost of recording history (see `args.rs`). Progress goes to stderr, the table to stdout.
//!
//! Run it as `cargo run --release -p inbox-bench -- store`.

mod agent;
mod args;
mod callbacks;
mod claim_ack;
mod cpu;
mod fairness;
mod galera;
mod hints;
mod history;
mod history_http;
mod hot_paths;
mod http;
mod mysql_db;
mod node;
mod noisy_tenant;
mod publish;
mod publishing;
mod raw;
mod readview;
mod report;
mod secrets;
mod soak;
mod streams;
mod streams_clients;
mod subjects;
mod trust;
mod verify;

use std::ops::Range;
use std::process::ExitCode;

use sqlx::Row as _;

use crate::args::{Command, StoreArgs, USAGE};
use crate::claim_ack::Inboxes;
use crate::report::{Measured, Row};
use crate::subjects::{CONNECTIONS_MAX, Side, Subjects, tenant};

/// Any failure, with a message for a person; the binary prints it and exits non-zero.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// Workers per row. The largest equals the pool size, so no row measures pool queueing.
const CONCURRENCY_LEVELS: [usize; 3] = [1, 4, 16];
/// Unmeasured work per side before the first row: opens every pooled connection and prepares
/// every statement on it, so neither side pays those costs inside a measured row.
const WARMUP_PUBLISHES: usize = 320;
const WARMUP_EVENTS: usize = 320;
/// Each row runs in rounds, each side doing an equal share of the row's work per round, in
/// the order store, raw, raw, store, store, raw, ...: slow drift during a row (a growing
/// table) cancels within every pair of rounds, and short rounds spread a neighbour's burst of
/// CPU or disk load over both sides instead of one. Every round uses fresh tenants.
const ROUNDS: usize = 8;

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Publish,
    ClaimAck,
}

impl Workload {
    fn label(self) -> &'static str {
        match self {
            Workload::Publish => "publish",
            Workload::ClaimAck => "claim+ack",
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let store_args = match args::parse(std::env::args().skip(1)) {
        Ok(Command::Store(store_args)) => store_args,
        Ok(Command::Hints(hints_args)) => return hints::main(hints_args).await,
        Ok(Command::Callbacks(callbacks_args)) => return callbacks::main(callbacks_args).await,
        Ok(Command::Http(http_args)) => return http::main(http_args).await,
        Ok(Command::Trust(trust_args)) => return trust::main(trust_args).await,
        Ok(Command::Publish(publish_args)) => return publishing::main(publish_args).await,
        Ok(Command::Fairness(fairness_args)) => return fairness::main(fairness_args).await,
        Ok(Command::Galera(galera_args)) => return galera::main(galera_args).await,
        Ok(Command::Agent(agent_args)) => return agent::main(agent_args).await,
        Ok(Command::History(history_args)) => return history::main(history_args).await,
        Ok(Command::ReadView(readview_args)) => return readview::main(readview_args).await,
        Ok(Command::Soak(soak_args)) => return soak::main(soak_args).await,
        Ok(Command::HintsIdleClients(addr)) => return hints::idle_clients(addr).await,
        Ok(Command::Streams(streams_args)) => return streams::main(streams_args).await,
        Ok(Command::StreamsClients(addr)) => return streams_clients::clients(addr).await,
        Ok(Command::Node { database_url, listen, history, settings }) => {
            return node::serve_child(database_url, listen, history, settings).await;
        }
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            eprintln!("inbox-bench: {problem}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    mysql_db::report_in_fresh_database(String::new(), |db| {
        run_store_bench(store_args, db.name.clone(), db.url.clone())
    })
    .await
}

/// Connects both sides, measures every row and returns the rendered report.
async fn run_store_bench(store_args: StoreArgs, database: String, url: String) -> Result<String, BenchError> {
    let subjects = Subjects::connect(&url).await?;
    let measured = measure_rows(&subjects, &store_args).await;
    let server_version = server_version(&subjects).await;
    subjects.close().await;
    let mut rows = measured?;

    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let notes = [
        format!(
            "server {} ({database}), {cores} cores, {CONNECTIONS_MAX} connections per pool",
            server_version.unwrap_or_else(|_| "of unknown version".to_owned())
        ),
        format!(
            "publish: {} publishes per row, one event to one of {} recipients each",
            store_args.publishes,
            publish::RECIPIENTS
        ),
        format!(
            "claim+ack: {} seeded events per row on one recipient, batches of {}",
            store_args.events,
            claim_ack::BATCH_EVENTS
        ),
        format!(
            "each row: {} rounds per side (store, raw, raw, store, store, raw, ...); a tenant per side",
            ROUNDS
        ),
    ];
    Ok(report::render(
        "inbox-bench store: inbox_store::SqlStore vs raw sqlx running the same statements",
        &notes,
        &mut rows,
    ))
}

async fn measure_rows(subjects: &Subjects, store_args: &StoreArgs) -> Result<Vec<Row>, BenchError> {
    let warm = *CONCURRENCY_LEVELS.iter().max().unwrap_or(&1);
    for side in [Side::Store, Side::Raw] {
        eprintln!("warming up {}", side.as_str());
        publish::run(subjects, side, tenant("warmup-publish", warm, side), warm, 0..WARMUP_PUBLISHES).await?;
        claim_ack::run(
            subjects,
            side,
            tenant("warmup-claim", warm, side),
            warm,
            WARMUP_EVENTS,
            Inboxes::Shared,
        )
        .await?;
    }

    let mut rows = Vec::new();
    for workload in [Workload::Publish, Workload::ClaimAck] {
        for concurrency in CONCURRENCY_LEVELS {
            let total = match workload {
                Workload::Publish => store_args.publishes,
                Workload::ClaimAck => store_args.events,
            };
            let mut store = Measured::default();
            let mut raw = Measured::default();
            for round in 0..ROUNDS {
                let share = round_range(total, round);
                if share.is_empty() {
                    continue;
                }
                for side in round_order(round) {
                    let measured = match workload {
                        // One tenant per row and side: the rounds continue one another.
                        Workload::Publish => {
                            let tenant = tenant("publish", concurrency, side);
                            publish::run(subjects, side, tenant, concurrency, share.clone()).await?
                        }
                        // A fresh backlog per round, seeded off the clock.
                        Workload::ClaimAck => {
                            let tenant = tenant(&format!("claim-r{round}"), concurrency, side);
                            claim_ack::run(subjects, side, tenant, concurrency, share.len(), Inboxes::Shared)
                                .await?
                        }
                    };
                    eprintln!(
                        "{} x{concurrency} round {round} {:<5}: {:>6.0} ev/s",
                        workload.label(),
                        side.as_str(),
                        measured.events_per_second()
                    );
                    match side {
                        Side::Store => store.add_round(measured),
                        Side::Raw => raw.add_round(measured),
                    }
                }
            }
            rows.push(Row { workload: workload.label(), concurrency, store, raw });
        }
    }
    Ok(rows)
}

/// Round `round`'s part of `0..total`: consecutive, nearly equal parts, the remainder going
/// to the first rounds.
fn round_range(total: usize, round: usize) -> Range<usize> {
    let start_of = |r: usize| r * (total / ROUNDS) + r.min(total % ROUNDS);
    start_of(round)..start_of(round + 1)
}

/// Which side goes first in a round: the store in even rounds, the baseline in odd ones.
fn round_order(round: usize) -> [Side; 2] {
    if round % 2 == 0 { [Side::Store, Side::Raw] } else { [Side::Raw, Side::Store] }
}

async fn server_version(subjects: &Subjects) -> Result<String, BenchError> {
    let row = sqlx::query("SELECT VERSION() AS version").fetch_one(&subjects.raw).await?;
    let version: String = row.try_get("version")?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_split_the_row_into_consecutive_near_equal_parts() {
        for total in [1, 2, 3, 7, 3_000, 3_001] {
            let parts: Vec<Range<usize>> = (0..ROUNDS).map(|r| round_range(total, r)).collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[ROUNDS - 1].end, total);
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start));
            let lens: Vec<usize> = parts.iter().map(Range::len).collect();
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
        }
    }
}
