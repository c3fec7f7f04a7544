//! Checked clock arithmetic. A deadline computed from an outside duration (a config value, a
//! `grpc-timeout` header, a server's `ttlMs`) must never overflow the clock: `Instant + Duration`
//! panics on overflow, so toolhost never uses it directly.

use std::time::Duration;

use tokio::time::Instant;

/// About thirty years: "never", for a deadline.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// The instant `duration` from now, or the far future if that is not representable.
pub fn after(duration: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(duration).or_else(|| now.checked_add(FAR_FUTURE)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_durations_saturate_instead_of_panicking() {
        let far = after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        let soon = after(Duration::from_millis(5));
        assert!(soon <= Instant::now() + Duration::from_millis(5));
    }
}
