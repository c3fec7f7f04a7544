//! A server's life between sessions, as an explicit state machine: each [`Event`] (a session
//! ended, a start failed, an operator asked for a restart) leads to a [`Next`] step (start again
//! now, or show a state and wait). Pure data, no I/O and no clock: the worker feeds it what
//! happened, and its rules (when failures count, when they are forgiven, when a server is in a
//! crash loop, how long to wait) are tested here without a process or a timer.

use std::time::Duration;

use crate::config::RestartPolicy;
use crate::registry::ServerState;

/// Backoff steps for waits that are not a session's failure, named for what they wait after:
/// a `subscriptions/listen` stream that ended (re-opened soon), one that was never acknowledged
/// (a little later), a refresh whose listing failed while the session stays up (later still).
pub(crate) const LISTEN_ENDED: u32 = 1;
pub(crate) const LISTEN_UNACKNOWLEDGED: u32 = 2;
pub(crate) const REFRESH_FAILED: u32 = 3;

/// The delay before restart attempt `failures` (1 for the first failure in a row).
///
/// Full jitter over the upper half of the window: the delay lies in `[d/2, d]` where
/// `d = min(initial * 2^(failures-1), max)`, so servers that failed together do not restart
/// together, and the delay never collapses to zero.
pub(crate) fn backoff(policy: &RestartPolicy, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    let window = policy.initial_backoff.saturating_mul(1u32 << exponent).min(policy.max_backoff);
    let half = window / 2;
    half + half.mul_f64(fastrand::f64())
}

/// What ended the last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A session ran for `lasted` and ended; `refused` when it ended in a way restarting alone
    /// cannot fix (its sandbox stopped it, it needs authorization).
    SessionEnded { lasted: Duration, refused: Option<ServerState> },
    /// No session could be started; `refused` as above (bad credentials, a handshake or a
    /// sandbox that cannot work).
    StartFailed { refused: Option<ServerState> },
    /// An operator asked for a fresh session: not a failure.
    RestartAsked,
}

/// What the worker does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Next {
    /// Start a new session at once, showing `reconnecting`.
    Reconnect,
    /// Show `state`, wait `delay` (an operator's restart or a login cuts it short), then start.
    Wait { state: ServerState, delay: Duration, failures: u32 },
}

/// The failures in a row and whether a session ever started.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    policy: RestartPolicy,
    failures: u32,
    started_once: bool,
}

impl Lifecycle {
    pub(crate) fn new(policy: RestartPolicy) -> Lifecycle {
        Lifecycle { policy, failures: 0, started_once: false }
    }

    /// The state an attempt shows while it starts: `starting` the first time, then `reconnecting`.
    pub(crate) fn attempt_state(&self) -> ServerState {
        if self.started_once { ServerState::Reconnecting } else { ServerState::Starting }
    }

    /// The first attempt is the initial enumeration; later ones are reconnects.
    pub(crate) fn is_first(&self) -> bool {
        !self.started_once
    }

    /// The one place the rules live.
    pub(crate) fn on(&mut self, event: Event) -> Next {
        self.started_once = true;
        let refused = match event {
            Event::RestartAsked => return Next::Reconnect,
            Event::SessionEnded { lasted, refused } => {
                // A session that stayed up long enough forgives the failures before it.
                if lasted >= self.policy.stable_after {
                    self.failures = 0;
                }
                refused
            }
            Event::StartFailed { refused } => refused,
        };
        self.failures = self.failures.saturating_add(1);
        let state = match refused {
            Some(state) => state,
            None if self.failures >= self.policy.crash_loop_after => ServerState::CrashLoop,
            None => ServerState::Backoff,
        };
        Next::Wait { state, delay: backoff(&self.policy, self.failures), failures: self.failures }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            stable_after: Duration::from_secs(60),
            crash_loop_after: 3,
        }
    }

    fn state(next: Next) -> (ServerState, u32) {
        match next {
            Next::Wait { state, failures, .. } => (state, failures),
            Next::Reconnect => (ServerState::Reconnecting, 0),
        }
    }

    #[test]
    fn grows_exponentially_up_to_the_cap_with_jitter() {
        for (failures, window_ms) in [(1, 100), (2, 200), (3, 400), (5, 1600), (6, 2000), (40, 2000)] {
            for _ in 0..50 {
                let d = backoff(&policy(), failures).as_millis();
                assert!(d >= window_ms / 2 && d <= window_ms, "failures {failures}: {d} ms outside [{}, {window_ms}]", window_ms / 2);
            }
        }
    }

    #[test]
    fn failures_in_a_row_back_off_then_show_a_crash_loop() {
        let mut life = Lifecycle::new(policy());
        assert_eq!(life.attempt_state(), ServerState::Starting);
        let quick = Event::SessionEnded { lasted: Duration::from_secs(1), refused: None };
        assert_eq!(state(life.on(Event::StartFailed { refused: None })), (ServerState::Backoff, 1));
        assert_eq!(life.attempt_state(), ServerState::Reconnecting);
        assert_eq!(state(life.on(quick)), (ServerState::Backoff, 2));
        assert_eq!(state(life.on(quick)), (ServerState::CrashLoop, 3));
        let Next::Wait { delay, .. } = life.on(quick) else { panic!("a failure waits") };
        assert!(delay >= Duration::from_millis(400) && delay <= Duration::from_millis(800), "the fourth failure's window: {delay:?}");
    }

    #[test]
    fn a_stable_session_forgives_and_a_restart_is_not_a_failure() {
        let mut life = Lifecycle::new(policy());
        for _ in 0..5 {
            life.on(Event::StartFailed { refused: None });
        }
        assert_eq!(life.on(Event::RestartAsked), Next::Reconnect, "no wait, and no count");
        let stable = Event::SessionEnded { lasted: Duration::from_secs(60), refused: None };
        assert_eq!(state(life.on(stable)), (ServerState::Backoff, 1), "the count starts again after a stable session");
    }

    #[test]
    fn a_refusal_shows_its_own_state_and_still_backs_off() {
        let mut life = Lifecycle::new(policy());
        for refused in [ServerState::AuthFailed, ServerState::AuthRequired, ServerState::Failed] {
            let Next::Wait { state, delay, .. } = life.on(Event::StartFailed { refused: Some(refused) }) else { panic!() };
            assert_eq!(state, refused);
            assert!(delay > Duration::ZERO, "never a tight loop");
        }
        let Next::Wait { state, .. } = life.on(Event::SessionEnded { lasted: Duration::ZERO, refused: Some(ServerState::Failed) }) else {
            panic!()
        };
        assert_eq!(state, ServerState::Failed, "a sandbox's stop shows failed, not a crash loop");
    }
}
