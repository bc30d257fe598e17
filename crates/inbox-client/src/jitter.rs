//! Jitter for retries and reconnects: the one place the SDK reads randomness, so the schedules
//! themselves (`schedule.rs`) take it as an argument and stay pure.

/// A number in `[0, 1)` from the operating system's random source (0.5 if it fails).
pub(crate) fn jitter() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_the_unit_interval() {
        for _ in 0..1000 {
            assert!((0.0..1.0).contains(&jitter()));
        }
    }
}
