//! The store's connection pools: nothing of theirs keeps running past a store's last use, so
//! a short command (`token issue`, `migrate`, `keys`, ...) always gets to exit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inbox_store::{ConnectOptions, SqlStore};

case! {
    /// A store's pools run no maintenance task that can hold a thread for ever (issue 40:
    /// `token issue` at 98 % of a core, its runtime never finishing its drop). sqlx's pool
    /// maintenance task, spawned when a pool has an idle timeout or a maximum lifetime (sqlx
    /// defaults: 10 and 30 minutes), sizes each sweep by the pool's idle count, and that count
    /// wraps to 2^64 - 1 for a moment whenever a connection returned by one thread is taken by
    /// another before the returning thread has counted it back: a sweep that reads it then
    /// loops without awaiting, and its thread never gets back to the runtime.
    ///
    /// A second store is connected on a runtime of its own whose clock is paused, so any such
    /// task's 10-minute sleeps pass at once and it sweeps on every turn; this test then uses
    /// that store as a short command does, one operation at a time from the main thread of a
    /// multi-thread runtime, with one connection per pool so that each operation waits for
    /// the connection the one before it returns (where the count wraps). The store's runtime
    /// must keep turning, and finish once told to.
    async fn a_store_leaves_no_pool_task_running(h: &Harness) {
        let (url, config, clock) = (h.url.clone(), h.store.config().clone(), h.clock.clone());
        let options = ConnectOptions { connections_max: 1, ..ConnectOptions::new(&url) };
        let beats = Arc::new(AtomicU64::new(0));
        let (store_sender, store_receiver) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (exited, has_exited) = std::sync::mpsc::channel();
        let beating = beats.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let store = SqlStore::connect_with_clock(&options, config, clock)
                    .await
                    .expect("connect the second store");
                tokio::time::pause();
                let _ = store_sender.send(store);
                // Counts the runtime's turns: a task that never yields stops the count. Its
                // sleep is longer than sqlx's longest period, so the paused clock jumps to
                // the maintenance task's wake-ups first, not to this one's.
                let heartbeat = async {
                    loop {
                        tokio::time::sleep(Duration::from_secs(3_600)).await;
                        beating.fetch_add(1, Ordering::Relaxed);
                    }
                };
                tokio::select! {
                    _ = stopped => {}
                    () = heartbeat => {}
                }
            });
            drop(runtime);
            let _ = exited.send(());
        });
        let store = store_receiver.await.expect("the second store connected");

        let until = h.store.now().plus_ms(3_600_000);
        let started = Instant::now();
        let mut n_operations = 0u64;
        let mut failure = None;
        // A spinning task can also strand I/O its runtime drives, so every step has a deadline.
        let step = Duration::from_secs(5);
        let (mut last_beats, mut last_beat_at) = (0, Instant::now());
        while started.elapsed() < Duration::from_secs(3) && failure.is_none() {
            let now_beats = beats.load(Ordering::Relaxed);
            if now_beats != last_beats {
                (last_beats, last_beat_at) = (now_beats, Instant::now());
            } else if last_beat_at.elapsed() > Duration::from_millis(500) {
                break; // the store's runtime stopped turning: no need to go on
            }
            let hash = inbox_store::random_bytes::<32>();
            let done = tokio::time::timeout(step, async {
                store.tokens().sign_out(&hash, until).await?;
                assert!(store.tokens().is_signed_out(&hash).await?);
                store.ping().await
            })
            .await;
            match done {
                Ok(Ok(())) => n_operations += 3,
                Ok(Err(err)) => failure = Some(err.to_string()),
                Err(_) => failure = Some(format!("an operation took more than {step:?}")),
            }
        }
        let used_for = started.elapsed();
        let closed = tokio::time::timeout(step, store.close()).await.is_ok();
        drop(store);
        let _ = stop.send(());
        let finished =
            tokio::task::spawn_blocking(move || has_exited.recv_timeout(Duration::from_secs(10)).is_ok())
                .await
                .expect("the waiting thread");
        assert!(
            finished && closed && failure.is_none(),
            "after {n_operations} operations in {:?} (failure: {failure:?}; closed within {step:?}: \
             {closed}), the store's runtime {} within 10 s of being told to stop: a pool task never yields",
            used_for,
            if finished { "finished" } else { "did not finish" }
        );
    }
}
