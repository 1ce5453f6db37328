//! When to try again: exponential backoff with full jitter, or what the store asked for.

use std::{
    hash::{BuildHasher as _, RandomState},
    time::Duration,
};

/// The first wait after a failure.
const BASE: Duration = Duration::from_millis(500);
/// The longest wait between two tries (a store away for an hour is tried every 30 s).
pub const MAX: Duration = Duration::from_secs(30);

/// The wait before try `failures + 1`: a random point in the upper half of
/// `BASE * 2^(failures-1)`, capped at [`MAX`], so agents restarted together do not retry in
/// step; the store's own Retry-After wins when it gives one (capped at 5 minutes).
pub fn delay(failures: u32, asked: Option<Duration>) -> Duration {
    if let Some(d) = asked {
        return d.min(Duration::from_secs(300));
    }
    let exp = BASE.saturating_mul(1 << failures.saturating_sub(1).min(16));
    let ceiling = exp.min(MAX);
    let half = ceiling / 2;
    half + half.mul_f64(unit_random())
}

/// A number in [0, 1) from the standard library's randomly keyed hasher (jitter needs no
/// more than that).
fn unit_random() -> f64 {
    let n = RandomState::new().hash_one(std::time::Instant::now());
    (n >> 11) as f64 / (1u64 << 53) as f64
}

/// An HTTP `Retry-After` value in seconds (the date form is not used by the stores).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_jitters_and_is_capped() {
        for _ in 0..100 {
            let d = delay(1, None);
            assert!(d >= BASE / 2 && d <= BASE, "{d:?}");
            let d = delay(3, None);
            assert!(d >= BASE * 2 && d <= BASE * 4, "{d:?}");
            let d = delay(40, None);
            assert!(d >= MAX / 2 && d <= MAX, "{d:?}");
        }
        assert_eq!(
            delay(5, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            delay(1, Some(Duration::from_secs(9999))),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(parse_retry_after(" 3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
