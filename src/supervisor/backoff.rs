//! Restart delays: jittered exponential backoff with a cap.

use std::time::Duration;

use crate::config::RestartPolicy;

/// The delay before restart attempt `failures` (1 for the first failure in a row).
///
/// Full jitter over the upper half of the window: the delay lies in `[d/2, d]` where
/// `d = min(initial * 2^(failures-1), max)`, so servers that failed together do not restart
/// together, and the delay never collapses to zero.
pub(crate) fn delay(policy: &RestartPolicy, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    let window = policy.initial_backoff.saturating_mul(1u32 << exponent).min(policy.max_backoff);
    let half = window / 2;
    half + half.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            stable_after: Duration::from_secs(60),
            crash_loop_after: 5,
        }
    }

    #[test]
    fn grows_exponentially_up_to_the_cap_with_jitter() {
        for (failures, window_ms) in [(1, 100), (2, 200), (3, 400), (5, 1600), (6, 2000), (40, 2000)] {
            for _ in 0..50 {
                let d = delay(&policy(), failures).as_millis();
                assert!(d >= window_ms / 2 && d <= window_ms, "failures {failures}: {d} ms outside [{}, {window_ms}]", window_ms / 2);
            }
        }
    }
}
