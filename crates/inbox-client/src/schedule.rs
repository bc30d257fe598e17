//! The agent's time-based policies as pure functions: the adaptive poll interval, reconnect
//! backoff, when to heartbeat a lease and refresh an access token, how long a long poll may
//! wait behind a proxy that cuts requests, when a transport has failed often enough to fall
//! back, and wall-clock jump detection. Time and randomness arrive as arguments (a `jitter`
//! is a number in `[0, 1]`), so tests pin them; only the runner reads clocks.

use std::time::Duration;

/// Adaptive polling: the interval drops to `interval_min` right after a poll that found work
/// and grows by `growth` per idle poll up to `interval_max`. Jitter only ever shortens a wait
/// (by up to `jitter_fraction`), so the ceiling is a promise and agents that went idle
/// together drift apart instead of polling in lockstep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollSchedule {
    pub interval_min: Duration,
    pub interval_max: Duration,
    pub growth: f64,
    pub jitter_fraction: f64,
}

impl Default for PollSchedule {
    fn default() -> Self {
        Self {
            interval_min: Duration::from_secs(1),
            interval_max: Duration::from_secs(300),
            growth: 2.0,
            jitter_fraction: 0.2,
        }
    }
}

impl PollSchedule {
    /// The nominal interval after a poll: the minimum when it found work (or there was no
    /// previous interval), else the previous one grown, capped at the maximum.
    pub fn next_nominal(&self, previous: Option<Duration>, found_work: bool) -> Duration {
        let min = self.interval_min.min(self.interval_max);
        match previous {
            Some(previous) if !found_work => {
                let grown = previous.max(min).as_secs_f64() * self.growth.max(1.0);
                Duration::from_secs_f64(grown.min(self.interval_max.as_secs_f64())).max(min)
            }
            _ => min,
        }
    }

    /// The wait actually slept for a nominal interval: shortened by up to `jitter_fraction`.
    pub fn jittered(&self, nominal: Duration, jitter: f64) -> Duration {
        let cut = self.jitter_fraction.clamp(0.0, 1.0) * jitter.clamp(0.0, 1.0);
        nominal.mul_f64(1.0 - cut)
    }

    /// How many polls an agent idle from the start makes in `span`, counting the jitter as
    /// its mean: the cost of an idle agent, for the benchmark table.
    pub fn polls_within(&self, span: Duration) -> u64 {
        let mut elapsed = Duration::ZERO;
        let mut nominal = None;
        let mut polls = 0;
        loop {
            let next = self.next_nominal(nominal, false);
            elapsed += self.jittered(next, 0.5);
            if elapsed > span {
                return polls;
            }
            polls += 1;
            nominal = Some(next);
        }
    }
}

/// What one runner cycle found, for choosing when to run the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleFound {
    /// Events claimed.
    pub claimed: usize,
    /// The claim was full: more may be claimable right away.
    pub more: bool,
    /// When an event not claimable yet may become so (a retry delay, another's lease).
    pub until_change: Option<Duration>,
}

/// The wait before the next cycle, and the new nominal poll interval. While hints flow
/// (`connected`) the timer is a safety net at the schedule's ceiling; otherwise it is the
/// adaptive interval, back at the minimum after a cycle that found work. A known change
/// comes sooner, plus `slack` for the service to notice it (an expired lease waits for its
/// scavenger).
pub fn next_cycle_after(
    schedule: &PollSchedule,
    nominal: Option<Duration>,
    found: CycleFound,
    connected: bool,
    slack: Duration,
    jitter: f64,
) -> (Duration, Option<Duration>) {
    // Work resets the interval, even when the claim was full and the cycle repeats at once:
    // the next idle poll after the batch then comes after the minimum.
    let nominal = if found.claimed > 0 { None } else { nominal };
    if found.more {
        return (Duration::ZERO, nominal);
    }
    let (base, nominal) = if connected {
        (schedule.interval_max, None)
    } else {
        let next = schedule.next_nominal(nominal, found.claimed > 0);
        (schedule.jittered(next, jitter), Some(next))
    };
    let wait = found.until_change.map_or(base, |d| (d + slack).min(base));
    (wait.max(Duration::from_millis(20)), nominal)
}

/// The earliest known time (epoch ms) an open event becomes claimable without a hint to say
/// so: a retry delay (one this runner released, or one a scan saw), another process's lease
/// (the service's scavenger returns it within its period after it ends), a delayed delivery.
/// The runner keeps it across cycles that skip the scan (a handler finished right after one)
/// and wakes for it even while a stream is connected; forgetting it leaves such an event
/// claimable and unclaimed until the timer's safety net or an unrelated publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimableAt {
    at_ms: Option<i64>,
}

impl ClaimableAt {
    /// Something becomes claimable at `at_ms`: the earlier time is kept.
    pub fn note(&mut self, at_ms: i64) {
        self.at_ms = Some(self.at_ms.map_or(at_ms, |known| known.min(at_ms)));
    }

    /// A scan that began at `started_ms` read the inbox and found `next_change_ms`. A time at
    /// or before the scan's start is settled by it: what was claimable the scan counted, and
    /// what was still not (a lease the scavenger has yet to return) it reported again. Later
    /// times are kept: the scan may have read the event before it was released.
    pub fn scanned(&mut self, started_ms: i64, next_change_ms: Option<i64>) {
        self.at_ms = self.at_ms.filter(|&at| at > started_ms);
        if let Some(at) = next_change_ms {
            self.note(at);
        }
    }

    /// How long from `now_ms` until then (zero when it has passed); `None` when nothing is due.
    pub fn until(&self, now_ms: i64) -> Option<Duration> {
        self.at_ms.map(|at| Duration::from_millis((at - now_ms).max(0) as u64))
    }
}

/// The delay to release an event with so that it comes back no sooner than `after`: the
/// wire takes whole seconds, so a fraction rounds up (1.5 s is 2 s), capped at the service's
/// maximum of a week.
pub fn retry_after_seconds(after: Duration) -> u64 {
    let whole = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    whole.min(RETRY_AFTER_SECONDS_MAX)
}

/// The longest retry delay the service takes.
pub const RETRY_AFTER_SECONDS_MAX: u64 = inbox_core::limits::RETRY_AFTER_SECONDS_MAX;

/// The longest `Retry-After` a runner honours: a wrong header cannot park it for a day.
pub const RETRY_AFTER_HONOURED_MAX: Duration = Duration::from_secs(300);

/// A retry the service asked to delay (429, 503) waits the longer of the runner's own `delay`
/// and the service's `Retry-After`, honoured up to [`RETRY_AFTER_HONOURED_MAX`].
pub fn honour_retry_after(delay: Duration, retry_after: Option<Duration>) -> Duration {
    retry_after.map_or(delay, |asked| delay.max(asked.min(RETRY_AFTER_HONOURED_MAX)))
}

/// A `Retry-After` header as whole seconds from `now_ms` (RFC 9110 §10.2.3): delay-seconds,
/// or an HTTP date in the IMF-fixdate form servers send (`Tue, 01 Jan 2030 00:00:30 GMT`),
/// a fraction rounded up (never sooner than asked) and a past date as 0. Anything else, such
/// as a negative or fractional number, is no answer.
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(value.parse::<u64>().unwrap_or(u64::MAX));
    }
    let at_ms = parse_imf_fixdate(value)?;
    let ahead_ms = u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0);
    Some(ahead_ms.div_ceil(1000))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` as epoch milliseconds.
fn parse_imf_fixdate(value: &str) -> Option<i64> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (day_name, rest) = value.split_once(", ")?;
    let mut parts = rest.split(' ');
    let (day, month, year, time, zone) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let digits = |text: &str, n: usize| text.len() == n && text.bytes().all(|b| b.is_ascii_digit());
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let clock: Vec<&str> = time.split(':').collect();
    let well_formed = DAYS.contains(&day_name)
        && digits(day, 2)
        && digits(year, 4)
        && zone == "GMT"
        && parts.next().is_none()
        && clock.len() == 3
        && clock.iter().all(|part| digits(part, 2));
    if !well_formed {
        return None;
    }
    inbox_api::time::parse_utc(&format!("{year}-{month:02}-{day}T{time}Z")).ok()
}

/// Reconnect backoff: doubles from `base` to `max` with "equal jitter" (half fixed, half
/// random), so a fleet that lost the server at once does not return at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { base: Duration::from_secs(1), max: Duration::from_secs(300) }
    }
}

impl Backoff {
    /// While the service does not answer at all, the runner alone probes it (the transports
    /// stand by): from 0.5 s doubling to a 2 s cap, each delay between half and all of its
    /// nominal value. A service that returns is found within about 2 s of its return, at a
    /// cost of one request every 1.5 s on average per agent while it is away (a refused
    /// connection costs the host next to nothing; a service that answers with `Retry-After`
    /// is asked again no sooner than it said).
    pub const OUTAGE: Backoff = Backoff { base: Duration::from_millis(500), max: Duration::from_secs(2) };

    /// The delay before retry number `attempt` (1 for the first retry).
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        let full = self.base.saturating_mul(1u32 << exponent).min(self.max);
        let half = full / 2;
        half + (full - half).mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// When to extend a lease that is `lease` long: at half of it, so one lost heartbeat still
/// leaves time for a second before the lease runs out.
pub fn heartbeat_delay(lease: Duration) -> Duration {
    (lease / 2).max(Duration::from_millis(200))
}

/// How soon to try again after a heartbeat failed on the network: often enough to get
/// several tries in before the lease ends.
pub fn heartbeat_retry_delay(lease: Duration) -> Duration {
    (lease / 8).max(Duration::from_millis(100))
}

/// Whether an access token `lifetime` long and `age` old should be refreshed before its next
/// use: when less than a fifth of its life (between 5 s and 2 min) remains, so a request
/// never leaves with a token that expires on the way.
pub fn refresh_due(age: Duration, lifetime: Duration) -> bool {
    let margin = (lifetime / 5).clamp(Duration::from_secs(5), Duration::from_secs(120));
    age + margin >= lifetime
}

/// The long-poll wait in whole seconds, adapted to intermediaries: a proxy that cuts requests
/// after some seconds sets a ceiling three quarters of that; waits that come back normally
/// grow by one second towards the ceiling or the configured maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongPollWait {
    pub wait_seconds: u32,
    pub max_seconds: u32,
    /// Learned from cuts; never raised again in this process.
    pub ceiling_seconds: Option<u32>,
}

impl LongPollWait {
    pub fn new(max_seconds: u32) -> Self {
        let max_seconds = max_seconds.max(1);
        Self { wait_seconds: max_seconds, max_seconds, ceiling_seconds: None }
    }

    /// A long poll was cut (connection closed, no answer) after `elapsed`.
    pub fn on_cut(&mut self, elapsed: Duration) {
        let ceiling = ((elapsed.as_secs_f64() * 0.75) as u32).max(1);
        let ceiling = self.ceiling_seconds.map_or(ceiling, |c| c.min(ceiling));
        self.ceiling_seconds = Some(ceiling);
        self.wait_seconds = self.wait_seconds.min(ceiling);
    }

    /// A long poll came back with an answer.
    pub fn on_answer(&mut self) {
        let limit = self.ceiling_seconds.unwrap_or(self.max_seconds).min(self.max_seconds);
        self.wait_seconds = (self.wait_seconds + 1).min(limit);
    }

    /// The server refused the wait as too long: use half.
    pub fn on_refused(&mut self) {
        self.max_seconds = (self.wait_seconds / 2).max(1);
        self.wait_seconds = self.max_seconds;
    }
}

/// When a transport counts as failing, and when to try a better one again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportPolicy {
    /// Consecutive failures of one transport before falling back to the next.
    pub failures_before_fallback: u32,
    /// A stream that ends sooner than this was cut (by a proxy, a load balancer) and counts
    /// as a failure; one that lived longer ended normally and is reopened at once.
    pub stream_life_min: Duration,
    /// How long to stay on a fallback before trying the better transport again.
    pub upgrade_after: Duration,
}

impl Default for TransportPolicy {
    fn default() -> Self {
        Self {
            failures_before_fallback: 3,
            stream_life_min: Duration::from_secs(20),
            upgrade_after: Duration::from_secs(300),
        }
    }
}

impl TransportPolicy {
    /// Whether a stream that opened and then ended after `lived` failed.
    pub fn stream_failed(&self, lived: Duration) -> bool {
        lived < self.stream_life_min
    }

    pub fn should_fall_back(&self, consecutive_failures: u32) -> bool {
        consecutive_failures >= self.failures_before_fallback.max(1)
    }

    pub fn should_upgrade(&self, on_fallback_for: Duration) -> bool {
        on_fallback_for >= self.upgrade_after
    }
}

/// One reading of both clocks: the monotonic one (which stops while the machine sleeps on
/// Linux and macOS) and the wall clock (which does not, and which people and NTP move).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub monotonic: Duration,
    pub wall_ms: i64,
}

/// What a comparison of two clock samples says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockJump {
    /// The wall clock moved this many milliseconds more (or, negative, less) than the
    /// monotonic one: a sleep/resume, or a clock that was set.
    Wall { drift_ms: i64 },
    /// The process did not run for much longer than expected (stopped, or starved).
    Stall { late: Duration },
}

/// Compares two samples taken `expected` apart: connections open before a sleep are usually
/// dead after it, and the head has likely moved, so the agent reconnects and resyncs at once.
pub fn clock_jump(
    previous: ClockSample,
    now: ClockSample,
    expected: Duration,
    tolerance: Duration,
) -> Option<ClockJump> {
    let monotonic = now.monotonic.saturating_sub(previous.monotonic);
    let wall = now.wall_ms - previous.wall_ms;
    let drift_ms = wall - monotonic.as_millis() as i64;
    if drift_ms.unsigned_abs() > tolerance.as_millis() as u64 {
        return Some(ClockJump::Wall { drift_ms });
    }
    let late = monotonic.saturating_sub(expected);
    if late > tolerance {
        return Some(ClockJump::Stall { late });
    }
    None
}

#[cfg(test)]
mod tests {
    //! Properties over whole ranges; the decisions at given points are the shared vectors
    //! (`clients/conformance/vectors/decisions.json`, replayed by `crate::vectors`).
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn an_idle_agent_at_the_ceiling_polls_about_thirteen_times_an_hour() {
        let schedule = PollSchedule::default();
        // From idle start: 1+2+...+256 s ramp (about 8.5 min), then every 270 s on average.
        let first_hour = schedule.polls_within(S(3600));
        assert!((18..=22).contains(&first_hour), "{first_hour}");
        let later = schedule.polls_within(S(10 * 3600)) - schedule.polls_within(S(9 * 3600));
        assert!((13..=14).contains(&later), "{later}");
    }

    #[test]
    fn the_idle_interval_never_shrinks_and_ends_at_the_ceiling() {
        let schedule = PollSchedule::default();
        let mut nominal = schedule.next_nominal(None, false);
        for _ in 0..12 {
            let next = schedule.next_nominal(Some(nominal), false);
            assert!(next >= nominal);
            nominal = next;
        }
        assert_eq!(nominal, schedule.interval_max);
    }

    #[test]
    fn a_service_that_went_away_is_probed_at_most_two_seconds_apart() {
        let backoff = Backoff::OUTAGE;
        for attempt in 1..100 {
            for jitter in [0.0, 0.5, 1.0] {
                let delay = backoff.delay(attempt, jitter);
                assert!(delay <= S(2), "a return noticed within 2 s: {delay:?}");
                assert!(delay >= Duration::from_millis(250), "no hammering: {delay:?}");
            }
        }
        // Fifteen seconds away, with the mean jitter: about a dozen probes.
        let (mut elapsed, mut probes) = (Duration::ZERO, 0);
        while elapsed < S(15) {
            probes += 1;
            elapsed += backoff.delay(probes, 0.5);
        }
        assert!((10..=13).contains(&probes), "{probes}");
    }

    #[test]
    fn every_backoff_delay_lies_between_half_the_base_and_the_maximum() {
        let backoff = Backoff { base: S(1), max: S(60) };
        for attempt in 0..40 {
            for jitter in [0.0, 0.3, 1.0] {
                let delay = backoff.delay(attempt, jitter);
                assert!(
                    delay <= S(60) && delay >= Duration::from_millis(500),
                    "{attempt} {jitter}: {delay:?}"
                );
            }
        }
    }
}
