//! One timer for every stream's heartbeat. A node may hold tens of thousands of idle streams;
//! instead of a timer each, streams join one of a few buckets in turn, and a single task
//! ticks the buckets one after another, so each bucket (each stream) beats once per
//! `heartbeat_interval` and the beats of a node are spread evenly over the interval rather
//! than all due at once. A stream waits on its bucket's watch channel: no allocation, no
//! timer entry of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use crate::shutdown::Shutdown;

/// Time between two bucket ticks at most: with a 30 s interval, 30 buckets of one second.
const TICK_MAX: Duration = Duration::from_secs(1);
const BUCKETS_MAX: usize = 600;

/// The buckets and the round-robin that assigns streams to them.
#[derive(Debug)]
pub struct Heartbeats {
    buckets: Vec<watch::Sender<u64>>,
    next: AtomicUsize,
}

/// A stream's place in one bucket: [`Beat::tick`] completes once per heartbeat interval.
#[derive(Debug)]
pub struct Beat {
    receiver: watch::Receiver<u64>,
}

impl Heartbeats {
    /// Buckets for `interval`, ticked by a task that runs until `stop` completes.
    pub fn start(interval: Duration, stop: Shutdown) -> Arc<Heartbeats> {
        let count = interval.as_nanos().div_ceil(TICK_MAX.as_nanos()).clamp(1, BUCKETS_MAX as u128) as usize;
        let heartbeats = Arc::new(Heartbeats {
            buckets: (0..count).map(|_| watch::channel(0).0).collect(),
            next: AtomicUsize::new(0),
        });
        let tick = interval / count as u32;
        let ticking = heartbeats.clone();
        tokio::spawn(async move {
            let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
            timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut bucket = 0;
            loop {
                tokio::select! {
                    _ = timer.tick() => {}
                    () = stop.cancelled() => return,
                }
                ticking.buckets[bucket].send_modify(|beats| *beats = beats.wrapping_add(1));
                bucket = (bucket + 1) % ticking.buckets.len();
            }
        });
        heartbeats
    }

    /// A place for a new stream, in the next bucket: its first beat comes within one interval.
    pub fn join(&self) -> Beat {
        let bucket = self.next.fetch_add(1, Ordering::Relaxed) % self.buckets.len();
        Beat { receiver: self.buckets[bucket].subscribe() }
    }
}

impl Beat {
    /// Completes at this stream's next heartbeat. Cancel-safe. Never completes once the ticking
    /// task has stopped (the node is shutting down, and streams end on that).
    pub async fn tick(&mut self) {
        if self.receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
