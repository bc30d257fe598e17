//! The only source of randomness of the store and the server: event ids, lease tokens, secrets,
//! token ids and backoff jitter.

/// `N` bytes from the operating system's generator.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // The OS generator failing means the machine cannot make secrets at all; continuing
    // would hand out predictable lease tokens.
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    bytes
}

/// A uniform value in `[0, 1]` for jitter.
pub(crate) fn unit_interval() -> f64 {
    f64::from(u32::from_le_bytes(random_bytes::<4>())) / f64::from(u32::MAX)
}
