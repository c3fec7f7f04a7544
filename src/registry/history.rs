//! A server's recent life as its own page shows it: starts, exits (with the error that ended
//! them), restarts and limits hit. Recorded in one place, where the registry applies a change
//! ([`super::Registry::update`]), by comparing the view before and after, so no worker has to
//! remember to. Bounded: the newest [`KEPT`] happenings, each at most [`MAX_TEXT`] characters.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use super::{ServerState, ServerView};

/// Happenings kept per server.
pub const KEPT: usize = 50;
/// Longest text kept of one happening (an error can quote a server's stderr).
const MAX_TEXT: usize = 400;

/// One thing that happened to a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Happening {
    pub at_ms: i64,
    /// The state it was in afterwards.
    pub state: ServerState,
    /// What happened, as a person reads it (secrets redacted).
    pub what: String,
}

/// A server's happenings, oldest first.
#[derive(Debug, Default)]
pub struct History {
    entries: Mutex<VecDeque<Happening>>,
}

impl History {
    pub(crate) fn record(&self, at_ms: i64, state: ServerState, what: String) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() == KEPT {
            entries.pop_front();
        }
        let mut what = crate::secrets::redact(&what).into_owned();
        if let Some((cut, _)) = what.char_indices().nth(MAX_TEXT) {
            what.truncate(cut);
            what.push('…');
        }
        entries.push_back(Happening { at_ms, state, what });
    }

    /// Carries `previous`'s happenings over (a server whose entry changed is the same server).
    pub(crate) fn continue_from(&self, previous: &History) {
        let kept = previous.entries.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let mut joined = kept;
        joined.extend(entries.drain(..));
        while joined.len() > KEPT {
            joined.pop_front();
        }
        *entries = joined;
    }

    /// The happenings kept, newest first.
    pub fn newest_first(&self) -> Vec<Happening> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).iter().rev().cloned().collect()
    }
}

/// What changed from `before` to `after` that a person would want in the history, if anything.
pub(super) fn transition(before: &ServerView, after: &ServerView) -> Option<String> {
    let mut parts = Vec::new();
    if after.num_restarts > before.num_restarts {
        parts.push(format!("restart {}", after.num_restarts));
    }
    if after.num_worker_panics > before.num_worker_panics {
        parts.push("its worker panicked".to_owned());
    }
    if after.state != before.state {
        parts.push(format!("{} → {}", before.state.name(), after.state.name()));
    }
    let limit = |view: &ServerView| view.sandbox.as_ref().and_then(|sandbox| sandbox.last_limit);
    if let Some(kind) = limit(after).filter(|kind| limit(before) != Some(*kind)) {
        parts.push(format!("stopped by its sandbox's {} limit", kind.label()));
    }
    // A new error, or the same one again on entering a failing state (each exit of a crash
    // loop is told, not only the first).
    let failing = after.state != before.state
        && matches!(
            after.state,
            ServerState::Backoff | ServerState::CrashLoop | ServerState::Failed | ServerState::AuthFailed | ServerState::AuthRequired
        );
    let error = after.last_error.as_ref().filter(|error| failing || before.last_error.as_ref() != Some(*error));
    if let Some(error) = error {
        parts.push(error.clone());
    } else if parts.is_empty() {
        return None;
    }
    Some(parts.join(": "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(state: ServerState) -> ServerView {
        let audit = crate::config::AuditArguments::None;
        ServerView::new("s".into(), state, "stdio", 1, std::time::Duration::from_secs(1), audit, Default::default())
    }

    #[test]
    fn a_state_change_a_restart_and_a_new_error_are_told_and_a_timestamp_is_not() {
        let before = view(ServerState::Ready);
        let mut after = before.clone();
        after.last_verified_at_ms = Some(5);
        assert_eq!(transition(&before, &after), None, "a routine refresh is no happening");
        after.state = ServerState::Backoff;
        after.last_error = Some("exited with status 1 before it answered".into());
        assert_eq!(transition(&before, &after).unwrap(), "ready → backoff: exited with status 1 before it answered");
        let mut restarted = after.clone();
        restarted.state = ServerState::Reconnecting;
        restarted.num_restarts = 1;
        assert_eq!(transition(&after, &restarted).unwrap(), "restart 1: backoff → reconnecting");
        let mut again = restarted.clone();
        again.state = ServerState::CrashLoop;
        assert_eq!(
            transition(&restarted, &again).unwrap(),
            "reconnecting → crash_loop: exited with status 1 before it answered",
            "each exit is told, even with the same error"
        );
    }

    #[test]
    fn the_history_keeps_the_newest_and_bounds_each_text() {
        let history = History::default();
        for n in 0..KEPT + 5 {
            history.record(i64::try_from(n).unwrap(), ServerState::Ready, "x".repeat(MAX_TEXT * 2));
        }
        let kept = history.newest_first();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].at_ms, i64::try_from(KEPT + 4).unwrap());
        assert!(kept.iter().all(|happening| happening.what.chars().count() <= MAX_TEXT + 1));
    }
}
