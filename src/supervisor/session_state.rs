//! The state a live session's loop keeps, as explicit types instead of loose locals: when the
//! next look at the server's tools is due and why ([`Schedule`]), the 2026 `subscriptions/listen`
//! stream ([`Listen`]), what woke the loop ([`Wake`]), and what the worker remembers of its
//! listings ([`ListingMemory`]). The transitions are methods; the deciding ones are pure and
//! tested here.

use std::time::Duration;

use opentelemetry::trace::SpanContext;
use tokio::time::Instant;

use crate::catalog::model::{Generation, Listing};
use crate::catalog::record::EnumerationReason;
use crate::deadline;
use crate::upstream::UpstreamError;

/// Requests a worker accepts from the rest of toolhost.
#[derive(Debug)]
pub(crate) enum WorkerCommand {
    /// Re-enumerate now (a manual refresh, or a call that found a tool missing, whose span the
    /// refresh links to).
    Refresh(EnumerationReason, Option<SpanContext>),
    /// End the session and start a fresh one at once.
    Restart,
    /// A new authorization: stop waiting out a backoff (nothing for a running session).
    Authorized,
}

/// When the session next looks at the server's tools, and why.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    /// A refresh to run now, and why.
    pending: Option<EnumerationReason>,
    /// The span (a call that found a tool missing) the next refresh links to.
    cause: Option<SpanContext>,
    /// When the change the next refresh answers was first heard of: the propagation metric.
    change_seen_at: Option<Instant>,
    /// A failed refresh is tried again then.
    retry_at: Option<Instant>,
    /// The last listing's `ttlMs` runs out then.
    ttl_at: Option<Instant>,
}

impl Schedule {
    pub(super) fn starting(reason: EnumerationReason) -> Schedule {
        Schedule { pending: Some(reason), ..Schedule::default() }
    }

    /// The refresh due now, and the span it links to; a retry waiting is then moot.
    pub(super) fn take_due(&mut self) -> Option<(EnumerationReason, Option<SpanContext>)> {
        let reason = self.pending.take()?;
        self.retry_at = None;
        Some((reason, self.cause.take()))
    }

    pub(super) fn ask(&mut self, reason: EnumerationReason) {
        self.pending = Some(reason);
    }

    pub(super) fn ask_linked(&mut self, reason: EnumerationReason, cause: Option<SpanContext>) {
        self.pending = Some(reason);
        self.cause = cause;
    }

    /// A `tools/list_changed` arrived: look again, timing the change from its first notice.
    pub(super) fn changed(&mut self) {
        self.pending = Some(EnumerationReason::ListChanged);
        self.change_seen_at.get_or_insert_with(Instant::now);
    }

    /// A refresh committed (or found unchanged) a listing: how long the change took to
    /// propagate, if one was waiting, and the next look when the listing had a `ttlMs`.
    pub(super) fn settled(&mut self, ttl: Option<Duration>) -> Option<Duration> {
        self.ttl_at = ttl.map(|ttl| deadline::after(ttl_delay(ttl)));
        self.change_seen_at.take().map(|seen| seen.elapsed())
    }

    /// A refresh failed: try again after `backoff`.
    pub(super) fn failed(&mut self, backoff: Duration) {
        self.retry_at = Some(deadline::after(backoff));
    }

    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    pub(super) fn ttl_at(&self) -> Option<Instant> {
        self.ttl_at
    }

    /// The retry is due: a manual look.
    pub(super) fn retry_due(&mut self) {
        self.pending = Some(EnumerationReason::Manual);
    }

    /// The listing's freshness ran out: look again.
    pub(super) fn ttl_due(&mut self) {
        self.ttl_at = None;
        self.pending = Some(EnumerationReason::Ttl);
    }
}

/// An open `subscriptions/listen`: completes when the subscription ends.
pub(super) type ListenFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), UpstreamError>> + Send + 'a>>;

/// The session's `subscriptions/listen` stream: how a 2026 server announces changes.
pub(super) enum Listen<'a> {
    /// Not wanted: a 2025 server (changes come on the session), or one that announces none.
    Unwanted,
    /// Closed; (re)opened at `at`.
    Closed { at: Instant },
    /// Open; to be acknowledged by `ack_by` (`None`: acknowledged).
    Open { stream: ListenFuture<'a>, ack_by: Option<Instant> },
}

impl<'a> Listen<'a> {
    pub(super) fn new(wanted: bool) -> Listen<'a> {
        if wanted { Listen::Closed { at: Instant::now() } } else { Listen::Unwanted }
    }

    /// When to open the stream, while it is closed.
    pub(super) fn open_at(&self) -> Option<Instant> {
        match self {
            Listen::Closed { at } => Some(*at),
            Listen::Unwanted | Listen::Open { .. } => None,
        }
    }

    /// When the open stream is overdue for its acknowledgement.
    pub(super) fn ack_by(&self) -> Option<Instant> {
        match self {
            Listen::Open { ack_by, .. } => *ack_by,
            Listen::Unwanted | Listen::Closed { .. } => None,
        }
    }

    pub(super) fn open(&mut self, stream: ListenFuture<'a>, ack_within: Duration) {
        *self = Listen::Open { stream, ack_by: Some(deadline::after(ack_within)) };
    }

    /// Closed (ended, or dropped unacknowledged): opened again after `backoff`.
    pub(super) fn close(&mut self, backoff: Duration) {
        *self = Listen::Closed { at: deadline::after(backoff) };
    }

    pub(super) fn acknowledged(&mut self) {
        if let Listen::Open { ack_by, .. } = self {
            *ack_by = None;
        }
    }

    /// Completes when the open stream ends; never while none is open.
    pub(super) async fn ended(&mut self) -> Result<(), UpstreamError> {
        match self {
            Listen::Open { stream, .. } => stream.await,
            Listen::Unwanted | Listen::Closed { .. } => std::future::pending().await,
        }
    }
}

/// What woke a live session's loop.
pub(super) enum Wake {
    /// toolhost is stopping this server.
    Cancelled,
    /// The session closed.
    Closed,
    /// Its OAuth authorization can no longer be refreshed.
    AuthorizationLost(String),
    /// The server announced `tools/list_changed`.
    ListChanged,
    Command(WorkerCommand),
    RetryDue,
    TtlDue,
    /// Time to open the `subscriptions/listen` stream.
    OpenListen,
    ListenEnded(Result<(), UpstreamError>),
    ListenAcknowledged,
    ListenOverdue,
}

/// What the worker remembers of its listings, across passes and sessions.
#[derive(Debug, Default)]
pub(crate) struct ListingMemory {
    /// A listing of this session was committed (or found unchanged).
    listed_this_session: bool,
    /// The previous listing was empty and was held back for confirmation.
    empty_held: bool,
    /// The `ttlMs` of the last complete listing, if the server gave one.
    pub(super) ttl: Option<Duration>,
    /// When the last pass ended and how long it took: bursts keep listing to a share of the time.
    pub(super) last_pass: Option<(Instant, Duration)>,
}

impl ListingMemory {
    /// A new session: its first listing is judged afresh.
    pub(super) fn new_session(&mut self) {
        self.listed_this_session = false;
        self.empty_held = false;
    }

    pub(super) fn committed(&mut self, committed: bool) {
        self.listed_this_session |= committed;
    }

    /// An empty listing that would empty a non-empty catalog right after (re)connecting or after
    /// a failure is held back once: servers that lost their credentials or state often answer
    /// with nothing. A second empty listing in a row confirms it. `Some(why)` holds it back.
    pub(super) fn suspicious_empty(&mut self, listing: &Listing, current: Option<&Generation>) -> Option<String> {
        if !listing.tools.is_empty() {
            self.empty_held = false;
            return None;
        }
        let current = current?;
        if current.tools.is_empty() || self.listed_this_session || self.empty_held {
            return None;
        }
        self.empty_held = true;
        Some(format!(
            "the server listed no tools right after connecting; generation {} ({} tools) stays until a second listing confirms it",
            current.number,
            current.tools.len()
        ))
    }
}

/// When to look again after a listing that was fresh for `ttl`: never sooner than a floor (ttlMs
/// is a hint, not a polling interval), with up to 10% jitter so servers do not refresh in step.
pub(super) fn ttl_delay(ttl: Duration) -> Duration {
    const FLOOR: Duration = Duration::from_secs(5);
    // A server's ttlMs can be any u64; a day is as long as toolhost waits to look again.
    const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
    let base = ttl.clamp(FLOOR, MAX_TTL);
    base.saturating_add(base.mul_f64(fastrand::f64() * 0.1))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ttl_refreshes_are_jittered_and_never_a_tight_poll() {
        for ttl in [Duration::ZERO, Duration::from_millis(1), Duration::from_secs(60), Duration::from_millis(u64::MAX)] {
            for _ in 0..20 {
                let delay = ttl_delay(ttl);
                let base = ttl.clamp(Duration::from_secs(5), Duration::from_secs(24 * 3600));
                assert!(delay >= base && delay <= base.mul_f64(1.1), "{ttl:?} -> {delay:?}");
            }
        }
    }

    #[test]
    fn an_empty_listing_is_held_once_right_after_connecting_and_a_second_confirms_it() {
        let empty = Listing::default();
        let some = Listing::from_raw(vec![json!({"name": "a", "inputSchema": {"type": "object"}})]);
        let current = Generation { number: 4, committed_at_ms: 0, tools: some.tools.clone() };
        let nothing = Generation { number: 1, committed_at_ms: 0, tools: Vec::new() };
        let mut memory = ListingMemory::default();
        // (listing, current generation, held back?)
        let steps: [(&Listing, Option<&Generation>, bool); 6] = [
            (&empty, None, false),           // nothing to lose
            (&empty, Some(&nothing), false), // the catalog is empty already
            (&empty, Some(&current), true),  // first empty listing of a session: held
            (&empty, Some(&current), false), // the second confirms it
            (&some, Some(&current), false),  // a listing with tools resets the hold
            (&empty, Some(&current), true),  // held again: nothing listed this session yet
        ];
        for (step, (listing, generation, held)) in steps.into_iter().enumerate() {
            assert_eq!(memory.suspicious_empty(listing, generation).is_some(), held, "step {step}");
        }
        // Once a listing of this session committed, an empty one is believed; a new session
        // holds it again.
        memory.committed(true);
        memory.empty_held = false;
        assert!(memory.suspicious_empty(&empty, Some(&current)).is_none());
        memory.new_session();
        assert!(memory.suspicious_empty(&empty, Some(&current)).is_some());
    }

    #[test]
    fn a_schedule_runs_what_is_due_once_and_a_refresh_cancels_the_retry() {
        let mut schedule = Schedule::starting(EnumerationReason::Initial);
        assert_eq!(schedule.take_due().map(|(reason, _)| reason), Some(EnumerationReason::Initial));
        assert!(schedule.take_due().is_none(), "run once");
        schedule.failed(Duration::from_secs(3));
        assert!(schedule.retry_at().is_some());
        schedule.changed();
        assert_eq!(schedule.take_due().map(|(reason, _)| reason), Some(EnumerationReason::ListChanged));
        assert!(schedule.retry_at().is_none(), "a refresh that runs makes the retry moot");
        assert!(schedule.settled(None).is_some(), "the change's propagation is measured");
        assert!(schedule.settled(Some(Duration::from_secs(60))).is_none(), "and only once");
        assert!(schedule.ttl_at().is_some());
        schedule.ttl_due();
        assert!(schedule.ttl_at().is_none());
        assert_eq!(schedule.take_due().map(|(reason, _)| reason), Some(EnumerationReason::Ttl));
    }
}
