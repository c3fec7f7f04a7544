//! What one agent entry may take: calls in flight (`concurrency`) and calls started per period
//! (`rate`). Both are checked on the call path without a lock or an allocation: a counter, and
//! a GCRA (the generic cell rate algorithm, a token bucket kept as one timestamp) advanced by a
//! compare-and-swap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::RateLimit;

/// A rate limit's state: the theoretical arrival time of the next call, in nanoseconds since
/// `epoch`.
pub struct Gcra {
    epoch: Instant,
    /// Nanoseconds between calls at the sustained rate.
    interval: u64,
    /// How far ahead of the sustained rate a burst may run, in nanoseconds.
    tolerance: u64,
    next_at: AtomicU64,
    pub limit: RateLimit,
}

impl Gcra {
    pub fn new(limit: RateLimit) -> Gcra {
        let interval = u64::try_from(limit.per.as_nanos() / u128::from(limit.calls.max(1))).unwrap_or(u64::MAX).max(1);
        let tolerance = interval.saturating_mul(u64::from(limit.burst.max(1)) - 1);
        Gcra { epoch: Instant::now(), interval, tolerance, next_at: AtomicU64::new(0), limit }
    }

    /// Takes one call's place now, or says how long until one is free.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let now = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let mut current = self.next_at.load(Ordering::Acquire);
        loop {
            let arrival = current.max(now);
            let ahead = arrival - now;
            if ahead > self.tolerance {
                return Err(Duration::from_nanos(ahead - self.tolerance));
            }
            match self.next_at.compare_exchange_weak(current, arrival.saturating_add(self.interval), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(seen) => current = seen,
            }
        }
    }

    /// How long from `now` until the next call may start (zero when one may start now).
    pub fn wait(&self, now: Instant) -> Duration {
        let now = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let ahead = self.next_at.load(Ordering::Acquire).saturating_sub(now);
        Duration::from_nanos(ahead.saturating_sub(self.tolerance))
    }

    /// Calls that could start at once now (what `whoami` shows as left).
    pub fn available(&self, now: Instant) -> u32 {
        let now = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        let ahead = self.next_at.load(Ordering::Acquire).saturating_sub(now);
        let free = self.tolerance.saturating_sub(ahead) / self.interval + u64::from(ahead <= self.tolerance);
        u32::try_from(free).unwrap_or(u32::MAX).min(self.limit.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gcra(calls: u32, per_ms: u64, burst: u32) -> Gcra {
        Gcra::new(RateLimit { calls, per: Duration::from_millis(per_ms), burst })
    }

    #[test]
    fn a_burst_then_the_sustained_rate_and_the_wait_is_exact() {
        let limit = gcra(10, 1000, 3);
        let start = limit.epoch;
        assert_eq!(limit.available(start), 3);
        for _ in 0..3 {
            limit.take(start).unwrap();
        }
        let wait = limit.take(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100), "one interval (1 s / 10) until the next call");
        assert_eq!(limit.wait(start), wait, "what the limits page shows is what a call is told");
        assert_eq!(limit.wait(start + Duration::from_millis(100)), Duration::ZERO);
        assert!(limit.take(start + Duration::from_millis(99)).is_err());
        limit.take(start + Duration::from_millis(100)).unwrap();
        assert_eq!(limit.available(start + Duration::from_secs(10)), 3, "a quiet spell refills the burst, no more");
    }

    proptest::proptest! {
        /// Over any window starting at the epoch, at most burst + rate × window calls pass,
        /// whatever the arrival times and however many threads take at once.
        #[test]
        fn never_more_than_the_burst_plus_the_rate(calls in 1u32..50, burst in 1u32..20, arrivals in proptest::collection::vec(0u64..2_000, 1..300)) {
            let limit = std::sync::Arc::new(gcra(calls, 1000, burst));
            let start = limit.epoch;
            let mut sorted = arrivals;
            sorted.sort_unstable();
            let passed: Vec<u64> = std::thread::scope(|scope| {
                let halves: Vec<_> = sorted.chunks(sorted.len().div_ceil(2)).map(|chunk| {
                    let limit = limit.clone();
                    let chunk = chunk.to_vec();
                    scope.spawn(move || chunk.into_iter().filter(|ms| limit.take(start + Duration::from_millis(*ms)).is_ok()).collect::<Vec<_>>())
                }).collect();
                halves.into_iter().flat_map(|half| half.join().unwrap()).collect()
            });
            let last = passed.iter().copied().max().unwrap_or(0);
            let allowed = u64::from(burst) + u64::from(calls) * last / 1000 + 1;
            proptest::prop_assert!(passed.len() as u64 <= allowed, "{} passed, at most {allowed}", passed.len());
        }
    }
}
