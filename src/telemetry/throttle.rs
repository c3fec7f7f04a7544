//! Bounded diagnostics. Wherever an outsider sets the pace of a log line (a server's garbage
//! output, stray responses, refused requests, stderr), the line goes through a [`Throttle`]: a
//! few a second are logged, the rest are counted, and the count is reported with the next line
//! that gets through (and at the end, by [`Throttle::take_suppressed`]).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(1);

/// Admits at most `per_second` diagnostics in each one-second window.
#[derive(Debug)]
pub struct Throttle {
    per_second: u32,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    window_start: Instant,
    admitted: u32,
    suppressed: u64,
}

impl Throttle {
    pub fn new(per_second: u32) -> Throttle {
        Throttle { per_second, state: Mutex::new(State { window_start: Instant::now(), admitted: 0, suppressed: 0 }) }
    }

    /// `Some(n)`: log this one, and say that `n` were suppressed since the last report.
    /// `None`: suppressed (counted).
    pub fn admit(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.window_start.elapsed() >= WINDOW {
            state.window_start = Instant::now();
            state.admitted = 0;
        }
        if state.admitted < self.per_second {
            state.admitted += 1;
            Some(std::mem::take(&mut state.suppressed))
        } else {
            state.suppressed = state.suppressed.saturating_add(1);
            None
        }
    }

    /// How many were suppressed and not yet reported; resets the count.
    pub fn take_suppressed(&self) -> u64 {
        std::mem::take(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner).suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_a_few_a_second_and_counts_the_rest() {
        let throttle = Throttle::new(3);
        let verdicts: Vec<_> = (0..10).map(|_| throttle.admit()).collect();
        assert_eq!(verdicts[..3], [Some(0), Some(0), Some(0)]);
        assert!(verdicts[3..].iter().all(Option::is_none));
        assert_eq!(throttle.take_suppressed(), 7);
        assert_eq!(throttle.take_suppressed(), 0);
    }
}
