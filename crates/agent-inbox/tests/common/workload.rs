//! A workload for the fault tests that cut a node, a client or a database member off, and the
//! checker over its full history: a publisher and, for each recipient, a competing consumer on
//! every node; every answer judged as it comes (within the bound, and an error only from a node
//! marked cut off); and at the end the invariants: every publish answered 201 acknowledged, no
//! event held by two live leases, nothing acknowledged twice, stale tokens refused, each
//! recipient's sequence dense and holding only what was published. [`HeldLeases`] are leases
//! taken on the node about to be cut, to be reclaimed elsewhere.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// How long any answer may take (the node's connection wait plus one statement's, with room for
/// a loaded machine), and the consumers' lease.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub answer_within: Duration,
    pub lease_seconds: u64,
}

/// The workload's tasks and what they saw.
pub struct Workload {
    shared: Arc<Shared>,
    bases: Vec<String>,
    agents: Vec<(&'static str, String)>,
    tasks: Vec<JoinHandle<()>>,
    started: Instant,
}

struct Shared {
    seen: Mutex<History>,
    /// Which nodes are cut off (or their database is) right now: only they may answer 503.
    cut: Mutex<Vec<bool>>,
    stop_publishing: AtomicBool,
    stop_consuming: AtomicBool,
    bounds: Bounds,
}

#[derive(Default)]
struct History {
    /// (recipient, publisher) -> event ids answered 201, in the order they were published.
    committed: BTreeMap<(String, usize), Vec<String>>,
    /// Publishes answered with an error, (publisher, n): one may still have committed (a COMMIT
    /// whose answer was lost), and then its event is in the inbox.
    uncertain_publishes: HashSet<(u64, u64)>,
    /// event id -> (publisher, n), from the payloads claims returned.
    payloads: HashMap<String, (u64, u64)>,
    /// event id -> the live lease (token, expiry by this process's clock, no later than the
    /// database's).
    leases: HashMap<String, (String, Instant)>,
    /// event id -> acknowledgements answered as done.
    acked: HashMap<String, u32>,
    /// Events whose acknowledgement got an error: it may have committed.
    uncertain_acks: HashSet<String>,
    /// Tokens of leases that ended without an ack and were replaced by a later claim.
    stale_tokens: Vec<(usize, String, String)>,
    /// Per node: answers given, and 503 database_unavailable answers while it was cut off.
    answered: Vec<u64>,
    outage_answers: Vec<u64>,
    /// The slowest answer per node.
    slowest: Vec<Duration>,
    wrong: Vec<String>,
}

/// What a finished workload saw, for the test's report.
#[derive(Debug)]
pub struct Report {
    pub committed: usize,
    pub outage_answers: Vec<u64>,
    pub slowest: Vec<Duration>,
    pub leases_replaced: usize,
    pub took: Duration,
}

impl Workload {
    /// Starts a publisher on every node of `bases` (sending to the recipients in turn) and, for
    /// each of `agents` (recipient, token), a consumer on every node.
    pub fn start(
        client: &reqwest::Client,
        bases: &[String],
        publisher: &str,
        agents: &[(&'static str, String)],
        bounds: Bounds,
    ) -> Workload {
        let history = History {
            answered: vec![0; bases.len()],
            outage_answers: vec![0; bases.len()],
            slowest: vec![Duration::ZERO; bases.len()],
            ..History::default()
        };
        let shared = Arc::new(Shared {
            seen: Mutex::new(history),
            cut: Mutex::new(vec![false; bases.len()]),
            stop_publishing: AtomicBool::new(false),
            stop_consuming: AtomicBool::new(false),
            bounds,
        });
        let recipients: Vec<&'static str> = agents.iter().map(|(r, _)| *r).collect();
        let mut tasks = Vec::new();
        for (node, base) in bases.iter().enumerate() {
            tasks.push(tokio::spawn(publish(
                shared.clone(),
                client.clone(),
                node,
                base.clone(),
                publisher.to_owned(),
                recipients.clone(),
            )));
            for (r, (_, token)) in agents.iter().enumerate() {
                tasks.push(tokio::spawn(consume(
                    shared.clone(),
                    client.clone(),
                    node,
                    base.clone(),
                    r,
                    token.clone(),
                )));
            }
        }
        Workload { shared, bases: bases.to_vec(), agents: agents.to_vec(), tasks, started: Instant::now() }
    }

    /// Marks node `node` cut off (its 503s count as the outage's) or not.
    pub fn set_cut(&self, node: usize, cut: bool) {
        self.shared.cut.lock().unwrap()[node] = cut;
    }

    /// Answers node `node` has given so far.
    pub fn answered(&self, node: usize) -> u64 {
        self.shared.seen.lock().unwrap().answered[node]
    }

    pub fn outage_answers(&self, node: usize) -> u64 {
        self.shared.seen.lock().unwrap().outage_answers[node]
    }

    /// Waits until at least `n` more answers than `from` come from node `node`.
    pub async fn wait_answers(&self, node: usize, from: u64, n: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while self.answered(node) < from + n {
            assert!(Instant::now() < deadline, "node {node} gave no {n} answers within {within:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the publishers; the consumers go on until every publish answered 201 is
    /// acknowledged (asked through node `check_node`, which must be serving); then the invariants.
    pub async fn drain_and_check(self, client: &reqwest::Client, check_node: usize) -> Report {
        self.shared.stop_publishing.store(true, Ordering::Relaxed);
        let base = &self.bases[check_node];
        let drained = |seen: &History| {
            seen.committed
                .values()
                .flatten()
                .all(|id| seen.acked.contains_key(id) || seen.uncertain_acks.contains(id))
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !drained(&self.shared.seen.lock().unwrap()) {
            assert!(Instant::now() < deadline, "the drain did not finish within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // An uncertain ack that did not commit: its lease runs out and a consumer acks it again.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut open = 0;
            for (_, token) in &self.agents {
                open += super::poll_all(client, base, token)
                    .await
                    .iter()
                    .filter(|e| e["ack_state"] != "acked")
                    .count();
            }
            if open == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{open} events still not acknowledged 30 s after the drain");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.shared.stop_consuming.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("no workload task panicked");
        }
        let seen = std::mem::take(&mut *self.shared.seen.lock().unwrap());
        assert!(
            seen.wrong.is_empty(),
            "answers that should not have reached a client: {:#?}",
            &seen.wrong[..seen.wrong.len().min(20)]
        );
        let all_committed: Vec<&String> = seen.committed.values().flatten().collect();
        assert!(all_committed.len() > 20, "the load ran ({} publishes)", all_committed.len());
        for id in &all_committed {
            assert!(seen.acked.get(*id).copied().unwrap_or(0) <= 1, "{id} acknowledged twice");
            assert!(
                seen.acked.contains_key(*id) || seen.uncertain_acks.contains(*id),
                "{id} was published (201) and never acknowledged"
            );
        }
        let committed_ids: HashSet<&String> = all_committed.iter().copied().collect();
        // An event nobody was told about may exist only if its publish got an error answer.
        let accounted = |id: &String| {
            committed_ids.contains(id)
                || seen.payloads.get(id).is_some_and(|pn| seen.uncertain_publishes.contains(pn))
        };
        assert!(seen.acked.keys().all(accounted), "nothing acknowledged that was not published");
        for (r, id, stale) in seen.stale_tokens.iter().take(20) {
            assert_stale_refused(client, base, &self.agents[*r].1, id, stale).await;
        }
        for (r, (recipient, token)) in self.agents.iter().enumerate() {
            let events = super::poll_all(client, base, token).await;
            let seqs: Vec<u64> = events.iter().map(|e| e["inbox_seq"].as_u64().unwrap()).collect();
            assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{recipient}: a dense sequence");
            let position: HashMap<&str, usize> =
                events.iter().enumerate().map(|(i, e)| (e["event_id"].as_str().unwrap(), i)).collect();
            for p in 0..self.bases.len() {
                let mine = seen.committed.get(&(recipient.to_string(), p)).cloned().unwrap_or_default();
                let at: Vec<usize> = mine.iter().map(|id| position[id.as_str()]).collect();
                assert!(at.windows(2).all(|w| w[0] < w[1]), "{recipient}: publisher {p}'s order is kept");
            }
            assert!(
                events.iter().all(|e| accounted(&e["event_id"].as_str().unwrap().to_owned())),
                "{recipient} ({r}): every event in the inbox was published"
            );
        }
        Report {
            committed: all_committed.len(),
            outage_answers: seen.outage_answers,
            slowest: seen.slowest,
            leases_replaced: seen.stale_tokens.len(),
            took: self.started.elapsed(),
        }
    }
}

/// A stale token (of a lease that ended) acknowledges nothing.
pub async fn assert_stale_refused(client: &reqwest::Client, base: &str, agent: &str, id: &str, stale: &str) {
    let (status, body) = super::post(
        client,
        base,
        agent,
        "/v1/inbox/acknowledge",
        json!({ "acks": [{ "event_id": id, "lease_token": stale, "result": "completed" }] }),
    )
    .await;
    assert!(
        !(status == 200 && body["results"][0]["ack_state"] == "acked"),
        "a stale token was accepted: {body}"
    );
}

impl Shared {
    /// Judges one answer of node `node`: in time, and an error only from a node cut off.
    fn judge(&self, node: usize, what: &str, took: Duration, answer: Result<(u16, &str), String>) -> bool {
        let cut = self.cut.lock().unwrap()[node];
        let mut seen = self.seen.lock().unwrap();
        if took > seen.slowest[node] {
            seen.slowest[node] = took;
        }
        if took > self.bounds.answer_within {
            seen.wrong.push(format!("node {node} {what}: answered after {took:?}: {answer:?}"));
        }
        match answer {
            Ok((status, _)) if status < 300 => {
                seen.answered[node] += 1;
                true
            }
            Ok((503, body)) if cut && body.contains("database_unavailable") => {
                seen.answered[node] += 1;
                seen.outage_answers[node] += 1;
                false
            }
            other => {
                seen.wrong.push(format!("node {node} {what} (cut: {cut}): {other:?}"));
                false
            }
        }
    }
}

async fn send(
    client: &reqwest::Client,
    url: String,
    token: &str,
    body: &Value,
) -> (Duration, Result<(u16, String), String>) {
    let sent = Instant::now();
    let answer = match client.post(url).bearer_auth(token).json(body).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            match response.text().await {
                Ok(text) => Ok((status, text)),
                Err(err) => Err(format!("reading the answer: {err}")),
            }
        }
        Err(err) => Err(err.to_string()),
    };
    (sent.elapsed(), answer)
}

async fn publish(
    shared: Arc<Shared>,
    client: reqwest::Client,
    node: usize,
    base: String,
    token: String,
    recipients: Vec<&'static str>,
) {
    let mut n = 0u64;
    while !shared.stop_publishing.load(Ordering::Relaxed) {
        n += 1;
        let to = recipients[n as usize % recipients.len()];
        let body =
            json!({ "recipients": [to], "event_type": "task.assigned", "payload": { "p": node, "n": n } });
        let (took, answer) = send(&client, format!("{base}/v1/events"), &token, &body).await;
        let done = shared.judge(
            node,
            "publish",
            took,
            answer.as_ref().map(|(s, b)| (*s, b.as_str())).map_err(Clone::clone),
        );
        match answer {
            Ok((201, text)) => {
                let body: Value = serde_json::from_str(&text).unwrap();
                let id = body["deliveries"][0]["event_id"].as_str().unwrap().to_owned();
                shared.seen.lock().unwrap().committed.entry((to.to_owned(), node)).or_default().push(id);
            }
            _ => {
                assert!(!done, "a publish answered {answer:?}");
                shared.seen.lock().unwrap().uncertain_publishes.insert((node as u64, n));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn consume(
    shared: Arc<Shared>,
    client: reqwest::Client,
    node: usize,
    base: String,
    r: usize,
    token: String,
) {
    let lease_seconds = shared.bounds.lease_seconds;
    while !shared.stop_consuming.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let body = json!({ "limit": 5, "lease_seconds": lease_seconds });
        let (took, answer) = send(&client, format!("{base}/v1/inbox/claim"), &token, &body).await;
        let done = shared.judge(
            node,
            "claim",
            took,
            answer.as_ref().map(|(s, b)| (*s, b.as_str())).map_err(Clone::clone),
        );
        if !done {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let (_, text) = answer.unwrap();
        let claims =
            serde_json::from_str::<Value>(&text).unwrap()["claims"].as_array().cloned().unwrap_or_default();
        if claims.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let mut acks = Vec::new();
        {
            let mut seen = shared.seen.lock().unwrap();
            for claim in &claims {
                let id = claim["event_id"].as_str().unwrap().to_owned();
                let lease_token = claim["lease_token"].as_str().unwrap().to_owned();
                let payload = &claim["event"]["payload"];
                if let (Some(p), Some(n)) = (payload["p"].as_u64(), payload["n"].as_u64()) {
                    seen.payloads.insert(id.clone(), (p, n));
                }
                let expires = sent + Duration::from_secs(lease_seconds);
                if let Some((old_token, old_expiry)) =
                    seen.leases.insert(id.clone(), (lease_token.clone(), expires))
                {
                    // A new lease while the old one lived is a double grant.
                    if Instant::now() + Duration::from_millis(200) < old_expiry {
                        seen.wrong.push(format!("{id} claimed again while its lease lived"));
                    }
                    seen.stale_tokens.push((r, id.clone(), old_token));
                }
                if seen.acked.contains_key(&id) {
                    seen.wrong.push(format!("{id} claimed again after it was acknowledged"));
                }
                acks.push(json!({ "event_id": id, "lease_token": lease_token, "result": "completed" }));
            }
        }
        let ids: Vec<String> = acks.iter().map(|a| a["event_id"].as_str().unwrap().to_owned()).collect();
        let body = json!({ "acks": acks });
        let (took, answer) = send(&client, format!("{base}/v1/inbox/acknowledge"), &token, &body).await;
        let done = shared.judge(
            node,
            "acknowledge",
            took,
            answer.as_ref().map(|(s, b)| (*s, b.as_str())).map_err(Clone::clone),
        );
        let mut seen = shared.seen.lock().unwrap();
        if !done {
            seen.uncertain_acks.extend(ids);
            continue;
        }
        let body: Value = serde_json::from_str(&answer.unwrap().1).unwrap();
        for item in body["results"].as_array().cloned().unwrap_or_default() {
            // Not acked: the lease ran out while the ack travelled; the event comes back.
            if item["ack_state"] == "acked" {
                let id = item["event_id"].as_str().unwrap().to_owned();
                let times = seen.acked.entry(id.clone()).or_default();
                *times += 1;
                if *times > 1 {
                    seen.wrong.push(format!("{id} acknowledged twice"));
                }
            }
        }
    }
}

/// Leases taken through the node about to be cut off, on a recipient the workload does not
/// consume, so that the test can show they are reclaimed through another node once they run
/// out, and that their tokens are refused afterwards.
pub struct HeldLeases {
    pub recipient: &'static str,
    /// (event id, lease token).
    pub leases: Vec<(String, String)>,
    /// When the claim was sent: no lease ends before this plus its length.
    pub claimed_at: Instant,
    pub lease_seconds: u64,
}

impl HeldLeases {
    /// Publishes `n` events to `recipient` and claims them through `base`.
    pub async fn take(
        client: &reqwest::Client,
        base: &str,
        publisher: &str,
        agent: &str,
        recipient: &'static str,
        n: usize,
        lease_seconds: u64,
    ) -> HeldLeases {
        for i in 0..n {
            let (status, body) = super::post(
                client,
                base,
                publisher,
                "/v1/events",
                json!({ "recipients": [recipient], "event_type": "task.held", "payload": { "i": i } }),
            )
            .await;
            assert_eq!(status, 201, "{body}");
        }
        let claimed_at = Instant::now();
        let (status, body) = super::post(
            client,
            base,
            agent,
            "/v1/inbox/claim",
            json!({ "limit": n, "lease_seconds": lease_seconds }),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let leases: Vec<(String, String)> = body["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (c["event_id"].as_str().unwrap().to_owned(), c["lease_token"].as_str().unwrap().to_owned())
            })
            .collect();
        assert_eq!(leases.len(), n, "claimed every held event: {body}");
        HeldLeases { recipient, leases, claimed_at, lease_seconds }
    }

    /// Claims the held events through `base` (another node) until every one is reclaimed, and
    /// acknowledges them there; none may come back before its lease ran out. Returns how long
    /// after the hold's claim the last came back.
    pub async fn reclaim_through(
        &self,
        client: &reqwest::Client,
        base: &str,
        agent: &str,
        within: Duration,
    ) -> Duration {
        let lease = Duration::from_secs(self.lease_seconds);
        let mut open: HashSet<&str> = self.leases.iter().map(|(id, _)| id.as_str()).collect();
        let deadline = Instant::now() + within;
        while !open.is_empty() {
            assert!(Instant::now() < deadline, "{} held events not reclaimed within {within:?}", open.len());
            let (status, body) =
                super::post(client, base, agent, "/v1/inbox/claim", json!({ "limit": self.leases.len() }))
                    .await;
            assert_eq!(status, 200, "a claim on a serving node: {body}");
            // A lease the database granted to the hold ends no sooner than `lease` after the
            // hold's claim was sent, and a reclaim is granted before its answer arrives.
            let answered = self.claimed_at.elapsed();
            let mut acks = Vec::new();
            for claim in body["claims"].as_array().unwrap() {
                let id = claim["event_id"].as_str().unwrap();
                assert!(
                    answered + Duration::from_millis(200) >= lease,
                    "{id} reclaimed {answered:?} after it was leased for {lease:?}"
                );
                assert!(open.remove(id), "{id} reclaimed twice, or was never held");
                acks.push(
                    json!({ "event_id": id, "lease_token": claim["lease_token"], "result": "completed" }),
                );
            }
            if !acks.is_empty() {
                let (status, body) =
                    super::post(client, base, agent, "/v1/inbox/acknowledge", json!({ "acks": acks })).await;
                assert_eq!(status, 200, "{body}");
                assert!(
                    body["results"].as_array().unwrap().iter().all(|r| r["ack_state"] == "acked"),
                    "{body}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.claimed_at.elapsed()
    }

    /// Every held token is refused now that its lease was reclaimed.
    pub async fn assert_refused(&self, client: &reqwest::Client, base: &str, agent: &str) {
        for (id, token) in &self.leases {
            assert_stale_refused(client, base, agent, id, token).await;
        }
    }
}
