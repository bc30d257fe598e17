//! The open-files limit a serving node needs: one descriptor for each open stream
//! (`streams_max`), and a reserve for the database pool, requests in flight and files. Systems
//! often start services with a soft limit of 1,024 and a far higher hard limit; `serve` raises
//! the soft limit as far as it needs (up to the hard limit) and says so when that falls short,
//! naming the limit, rather than letting the kernel refuse connections past it.

use inbox_server::Config;

/// Descriptors kept for everything but streams.
const RESERVE: u64 = 1_024;

/// Raises the soft open-files limit to what `config` needs, or warns that it cannot.
pub fn raise_for(config: &Config) {
    let wanted = u64::from(config.limits.streams_max) + RESERVE;
    match rlimit::increase_nofile_limit(wanted) {
        Ok(limit) if limit >= wanted => tracing::debug!(limit, "open-files limit"),
        Ok(limit) => tracing::warn!(
            limit,
            streams_max = config.limits.streams_max,
            "the open-files limit ({limit}) is below streams_max ({}) plus {RESERVE} for the rest: past about \
             {} streams the kernel refuses connections; raise it (LimitNOFILE= in the systemd unit, \
             ulimit -n) or lower streams_max",
            config.limits.streams_max,
            limit.saturating_sub(RESERVE)
        ),
        Err(err) => tracing::warn!(error = %err, "cannot read or raise the open-files limit"),
    }
}
