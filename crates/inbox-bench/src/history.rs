//! `inbox-bench history`: claim+ack with each event's history recorded and without, in one
//! process on one database: two stores that differ only in `StoreConfig::record_history`
//! drain equal backlogs in turns (on, off, off, on, ...; a fresh tenant per round), so load
//! that drifts during a row falls on both. Run on MariaDB (a database of its own) and on a
//! SQLite file. Issue 16's target: recording history costs claim+ack at most 10 %. Beside
//! throughput it prints CPU time per event, which holds up better on a shared machine: this
//! process's (the store's, and with SQLite the database engine's too) and a local MariaDB
//! server's (shared with whatever else uses that server).
//! Then the same comparison through the HTTP API, the service in a child process
//! (`history_http.rs`).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inbox_core::{AckResult, EventBody, EventType, Recipient, RecipientId, RecipientKey, TenantId};
use inbox_store::{AckItem, Acknowledge, ClaimNext, ConnectOptions, Publish, SqlStore, StoreConfig};
use tokio::task::JoinSet;

use crate::report::{Measured, percentile};
use crate::{BenchError, cpu, history_http, mysql_db};

/// Events per claim and per acknowledge, as in the other claim+ack rows.
const BATCH_EVENTS: u32 = 10;
/// Rounds per row and setting; the order alternates so neither setting always goes first.
const ROUNDS: usize = 8;
/// Publishes per seeding batch (not timed).
const SEED_BATCH: usize = 100;
const CONNECTIONS_MAX: u32 = 16;
/// Slowdown of claim+ack with history that issue 16 allows.
const TARGET_SLOWDOWN: f64 = 0.10;

/// Which databases `inbox-bench history` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backends {
    MySql,
    Sqlite,
    Both,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryArgs {
    /// Backlog events per row and setting, spread over the rounds.
    pub events: usize,
    /// The same for the HTTP row (`history_http.rs`).
    pub http_events: usize,
    pub backends: Backends,
}

impl Default for HistoryArgs {
    fn default() -> Self {
        Self { events: 4_000, http_events: 8_000, backends: Backends::Both }
    }
}

pub async fn main(args: HistoryArgs) -> ExitCode {
    let mut failed = false;
    if matches!(args.backends, Backends::MySql | Backends::Both) {
        let (events, http_events) = (args.events, args.http_events);
        let code = mysql_db::report_in_fresh_database(String::new(), move |db| {
            let url = db.url.clone();
            async move {
                let mut out = report("MariaDB/MySQL", &url, events, &[1, 4, 16]).await?;
                out.push_str(&history_http::report("MariaDB/MySQL", &url, http_events).await?);
                Ok(out)
            }
        })
        .await;
        failed |= code != ExitCode::SUCCESS;
    }
    if matches!(args.backends, Backends::Sqlite | Backends::Both) {
        let path = std::env::temp_dir().join(format!("agent-inbox-history-bench-{}.db", std::process::id()));
        let url = format!("sqlite://{}", path.display());
        for part in [
            report("SQLite", &url, args.events, &[1, 4]).await,
            history_http::report("SQLite", &url, args.http_events).await,
        ] {
            match part {
                Ok(text) => print!("{text}"),
                Err(err) => {
                    eprintln!("inbox-bench: {err}");
                    failed = true;
                }
            }
        }
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// One backend's table: a row per concurrency, history on against off.
async fn report(backend: &str, url: &str, events: usize, levels: &[usize]) -> Result<String, BenchError> {
    let mut options = ConnectOptions::new(url);
    options.connections_max = CONNECTIONS_MAX;
    let on = SqlStore::connect(&options, StoreConfig::default()).await?;
    on.migrate().await?;
    let off =
        SqlStore::connect(&options, StoreConfig { record_history: false, ..StoreConfig::default() }).await?;
    let stores = [&on, &off];
    for (n, store) in stores.iter().enumerate() {
        eprintln!("warming up history {}", if n == 0 { "on" } else { "off" });
        drain(store, &tenant(&format!("warmup-{n}")), 16, 320).await?;
    }
    let mut out = format!(
        "inbox-bench history: claim+ack with each event's history recorded (on) and not (off), {backend}\n\
         {events} seeded events per row and setting on one recipient, batches of {BATCH_EVENTS}, \
         {ROUNDS} rounds per setting (on, off, off, on, ...), a fresh tenant per round; \
         cpu: this process per event, db: the local database server per event\n\n"
    );
    out.push_str(&format!(
        "{:<4} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7}\n",
        "conc",
        "on ev/s",
        "off ev/s",
        "on/off",
        "median",
        "on p50",
        "on p99",
        "off p50",
        "off p99",
        "on cpu",
        "off cpu",
        "on db",
        "off db"
    ));
    let mut worst: f64 = 1.0;
    for &concurrency in levels {
        let mut measured = [Measured::default(), Measured::default()];
        // The database server's CPU per setting, summed over rounds (None once a reading fails).
        let mut server = [Some(Duration::ZERO); 2];
        for round in 0..ROUNDS {
            let share = events / ROUNDS + usize::from(round < events % ROUNDS);
            let order = if round % 4 == 0 || round % 4 == 3 { [0, 1] } else { [1, 0] };
            for side in order {
                let name = format!("c{concurrency}-r{round}-{}", if side == 0 { "on" } else { "off" });
                let (one, server_cpu) = drain(stores[side], &tenant(&name), concurrency, share).await?;
                eprintln!("x{concurrency} round {round} {name}: {:>6.0} ev/s", one.events_per_second());
                server[side] = server[side].zip(server_cpu).map(|(sum, more)| sum + more);
                measured[side].add_round(one);
            }
        }
        let [with, without] = &mut measured;
        with.latencies.sort_unstable();
        without.latencies.sort_unstable();
        let ratio = with.events_per_second() / without.events_per_second().max(f64::MIN_POSITIVE);
        let median = median_ratio(&with.round_rates, &without.round_rates);
        worst = worst.min(median);
        let ms = |d: Duration| format!("{:.2}ms", d.as_secs_f64() * 1e3);
        let us = |cpu: Option<Duration>, events: u64| match cpu {
            Some(cpu) if events > 0 && !cpu.is_zero() => {
                format!("{:.0}us", cpu.as_secs_f64() * 1e6 / events as f64)
            }
            _ => "-".to_owned(),
        };
        out.push_str(&format!(
            "{concurrency:<4} {:>9.0} {:>9.0} {:>7.3} {:>7.3} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7}\n",
            with.events_per_second(),
            without.events_per_second(),
            ratio,
            median,
            ms(percentile(&with.latencies, 50.0)),
            ms(percentile(&with.latencies, 99.0)),
            ms(percentile(&without.latencies, 50.0)),
            ms(percentile(&without.latencies, 99.0)),
            us(with.client_cpu, with.events),
            us(without.client_cpu, without.events),
            us(server[0], with.events),
            us(server[1], without.events),
        ));
    }
    let verdict = if worst >= 1.0 - TARGET_SLOWDOWN { "met" } else { "MISSED" };
    out.push_str(&format!(
        "\ntarget: history costs claim+ack at most {:.0} % (median of the rounds' on/off >= {:.2} on every row): {verdict}\n\n",
        TARGET_SLOWDOWN * 100.0,
        1.0 - TARGET_SLOWDOWN
    ));
    on.close().await;
    off.close().await;
    Ok(out)
}

/// The median of the rounds' on/off throughput ratios: each pair ran back to back, so a
/// round's ratio is little affected by load that changes from round to round.
fn median_ratio(on: &[f64], off: &[f64]) -> f64 {
    let mut ratios: Vec<f64> = on.iter().zip(off).map(|(a, b)| a / b.max(f64::MIN_POSITIVE)).collect();
    ratios.sort_unstable_by(f64::total_cmp);
    match ratios.len() {
        0 => 0.0,
        n if n % 2 == 1 => ratios[n / 2],
        n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
    }
}

fn tenant(name: &str) -> TenantId {
    TenantId::new(format!("bench-history-{name}")).expect("a valid tenant id")
}

/// Seeds `n_events` for one recipient of `tenant` (not timed), then drains them with
/// `concurrency` workers, each batch one claim of [`BATCH_EVENTS`] and one acknowledge; also
/// returns the local database server's CPU time meanwhile, when there is one to read.
async fn drain(
    store: &SqlStore,
    tenant: &TenantId,
    concurrency: usize,
    n_events: usize,
) -> Result<(Measured, Option<Duration>), BenchError> {
    let inbox = RecipientKey {
        tenant_id: tenant.clone(),
        recipient: Recipient::agent(RecipientId::new("agent-000")?),
    };
    let event_type = EventType::new("bench.history")?;
    let mut publishes = Vec::with_capacity(n_events);
    for n in 0..n_events {
        let body = EventBody::json(format!("{{\"n\":{n}}}"))?;
        publishes.push(Publish::new(tenant.clone(), vec![inbox.recipient.clone()], event_type.clone(), body));
    }
    for chunk in publishes.chunks(SEED_BATCH) {
        for receipt in store.inbox().publish_batch(chunk).await {
            receipt?;
        }
    }
    let acked = Arc::new(AtomicU64::new(0));
    let (client_before, server_before) = (cpu::process_cpu(), server_cpu(store));
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for _ in 0..concurrency {
        let (store, inbox, acked) = (store.clone(), inbox.clone(), acked.clone());
        workers.spawn(async move {
            let mut measured = Measured::default();
            // Skipped rows are held by another worker: keep going until all are acknowledged.
            while acked.load(Ordering::Relaxed) < n_events as u64 {
                let batch = Instant::now();
                let claim = ClaimNext {
                    inbox: inbox.clone(),
                    session_id: None,
                    limit: BATCH_EVENTS,
                    lease_ms: None,
                    order: Default::default(),
                };
                let claimed = store.inbox().claim_next(&claim).await?;
                if claimed.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let items = claimed
                    .into_iter()
                    .map(|c| AckItem::new(c.event.event_id, c.lease_token, AckResult::Completed))
                    .collect::<Vec<_>>();
                let ack = Acknowledge { inbox: inbox.clone(), session_id: None, items };
                for outcome in store.inbox().acknowledge(&ack).await? {
                    outcome?;
                }
                measured.latencies.push(batch.elapsed());
                measured.events += ack.items.len() as u64;
                acked.fetch_add(ack.items.len() as u64, Ordering::Relaxed);
            }
            Ok::<_, BenchError>(measured)
        });
    }
    let mut total = Measured::default();
    while let Some(worker) = workers.join_next().await {
        total.absorb(worker??);
    }
    total.elapsed = started.elapsed();
    total.client_cpu = cpu::cpu_since(client_before);
    let server = server_cpu(store).zip(server_before).map(|(after, before)| after.saturating_sub(before));
    Ok((total, server))
}

/// The local MariaDB server's CPU time so far; none on SQLite, which runs in this process.
fn server_cpu(store: &SqlStore) -> Option<Duration> {
    (store.dialect() == inbox_store::Dialect::MySql).then(cpu::database_server_cpu).flatten()
}
