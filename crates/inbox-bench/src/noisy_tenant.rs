//! The noisy-tenant part of `inbox-bench fairness` (issue 31): through one node as shipped (a
//! child process, on MariaDB), tenant B publishes 50 events a second to one agent, whose SSE
//! stream reports each hint, first alone and then while tenant A floods publishes at full speed
//! from 32 connections; the phases alternate. Per phase: B's publish p50/p99 and publish→hint
//! p50/p99 (from the publish request's start to the stream's hint for that head), and A's
//! publishes (and refusals) per second; once with the tenant request limit as shipped (A's
//! connections wait out `Retry-After` on a 429, as the SDKs do), once with limits lifted. Target: B's p99s with A flooding within 2× of B alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_core::TenantId;
use inbox_server::{CallerKind, TokenService};
use serde_json::json;
use tokio::task::JoinSet;

use crate::BenchError;
use crate::hints::{open_sse, read_hints};
use crate::node::Node;
use crate::report::percentile;

/// B's pace: 50 publishes a second.
const B_PACE: Duration = Duration::from_millis(20);
/// A's connections.
const A_PUBLISHERS: usize = 32;
/// A's recipients, round robin.
const A_RECIPIENTS: usize = 100;
/// Phases, alternating alone and flooded.
const PHASES: usize = 4;
/// The target ratio.
const TARGET: f64 = 2.0;

struct Phase {
    flooded: bool,
    publish: Vec<Duration>,
    hint: Vec<Duration>,
    a_rate: f64,
    /// A's publishes refused per second (429, its tenant's request limit).
    a_refused: f64,
}

/// The report section, `seconds` per phase: with the node's per-tenant request limit as shipped
/// (2,000 requests/s, which A's flood runs into) and with limits lifted (A at full speed).
pub async fn section(url: &str, seconds: u64) -> Result<String, BenchError> {
    let shipped = inbox_server::config::Config::default().limits.tenant_requests_per_second;
    let mut out = String::new();
    for (label, rate) in [("limits lifted", None), ("tenant request limit as shipped", Some(shipped))] {
        out.push_str(&variant(url, seconds, label, rate).await?);
    }
    Ok(out)
}

async fn variant(url: &str, seconds: u64, label: &str, rate: Option<u32>) -> Result<String, BenchError> {
    let store = inbox_store::SqlStore::connect(
        &inbox_store::ConnectOptions::new(url),
        inbox_store::StoreConfig::default(),
    )
    .await?;
    store.migrate().await?;
    crate::secrets::prepare(&store, url).await?;
    let settings = crate::node::NodeSettings {
        log: Some("info".into()),
        tenant_requests_per_second: rate,
        ..Default::default()
    };
    let node = Node::spawn_with(url, true, &settings).await?;
    let tokens =
        TokenService::new(store, &Node::config(url)).await.map_err(|e| -> BenchError { e.into() })?;
    // Fresh tenants per variant, so B's agent's heads start at 1.
    let suffix = if rate.is_some() { "shipped" } else { "lifted" };
    let noisy = crate::node::publisher_token(&tokens, &TenantId::new(format!("noisy-{suffix}"))?).await?;
    let quiet_tenant = TenantId::new(format!("quiet-{suffix}"))?;
    let quiet = crate::node::publisher_token(&tokens, &quiet_tenant).await?;
    let agent = crate::node::token(
        &tokens,
        quiet_tenant.as_str(),
        "quiet-agent",
        CallerKind::Agent,
        inbox_server::tokens::AGENT_SCOPES,
    )
    .await?;

    let mut phases = Vec::new();
    let mut published = 0usize;
    for n in 0..PHASES {
        let flooded = n % 2 == 1;
        eprintln!(
            "noisy tenant: phase {} of {PHASES}, {}",
            n + 1,
            if flooded { "A flooding" } else { "B alone" }
        );
        let phase = run_phase(&node, &noisy, &quiet, &agent, flooded, seconds, &mut published).await?;
        phases.push(phase);
    }
    node.stop().await;

    let mut out = format!(
        "\nnoisy tenant, {label}: B publishes 50/s to one agent (SSE hints), alone and while A floods from 32 connections\n\n",
    );
    out.push_str("| phase | B publish p50 ms | B publish p99 ms | B publish→hint p50 ms | B publish→hint p99 ms | A publishes/s (refused/s) |\n|---|---|---|---|---|---|\n");
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    for phase in &mut phases {
        phase.publish.sort_unstable();
        phase.hint.sort_unstable();
        out.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
            if phase.flooded { "A flooding" } else { "B alone" },
            ms(percentile(&phase.publish, 50.0)),
            ms(percentile(&phase.publish, 99.0)),
            ms(percentile(&phase.hint, 50.0)),
            ms(percentile(&phase.hint, 99.0)),
            if phase.flooded { format!("{:.0} ({:.0})", phase.a_rate, phase.a_refused) } else { "-".into() },
        ));
    }
    let p99 = |flooded: bool, hint: bool| {
        let mut all: Vec<Duration> = phases
            .iter()
            .filter(|p| p.flooded == flooded)
            .flat_map(|p| if hint { p.hint.clone() } else { p.publish.clone() })
            .collect();
        all.sort_unstable();
        percentile(&all, 99.0)
    };
    for (what, hint) in [("publish", false), ("publish→hint", true)] {
        let ratio = p99(true, hint).as_secs_f64() / p99(false, hint).as_secs_f64().max(1e-9);
        out.push_str(&format!(
            "B {what} p99 flooded / alone: {ratio:.2} (target at most {TARGET:.0}: {})\n",
            if ratio <= TARGET { "met" } else { "missed" }
        ));
    }
    Ok(out)
}

async fn run_phase(
    node: &Node,
    noisy: &str,
    quiet: &str,
    agent: &str,
    flooded: bool,
    seconds: u64,
    published: &mut usize,
) -> Result<Phase, BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let a_done = Arc::new(AtomicU64::new(0));
    let a_refused = Arc::new(AtomicU64::new(0));
    let mut flood = JoinSet::new();
    if flooded {
        for worker in 0..A_PUBLISHERS {
            let (client, base, token) = (node.client.clone(), node.base.clone(), noisy.to_owned());
            let (stop, done, refused) = (stop.clone(), a_done.clone(), a_refused.clone());
            flood.spawn(async move {
                let mut n = worker;
                while !stop.load(Ordering::Relaxed) {
                    let body = json!({"recipients": [format!("a-{}", n % A_RECIPIENTS)], "event_type": "bench.flood", "payload": {"n": n}});
                    let answer = client.post(format!("{base}/v1/events")).bearer_auth(&token).json(&body).send().await;
                    match answer {
                        Ok(answer) if answer.status().is_success() => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        // As the SDKs do: wait out Retry-After (bounded, so the phase can end).
                        Ok(answer) if answer.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            let seconds = answer
                                .headers()
                                .get(reqwest::header::RETRY_AFTER)
                                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                                .unwrap_or(1);
                            tokio::time::sleep(Duration::from_secs(seconds.min(2))).await;
                        }
                        _ => {}
                    }
                    n += A_PUBLISHERS;
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let publishes = (seconds * 1_000 / B_PACE.as_millis() as u64) as usize;
    let seen = Arc::new(Mutex::new(vec![None; *published + publishes + 2]));
    let reader = tokio::spawn(read_hints(open_sse(node, agent).await?, seen.clone()));
    let (a_before, refused_before) = (a_done.load(Ordering::Relaxed), a_refused.load(Ordering::Relaxed));
    let started_phase = Instant::now();
    let mut pace = tokio::time::interval(B_PACE);
    let mut sent = Vec::with_capacity(publishes);
    let mut publish = Vec::with_capacity(publishes);
    for n in 0..publishes {
        pace.tick().await;
        let started = Instant::now();
        let answer = node
            .client
            .post(format!("{}/v1/events", node.base))
            .bearer_auth(quiet)
            .json(&json!({"recipients": ["quiet-agent"], "event_type": "bench.quiet", "payload": {"n": n}}))
            .send()
            .await?;
        if !answer.status().is_success() {
            return Err(format!("B's publish answered {}", answer.status()).into());
        }
        sent.push(started);
        publish.push(started.elapsed());
    }
    let elapsed = started_phase.elapsed().as_secs_f64();
    let a_rate = (a_done.load(Ordering::Relaxed) - a_before) as f64 / elapsed;
    let a_refused = (a_refused.load(Ordering::Relaxed) - refused_before) as f64 / elapsed;
    let last = *published + publishes;
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.lock().expect("hint log")[last].is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while flood.join_next().await.is_some() {}
    reader.abort();
    // A head is learned at the first hint of any head at or past it (hints coalesce).
    let seen = seen.lock().expect("hint log").clone();
    let mut earliest: Option<Instant> = None;
    let mut hint = vec![Duration::MAX; publishes];
    for n in (0..publishes).rev() {
        let head = *published + n + 1;
        earliest = match (seen[head], earliest) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        if let Some(at) = earliest {
            hint[n] = at.saturating_duration_since(sent[n]);
        }
    }
    *published = last;
    Ok(Phase { flooded, publish, hint, a_rate, a_refused })
}
