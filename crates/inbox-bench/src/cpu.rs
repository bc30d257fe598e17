//! The benchmark process's own CPU time, so the report can show whether the store costs its
//! caller more CPU than the raw baseline does, and the local database server's, when it runs
//! on this machine. CPU time per event holds up better than throughput on a machine shared
//! with other work. Linux only: read from `/proc`, absent elsewhere.

use std::time::Duration;

/// CPU time all threads of this process have run so far, in nanoseconds of precision
/// (`/proc/self/task/*/schedstat`); `None` where `/proc` does not provide it.
pub fn process_cpu() -> Option<Duration> {
    threads_cpu("/proc/self")
}

/// CPU time of process `pid` (all its threads) so far.
pub fn pid_cpu(pid: u32) -> Option<Duration> {
    threads_cpu(&format!("/proc/{pid}"))
}

/// CPU time of a MariaDB or MySQL server running on this machine (the first one found).
pub fn database_server_cpu() -> Option<Duration> {
    let server = std::fs::read_dir("/proc").ok()?.flatten().find(|entry| {
        std::fs::read_to_string(entry.path().join("comm"))
            .is_ok_and(|comm| matches!(comm.trim(), "mariadbd" | "mysqld"))
    })?;
    threads_cpu(&server.path().to_string_lossy())
}

fn threads_cpu(process: &str) -> Option<Duration> {
    let mut total_ns: u64 = 0;
    for entry in std::fs::read_dir(format!("{process}/task")).ok()? {
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
