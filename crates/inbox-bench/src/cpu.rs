//! The benchmark process's own CPU time, so the report can show whether the store costs its
//! caller more CPU than the raw baseline does (the database server's time is not included).
//! Linux only: read from `/proc`, absent elsewhere.

use std::time::Duration;

/// CPU time all threads of this process have run so far, in nanoseconds of precision
/// (`/proc/self/task/*/schedstat`); `None` where `/proc` does not provide it.
pub fn process_cpu() -> Option<Duration> {
    let mut total_ns: u64 = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        // A thread that exits between the listing and the read simply no longer counts.
        let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else { continue };
        total_ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total_ns))
}

/// CPU time spent since `before`, when both readings exist.
pub fn cpu_since(before: Option<Duration>) -> Option<Duration> {
    Some(process_cpu()?.saturating_sub(before?))
}
