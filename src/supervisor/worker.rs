//! The per-server loop: start a session, enumerate, follow changes, and restart with backoff
//! when the session ends. Every new session is a fresh handshake and a full enumeration.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::lifecycle::{self, Event, Lifecycle, Next};
use super::session_state::{Listen, ListingMemory, Schedule, Wake, WorkerCommand};
use crate::catalog::model::Listing;
use crate::catalog::record::{EnumerationOutcome, EnumerationReason};
use crate::config::ServerSpec;
use crate::deadline;
use crate::mcp::lifecycle::{Era, ServerHello};
use crate::mcp::modern;
use crate::registry::{Registry, ServerState};
use crate::store::Store;
use crate::supervisor::enumerate::{self, PassClock, PassEnd, PassSettings, PassStats};
use crate::supervisor::trace;
use crate::telemetry::mcp::{SessionLife, Side};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::span_context;
use crate::telemetry::throttle::Throttle;
use crate::upstream::oauth::authorizer::{Authorizer, Interaction};
use crate::upstream::reaper::Reaper;
use crate::upstream::{self, Connection, SessionSettings, UpstreamError};

/// A change notification that arrives while a pass runs supersedes the pass; the next pass
/// waits until notifications have been quiet this long, so a burst costs one more pass.
const QUIET_PERIOD: Duration = Duration::from_millis(20);
/// ...but never waits longer than this for a burst to end.
const MAX_QUIET_WAIT: Duration = Duration::from_secs(2);
/// A list_changed with none other this long before it is an isolated change: listed at once,
/// whatever the rate of earlier changes. One closer to the previous is part of a burst, which
/// waits for quiet and keeps listing work to [`MAX_LISTING_SHARE`] of the time.
const ISOLATION: Duration = Duration::from_millis(100);
/// Under a burst, a pass starts no sooner than this many times the last pass's duration after
/// it ended: listing takes at most a tenth of the server's time, however long the burst.
const IDLE_PER_PASS: u32 = 9;

/// Why a session ended.
enum SessionEnd {
    /// toolhost is stopping this server.
    Cancelled,
    /// The session closed (the process exited or its output ended); `refused`: the state a
    /// restart waits in when the server cannot simply be started again (failed at a sandbox
    /// limit, or waiting for an authorization).
    Closed { refused: Option<ServerState> },
    /// An operator asked for a fresh session.
    Restart,
}

/// Everything a server's worker is built from: the one description of a worker's settings and
/// handles. Its guard keeps a copy, so that a worker that panicked is built again from it.
#[derive(Clone)]
pub(crate) struct WorkerSeed {
    pub(crate) name: Arc<str>,
    pub(crate) spec: ServerSpec,
    pub(crate) store: Store,
    pub(crate) registry: Arc<Registry>,
    pub(crate) reaper: Arc<Reaper>,
    /// Shared by all workers: bounds how many sessions start (connect and first enumeration) at once.
    pub(crate) start_permits: Arc<Semaphore>,
    pub(crate) metrics: Metrics,
    /// The era this server was last found to speak, as stored; `None` until known.
    pub(crate) era: Option<Era>,
    pub(crate) cancel: CancellationToken,
    /// Where a rebuilt worker's command queue is published.
    pub(crate) senders: super::Senders,
}

/// A running worker: its seed, and what it learns and receives while it runs.
pub(crate) struct Worker {
    pub(crate) seed: WorkerSeed,
    /// The era this server was last found to speak; `None` until known (or after a failed start).
    pub(crate) era: Option<Era>,
    pub(crate) commands: mpsc::Receiver<WorkerCommand>,
    /// What the worker remembers of its listings (the empty-listing hold, ttlMs, pacing).
    pub(crate) listings: ListingMemory,
}

// === impl Worker ===

impl Worker {
    pub(crate) fn new(seed: WorkerSeed, commands: mpsc::Receiver<WorkerCommand>) -> Worker {
        Worker { era: seed.era, seed, commands, listings: ListingMemory::default() }
    }

    pub(crate) async fn run(mut self) {
        let settings = SessionSettings {
            request_timeout: self.seed.spec.request_timeout,
            max_message_bytes: self.seed.spec.max_message_bytes,
            shutdown_grace: self.seed.spec.shutdown_grace,
            reaper: self.seed.reaper.clone(),
            authorizer: match upstream::authorizer_for(&self.seed.name, &self.seed.spec, Interaction::None, Some(self.seed.metrics.clone()))
            {
                Ok(authorizer) => authorizer,
                Err(error) => {
                    let text = error.to_string();
                    tracing::error!(server = %self.seed.name, error = %text, "cannot set up the server's authorization");
                    self.set_state(ServerState::AuthRequired, Some(text));
                    self.seed.cancel.cancelled().await;
                    self.set_state(ServerState::Stopped, None);
                    return;
                }
            },
            operations: self.seed.metrics.client_operation_duration.clone(),
            egress: self.seed.registry.server(&self.seed.name).map(|view| view.shared().egress.clone()).unwrap_or_default(),
        };
        let authorizer = settings.authorizer.clone();
        self.seed.registry.update(&self.seed.name, |view| view.authorized_by(authorizer));
        let mut life = Lifecycle::new(self.seed.spec.restart.clone());
        loop {
            self.set_state(life.attempt_state(), None);
            // Only so many servers start at once: a boot with a thousand servers must not starve
            // the API (which is already serving the stored catalog) or the machine.
            let permit = tokio::select! {
                () = self.seed.cancel.cancelled() => break,
                permit = self.seed.start_permits.clone().acquire_owned() => permit.ok(),
            };
            let connected = tokio::select! {
                () = self.seed.cancel.cancelled() => break,
                connected = upstream::connect(&self.seed.name, &self.seed.spec, &settings, self.era) => connected,
            };
            let event = match connected {
                Ok(connection) => {
                    if crate::faults::fire("worker.panic", &self.seed.name) {
                        panic!("injected fault: worker.panic");
                    }
                    let started = Instant::now();
                    let reason = if life.is_first() { EnumerationReason::Initial } else { EnumerationReason::Reconnect };
                    match self.run_session(connection, reason, permit, settings.authorizer.as_deref()).await {
                        SessionEnd::Cancelled => break,
                        SessionEnd::Restart => Event::RestartAsked,
                        SessionEnd::Closed { refused } => Event::SessionEnded { lasted: started.elapsed(), refused },
                    }
                }
                Err(error) => {
                    // Its text may hold a server's words (an answer it refused with): escaped, as
                    // every stderr line already is, before the log or its status gets it.
                    let text = upstream::printable(&crate::secrets::redact_owned(error.to_string())).into_owned();
                    tracing::warn!(server = %self.seed.name, error = %text, "cannot start a session");
                    // A remembered era may be out of date: probe again next time.
                    self.era = None;
                    let refused = match error.root() {
                        UpstreamError::AuthFailed(_) => Some(ServerState::AuthFailed),
                        UpstreamError::AuthRequired(_) => Some(ServerState::AuthRequired),
                        UpstreamError::Handshake(_)
                        | UpstreamError::Spawn { .. }
                        | UpstreamError::UnsupportedTransport(_)
                        | UpstreamError::Sandbox(_) => Some(ServerState::Failed),
                        _ => None,
                    };
                    self.seed.registry.update(&self.seed.name, |view| view.fault(text));
                    Event::StartFailed { refused }
                }
            };
            self.seed.metrics.record_restart(&self.seed.name);
            let (state, delay) = match life.on(event) {
                // Asked for, not a failure: no backoff.
                Next::Reconnect => (ServerState::Reconnecting, None),
                Next::Wait { state, delay, failures } => {
                    tracing::info!(server = %self.seed.name, failures, delay_ms = delay.as_millis() as u64, "restarting after a delay");
                    (state, Some(delay))
                }
            };
            self.seed.registry.update(&self.seed.name, |view| view.restarting(state));
            let Some(delay) = delay else { continue };
            tokio::select! {
                () = self.seed.cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
                // An operator's restart, or a login, cuts the wait short.
                Some(WorkerCommand::Restart | WorkerCommand::Authorized) = self.commands.recv() => {
                    tracing::info!(server = %self.seed.name, "restart or new authorization: not waiting out the backoff");
                }
            }
        }
        self.set_state(ServerState::Stopped, None);
    }

    /// Drives one session until it closes or toolhost stops it.
    async fn run_session(
        &mut self,
        connection: Connection,
        reason: EnumerationReason,
        mut start_permit: Option<OwnedSemaphorePermit>,
        authorizer: Option<&Authorizer>,
    ) -> SessionEnd {
        let handle = connection.handle().clone();
        let keep_fresh = keep_fresh(authorizer);
        tokio::pin!(keep_fresh);
        let hello = connection.hello().clone();
        let mut changes = handle.list_changed();
        self.session_started(&hello, &handle).await;
        let session_span = trace::session(&self.seed.name, &hello, &self.seed.spec.transport);
        let session_context = span_context(&session_span);
        // A 2026-07-28 server has no session to measure: only a 2025 one's life is recorded.
        let life = (hello.era == Era::Legacy).then(|| {
            SessionLife::start(&self.seed.metrics.client_session_duration, &hello.protocol_version, handle.wire(), Side::Client)
                .with(opentelemetry::KeyValue::new("toolhost.server", self.seed.name.to_string()))
        });
        // Modern servers announce changes only on a subscriptions/listen stream.
        let listen_params = modern::listen_params();
        let mut listen = Listen::new(hello.era == Era::Modern && hello.has_tools && hello.tools_list_changed);
        let (ack_tx, mut ack_rx) = watch::channel(0u64);
        let mut schedule = Schedule::starting(reason);
        let stray_changes = Throttle::new(1);
        let mut authorization_lost = false;
        self.listings.new_session();
        let end = loop {
            if let Some((reason, cause)) = schedule.take_due() {
                let span = trace::refresh(&self.seed.name, reason, session_context.clone(), cause);
                match self.refresh(&connection, &hello, reason, &mut changes).instrument(span).await {
                    Ok(true) => {
                        if let Some(propagation) = schedule.settled(self.listings.ttl.take()) {
                            self.seed.metrics.record_propagation(&self.seed.name, propagation);
                        }
                    }
                    Ok(false) => schedule.failed(lifecycle::backoff(&self.seed.spec.restart, lifecycle::REFRESH_FAILED)),
                    Err(end) => break end,
                }
            }
            // The session is up and enumerated (or its first pass has failed): let the next start.
            drop(start_permit.take());
            let (retry_at, ttl_at, open_at, ack_by) = (schedule.retry_at(), schedule.ttl_at(), listen.open_at(), listen.ack_by());
            let wake = tokio::select! {
                () = self.seed.cancel.cancelled() => Wake::Cancelled,
                () = handle.closed() => Wake::Closed,
                lost = &mut keep_fresh => Wake::AuthorizationLost(lost.to_string()),
                Ok(()) = changes.changed() => Wake::ListChanged,
                Some(command) = self.commands.recv() => Wake::Command(command),
                () = sleep_until_opt(retry_at) => Wake::RetryDue,
                () = sleep_until_opt(ttl_at) => Wake::TtlDue,
                () = sleep_until_opt(open_at) => Wake::OpenListen,
                ended = listen.ended() => Wake::ListenEnded(ended),
                Ok(()) = ack_rx.changed() => Wake::ListenAcknowledged,
                () = sleep_until_opt(ack_by) => Wake::ListenOverdue,
            };
            match wake {
                Wake::Cancelled => break SessionEnd::Cancelled,
                Wake::Closed => break SessionEnd::Closed { refused: None },
                Wake::AuthorizationLost(lost) => {
                    self.seed.registry.update(&self.seed.name, |view| view.fault(format!("authorization required: {lost}")));
                    authorization_lost = true;
                    break SessionEnd::Closed { refused: None };
                }
                Wake::ListChanged if hello.has_tools => schedule.changed(),
                Wake::ListChanged => {
                    if let Some(suppressed) = stray_changes.admit() {
                        tracing::warn!(server = %self.seed.name, suppressed, "ignored tools/list_changed from a server that does not offer tools");
                    }
                    changes.borrow_and_update();
                }
                Wake::Command(WorkerCommand::Refresh(reason, link)) => schedule.ask_linked(reason, link),
                Wake::Command(WorkerCommand::Restart) => break SessionEnd::Restart,
                Wake::Command(WorkerCommand::Authorized) => {}
                Wake::RetryDue => schedule.retry_due(),
                // ttlMs is a freshness hint: the listing has gone stale, so look again (jittered,
                // never sooner than the floor in ttl_delay).
                Wake::TtlDue => schedule.ttl_due(),
                Wake::OpenListen => listen.open(Box::pin(handle.listen(&listen_params, ack_tx.clone())), self.seed.spec.request_timeout),
                Wake::ListenEnded(result) => {
                    tracing::info!(server = %self.seed.name, ?result, "the subscriptions/listen stream ended; re-opening it");
                    listen.close(lifecycle::backoff(&self.seed.spec.restart, lifecycle::LISTEN_ENDED));
                }
                // Notifications may have been missed while no stream was open.
                Wake::ListenAcknowledged => {
                    listen.acknowledged();
                    schedule.ask(EnumerationReason::ListChanged);
                }
                Wake::ListenOverdue => {
                    tracing::warn!(server = %self.seed.name, "subscriptions/listen was not acknowledged in time; re-opening it");
                    listen.close(lifecycle::backoff(&self.seed.spec.restart, lifecycle::LISTEN_UNACKNOWLEDGED));
                }
            }
        };
        drop(listen);
        self.end_session(connection, &hello, end, authorization_lost, life, &session_span).await
    }

    /// Says a session started: in the log, in the registry, and its era in the store (once it
    /// changes).
    async fn session_started(&mut self, hello: &ServerHello, handle: &upstream::SessionHandle) {
        tracing::info!(server = %self.seed.name, mcp.protocol.version = %hello.protocol_version, tools = hello.has_tools, "session started");
        self.seed.registry.update(&self.seed.name, |view| view.session_started(hello.clone(), handle.clone()));
        if self.era != Some(hello.era) {
            self.era = Some(hello.era);
            if let Err(error) =
                self.seed.store.generations().remember_era(&self.seed.name, hello.era.as_str(), &hello.protocol_version).await
            {
                tracing::warn!(server = %self.seed.name, %error, "cannot remember the server's protocol era");
            }
        }
    }

    /// Takes a session down after its loop ended: says at once that the server is not
    /// callable, shuts the connection down, and records why it ended (a sandbox limit, its own
    /// exit with its stderr, a lost authorization). A session that closed is told apart by how.
    async fn end_session(
        &mut self,
        connection: Connection,
        hello: &ServerHello,
        end: SessionEnd,
        authorization_lost: bool,
        life: Option<SessionLife>,
        session_span: &tracing::Span,
    ) -> SessionEnd {
        if !hello.tools_list_changed && connection.handle().stats().num_list_changed.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            tracing::warn!(server = %self.seed.name, "the server sent tools/list_changed without advertising tools.listChanged");
        }
        let ended_by_server = connection.ended_by_server();
        let needs_authorization = authorization_lost || connection.needs_authorization();
        // Said at once, not after the shutdown below (which may wait out a grace period): a
        // server with no session is never shown "ready".
        let reconnecting = !matches!(end, SessionEnd::Cancelled);
        self.seed.registry.update(&self.seed.name, |view| view.session_ended(reconnecting, ended_by_server));
        let ended = connection.shutdown().await;
        if let Some(life) = life {
            let error_type = match (&ended.sandbox, &end) {
                (Some(_), _) => Some("sandbox_limit"),
                (None, SessionEnd::Closed { .. }) => Some("session_closed"),
                (None, SessionEnd::Cancelled | SessionEnd::Restart) => None,
            };
            life.end(error_type);
        }
        let exit = ended.status.map_or_else(|| "unknown".to_owned(), |status| status.to_string());
        tracing::info!(server = %self.seed.name, %exit, "session ended");
        session_span.add_event("session ended", vec![opentelemetry::KeyValue::new("toolhost.exit", exit)]);
        if let Some(report) = &ended.sandbox {
            let text = report.describe();
            let limit = match report {
                crate::sandbox::Report::Limit { kind, .. } => Some(*kind),
                _ => None,
            };
            let hit = limit.map_or("", |kind| kind.label());
            tracing::warn!(server = %self.seed.name, error = %text, hit, "the server's sandbox stopped it");
            self.seed.registry.update(&self.seed.name, |view| view.stopped_by_sandbox(text, limit));
        }
        let SessionEnd::Closed { .. } = end else { return end };
        if ended.sandbox.is_some() {
            return SessionEnd::Closed { refused: Some(ServerState::Failed) };
        }
        if needs_authorization {
            return SessionEnd::Closed { refused: Some(ServerState::AuthRequired) };
        }
        // A server that went away by itself says how and why, at WARN and in its last error:
        // "the session is closed" alone tells an operator nothing.
        let why = upstream::printable(&format!("the server {}", ended.explain())).into_owned();
        tracing::warn!(server = %self.seed.name, error = %why, "the server ended its session");
        self.seed.registry.update(&self.seed.name, |view| view.fault_unless_said(why));
        SessionEnd::Closed { refused: None }
    }

    /// One refresh: the capability gate, burst coalescing, then passes until one settles.
    /// `Ok(true)`: a listing was committed or found unchanged.
    async fn refresh(
        &mut self,
        connection: &Connection,
        hello: &ServerHello,
        reason: EnumerationReason,
        changes: &mut watch::Receiver<u64>,
    ) -> Result<bool, SessionEnd> {
        let span = tracing::Span::current();
        if !hello.has_tools {
            // The capability gate: a server without `capabilities.tools` is never sent tools/list.
            self.commit(Listing::default(), reason, PassClock::start(), PassStats::default()).await;
            self.set_state(ServerState::NoTools, None);
            return Ok(true);
        }
        if reason == EnumerationReason::ListChanged {
            let received = connection.handle().stats().num_list_changed.load(std::sync::atomic::Ordering::Relaxed);
            span.add_event("notification received", vec![opentelemetry::KeyValue::new("toolhost.notifications.total", received as i64)]);
            if !is_isolated(connection.handle().last_change_gap()) {
                tracing::debug!(server = %self.seed.name, "tools/list_changed burst; waiting for quiet");
                self.wait_for_quiet(changes).await?;
                let now = connection.handle().stats().num_list_changed.load(std::sync::atomic::Ordering::Relaxed);
                span.add_event(
                    "coalesced",
                    vec![opentelemetry::KeyValue::new("toolhost.notifications.coalesced", (now - received + 1) as i64)],
                );
            }
        }
        let settled = self.enumerate_until_settled(connection, reason, changes).await?;
        if settled {
            self.set_state(ServerState::Ready, None);
        }
        Ok(settled)
    }

    /// Runs passes until one completes without being superseded. `Ok(true)`: a listing was
    /// committed (or found unchanged); `Ok(false)`: the pass failed and nothing changed.
    async fn enumerate_until_settled(
        &mut self,
        connection: &Connection,
        mut reason: EnumerationReason,
        changes: &mut watch::Receiver<u64>,
    ) -> Result<bool, SessionEnd> {
        let settings = PassSettings {
            limits: &self.seed.spec.limits,
            request_timeout: self.seed.spec.request_timeout,
            enumeration_timeout: self.seed.spec.enumeration_timeout,
        };
        loop {
            let clock = PassClock::start();
            let mut stats = PassStats::default();
            let pass_span = trace::pass(&self.seed.name, reason);
            let pass = tokio::select! {
                () = self.seed.cancel.cancelled() => return Err(SessionEnd::Cancelled),
                pass = enumerate::enumerate(connection.handle(), &settings, changes, &mut stats).instrument(pass_span.clone()) => pass,
            };
            let (outcome, error) = match &pass {
                Ok(_) => ("complete", None),
                Err(PassEnd::Superseded) => ("superseded", Some("superseded by tools/list_changed")),
                Err(PassEnd::Failed(error)) => ("failed", Some(error.as_str())),
            };
            trace::finish_pass(&pass_span, outcome, &stats, error);
            drop(pass_span);
            self.listings.last_pass = Some((Instant::now(), clock.elapsed()));
            if outcome != "complete" {
                self.seed.metrics.record_enumeration(&self.seed.name, reason.as_str(), outcome, clock.elapsed());
            }
            match pass {
                Ok(listing) => {
                    let current = self.seed.registry.server(&self.seed.name).and_then(|view| view.generation().cloned());
                    if let Some(error) = self.listings.suspicious_empty(&listing, current.as_deref()) {
                        tracing::warn!(server = %self.seed.name, %error, "not committed; confirming with another listing");
                        self.record_failure(reason, EnumerationOutcome::Failed, Some(error.clone()), clock, stats).await;
                        self.set_state(ServerState::Failed, Some(error));
                        return Ok(false);
                    }
                    self.listings.ttl = stats.ttl_ms.filter(|ttl| *ttl > 0).map(Duration::from_millis);
                    let committed = self.commit(listing, reason, clock, stats).await;
                    self.listings.committed(committed);
                    return Ok(committed);
                }
                Err(PassEnd::Superseded) => {
                    tracing::debug!(server = %self.seed.name, "enumeration superseded by tools/list_changed");
                    self.record_failure(reason, EnumerationOutcome::Superseded, None, clock, stats).await;
                    self.wait_for_quiet(changes).await?;
                    reason = EnumerationReason::ListChanged;
                }
                Err(PassEnd::Failed(error)) => {
                    tracing::warn!(server = %self.seed.name, %error, "enumeration failed; the current generation stays");
                    self.record_failure(reason, EnumerationOutcome::Failed, Some(error.clone()), clock, stats).await;
                    self.set_state(ServerState::Failed, Some(error));
                    return Ok(false);
                }
            }
        }
    }

    /// Waits until no list_changed has arrived for [`QUIET_PERIOD`] and listing has been idle
    /// for [`IDLE_PER_PASS`] times the last pass (at most [`MAX_QUIET_WAIT`] in all).
    async fn wait_for_quiet(&self, changes: &mut watch::Receiver<u64>) -> Result<(), SessionEnd> {
        let give_up = deadline::after(MAX_QUIET_WAIT);
        let idle_until = self.listings.last_pass.map(|(ended, took)| ended + took.saturating_mul(IDLE_PER_PASS).min(MAX_QUIET_WAIT));
        changes.borrow_and_update();
        loop {
            let quiet_until = deadline::after(QUIET_PERIOD).max(idle_until.unwrap_or_else(Instant::now));
            tokio::select! {
                () = self.seed.cancel.cancelled() => return Err(SessionEnd::Cancelled),
                () = tokio::time::sleep_until(quiet_until) => return Ok(()),
                () = tokio::time::sleep_until(give_up) => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    changes.borrow_and_update();
                }
            }
        }
    }
    fn set_state(&self, state: ServerState, error: Option<String>) {
        self.seed.registry.update(&self.seed.name, |view| view.enter(state, error));
    }
}

/// A change with no other within [`ISOLATION`] before it (or the first of a session).
fn is_isolated(gap_before: Option<Duration>) -> bool {
    gap_before.is_none_or(|gap| gap >= ISOLATION)
}

/// Completes at `at`, or never when there is no deadline.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Ends when the server's authorization is lost for good. An idle server's token is refreshed
/// too: a refresh token unused for weeks may expire. Without an authorizer, never ends.
async fn keep_fresh(authorizer: Option<&Authorizer>) -> crate::upstream::oauth::authorizer::AuthError {
    match authorizer {
        Some(authorizer) => authorizer.keep_fresh().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_isolated_when_none_came_in_the_hundred_ms_before() {
        assert!(is_isolated(None));
        assert!(is_isolated(Some(Duration::from_millis(300))));
        assert!(is_isolated(Some(ISOLATION)));
        assert!(!is_isolated(Some(Duration::from_millis(1))));
        assert!(!is_isolated(Some(Duration::from_millis(99))));
    }
}
