//! The per-server loop: start a session, enumerate, follow changes, and restart with backoff
//! when the session ends. Every new session is a fresh handshake and a full enumeration.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::SpanContext;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::lifecycle::{self, Event, Lifecycle, Next};
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

/// Why a session ended.
enum SessionEnd {
    /// toolhost is stopping this server.
    Cancelled,
    /// The session closed (the process exited or its output ended).
    Closed,
    /// An operator asked for a fresh session.
    Restart,
}

pub(crate) struct Worker {
    pub(crate) name: Arc<str>,
    pub(crate) spec: ServerSpec,
    pub(crate) store: Store,
    pub(crate) registry: Arc<Registry>,
    pub(crate) reaper: Arc<Reaper>,
    /// Shared by all workers: bounds how many sessions start (connect and first enumeration) at once.
    pub(crate) start_permits: Arc<Semaphore>,
    pub(crate) metrics: Metrics,
    /// The era this server was last found to speak; `None` until known.
    pub(crate) era: Option<Era>,
    pub(crate) commands: mpsc::Receiver<WorkerCommand>,
    pub(crate) cancel: CancellationToken,
    /// A listing of this session was committed (or found unchanged).
    pub(crate) session_listed_ok: bool,
    /// The previous listing was empty and was held back for confirmation.
    pub(crate) empty_listing_held: bool,
    /// The `ttlMs` of the last complete listing, if the server gave one.
    pub(crate) last_ttl: Option<Duration>,
    /// When the last pass ended and how long it took: bursts keep listing to a share of the time.
    pub(crate) last_pass: Option<(Instant, Duration)>,
    /// The last session ended because its OAuth authorization needs an operator.
    pub(crate) session_needed_authorization: bool,
    /// The last session's sandbox stopped the server at a limit: it shows `failed`.
    pub(crate) session_stopped_by_sandbox: bool,
}

// === impl Worker ===

impl Worker {
    pub(crate) async fn run(mut self) {
        let settings = SessionSettings {
            request_timeout: self.spec.request_timeout,
            max_message_bytes: self.spec.max_message_bytes,
            shutdown_grace: self.spec.shutdown_grace,
            reaper: self.reaper.clone(),
            authorizer: match upstream::authorizer_for(&self.name, &self.spec, Interaction::None, Some(self.metrics.clone())) {
                Ok(authorizer) => authorizer,
                Err(error) => {
                    let text = error.to_string();
                    tracing::error!(server = %self.name, error = %text, "cannot set up the server's authorization");
                    self.set_state(ServerState::AuthRequired, Some(text));
                    self.cancel.cancelled().await;
                    self.set_state(ServerState::Stopped, None);
                    return;
                }
            },
            operations: self.metrics.client_operation_duration.clone(),
            egress: self.registry.server(&self.name).map(|view| view.shared.egress.clone()).unwrap_or_default(),
        };
        let authorizer = settings.authorizer.clone();
        self.registry.update(&self.name, |view| view.authorizer = authorizer);
        let mut life = Lifecycle::new(self.spec.restart.clone());
        loop {
            self.set_state(life.attempt_state(), None);
            // Only so many servers start at once: a boot with a thousand servers must not starve
            // the API (which is already serving the stored catalog) or the machine.
            let permit = tokio::select! {
                () = self.cancel.cancelled() => break,
                permit = self.start_permits.clone().acquire_owned() => permit.ok(),
            };
            let connected = tokio::select! {
                () = self.cancel.cancelled() => break,
                connected = upstream::connect(&self.name, &self.spec, &settings, self.era) => connected,
            };
            let event = match connected {
                Ok(connection) => {
                    if crate::faults::fire("worker.panic", &self.name) {
                        panic!("injected fault: worker.panic");
                    }
                    let started = Instant::now();
                    let reason = if life.is_first() { EnumerationReason::Initial } else { EnumerationReason::Reconnect };
                    match self.run_session(connection, reason, permit, settings.authorizer.as_deref()).await {
                        SessionEnd::Cancelled => break,
                        SessionEnd::Restart => Event::RestartAsked,
                        SessionEnd::Closed => {
                            let refused = if std::mem::take(&mut self.session_stopped_by_sandbox) {
                                Some(ServerState::Failed)
                            } else {
                                self.session_needed_authorization.then_some(ServerState::AuthRequired)
                            };
                            Event::SessionEnded { lasted: started.elapsed(), refused }
                        }
                    }
                }
                Err(error) => {
                    let text = crate::secrets::redact_owned(error.to_string());
                    tracing::warn!(server = %self.name, error = %text, "cannot start a session");
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
                    self.registry.update(&self.name, |view| view.last_error = Some(text));
                    Event::StartFailed { refused }
                }
            };
            self.metrics.record_restart(&self.name);
            let (state, delay) = match life.on(event) {
                // Asked for, not a failure: no backoff.
                Next::Reconnect => (ServerState::Reconnecting, None),
                Next::Wait { state, delay, failures } => {
                    tracing::info!(server = %self.name, failures, delay_ms = delay.as_millis() as u64, "restarting after a delay");
                    (state, Some(delay))
                }
            };
            self.registry.update(&self.name, |view| {
                view.state = state;
                view.session = None;
                view.num_restarts += 1;
            });
            let Some(delay) = delay else { continue };
            tokio::select! {
                () = self.cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
                // An operator's restart, or a login, cuts the wait short.
                Some(WorkerCommand::Restart | WorkerCommand::Authorized) = self.commands.recv() => {
                    tracing::info!(server = %self.name, "restart or new authorization: not waiting out the backoff");
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
        // An idle server's token is refreshed too: a refresh token unused for weeks may expire.
        let keep_fresh = async {
            match authorizer {
                Some(authorizer) => authorizer.keep_fresh().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(keep_fresh);
        let mut authorization_lost = false;
        let hello = connection.hello().clone();
        tracing::info!(server = %self.name, mcp.protocol.version = %hello.protocol_version, tools = hello.has_tools, "session started");
        let mut changes = handle.list_changed();
        self.registry.update(&self.name, |view| {
            view.hello = Some(hello.clone());
            view.session = Some(handle.clone());
            view.last_error = None;
        });
        if self.era != Some(hello.era) {
            self.era = Some(hello.era);
            if let Err(error) = self.store.remember_era(&self.name, hello.era.as_str(), &hello.protocol_version).await {
                tracing::warn!(server = %self.name, %error, "cannot remember the server's protocol era");
            }
        }
        let session_span = trace::session(&self.name, &hello, &self.spec.transport);
        let session_context = span_context(&session_span);
        // A 2026-07-28 server has no session to measure: only a 2025 one's life is recorded.
        let life = (hello.era == Era::Legacy).then(|| {
            SessionLife::start(&self.metrics.client_session_duration, &hello.protocol_version, handle.wire(), Side::Client)
                .with(opentelemetry::KeyValue::new("toolhost.server", self.name.to_string()))
        });
        // Modern servers announce changes only on a subscriptions/listen stream.
        let wants_listen = hello.era == Era::Modern && hello.has_tools && hello.tools_list_changed;
        let listen_handle = handle.clone();
        let listen_params = modern::listen_params();
        let (ack_tx, mut ack_rx) = watch::channel(0u64);
        let mut listen: Option<ListenFuture<'_>> = None;
        let mut listen_open_at: Option<Instant> = wants_listen.then(Instant::now);
        let mut ack_deadline: Option<Instant> = None;
        let mut ttl_refresh_at: Option<Instant> = None;
        let mut pending = Some(reason);
        let mut cause: Option<SpanContext> = None;
        let mut change_seen_at: Option<Instant> = None;
        let mut retry_at: Option<Instant> = None;
        let stray_changes = Throttle::new(1);
        self.session_listed_ok = false;
        self.empty_listing_held = false;
        let end = loop {
            if let Some(reason) = pending.take() {
                retry_at = None;
                let span = trace::refresh(&self.name, reason, session_context.clone(), cause.take());
                let refreshed = self.refresh(&connection, &hello, reason, &mut changes).instrument(span).await;
                match refreshed {
                    Ok(true) => {
                        if let Some(seen) = change_seen_at.take() {
                            self.metrics.record_propagation(&self.name, seen.elapsed());
                        }
                        ttl_refresh_at = self.last_ttl.take().map(|ttl| deadline::after(ttl_delay(ttl)));
                    }
                    Ok(false) => retry_at = Some(deadline::after(lifecycle::backoff(&self.spec.restart, lifecycle::REFRESH_FAILED))),
                    Err(end) => break end,
                }
            }
            // The session is up and enumerated (or its first pass has failed): let the next start.
            drop(start_permit.take());
            let retry = async {
                match retry_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.cancel.cancelled() => break SessionEnd::Cancelled,
                () = handle.closed() => break SessionEnd::Closed,
                lost = &mut keep_fresh => {
                    self.registry.update(&self.name, |view| view.last_error = Some(format!("authorization required: {lost}")));
                    authorization_lost = true;
                    break SessionEnd::Closed;
                }
                Ok(()) = changes.changed() => {
                    if hello.has_tools {
                        pending = Some(EnumerationReason::ListChanged);
                        change_seen_at.get_or_insert_with(Instant::now);
                    } else {
                        if let Some(suppressed) = stray_changes.admit() {
                            tracing::warn!(server = %self.name, suppressed, "ignored tools/list_changed from a server that does not offer tools");
                        }
                        changes.borrow_and_update();
                    }
                }
                Some(command) = self.commands.recv() => match command {
                    WorkerCommand::Refresh(reason, link) => {
                        pending = Some(reason);
                        cause = link;
                    }
                    WorkerCommand::Restart => break SessionEnd::Restart,
                    WorkerCommand::Authorized => {}
                },
                () = retry => pending = Some(EnumerationReason::Manual),
                () = sleep_until_opt(ttl_refresh_at) => {
                    // ttlMs is a freshness hint: the listing has gone stale, so look again (jittered,
                    // never sooner than the floor in ttl_delay).
                    ttl_refresh_at = None;
                    pending = Some(EnumerationReason::Ttl);
                }
                () = sleep_until_opt(listen_open_at), if listen.is_none() => {
                    listen_open_at = None;
                    listen = Some(Box::pin(listen_handle.listen(&listen_params, ack_tx.clone())));
                    ack_deadline = Some(deadline::after(self.spec.request_timeout));
                }
                ended = async { listen.as_mut().expect("guarded by the condition").await }, if listen.is_some() => {
                    listen = None;
                    ack_deadline = None;
                    tracing::info!(server = %self.name, result = ?ended, "the subscriptions/listen stream ended; re-opening it");
                    listen_open_at = Some(deadline::after(lifecycle::backoff(&self.spec.restart, lifecycle::LISTEN_ENDED)));
                }
                Ok(()) = ack_rx.changed() => {
                    ack_deadline = None;
                    // Notifications may have been missed while no stream was open.
                    pending = Some(EnumerationReason::ListChanged);
                }
                () = sleep_until_opt(ack_deadline) => {
                    tracing::warn!(server = %self.name, "subscriptions/listen was not acknowledged in time; re-opening it");
                    ack_deadline = None;
                    listen = None;
                    listen_open_at = Some(deadline::after(lifecycle::backoff(&self.spec.restart, lifecycle::LISTEN_UNACKNOWLEDGED)));
                }
            }
        };
        drop(listen);
        if !hello.tools_list_changed && handle.stats().num_list_changed.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            tracing::warn!(server = %self.name, "the server sent tools/list_changed without advertising tools.listChanged");
        }
        let ended_by_server = connection.ended_by_server();
        self.session_needed_authorization = authorization_lost || connection.needs_authorization();
        self.registry.update(&self.name, |view| {
            view.session = None;
            // Said at once, not after the shutdown below (which may wait out a grace period):
            // a server with no session is never shown "ready".
            if !matches!(end, SessionEnd::Cancelled) {
                view.state = ServerState::Reconnecting;
            }
            if ended_by_server.is_some() {
                view.last_error = ended_by_server;
            }
        });
        let ended = connection.shutdown().await;
        if let Some(life) = life {
            let error_type = match (&ended.sandbox, &end) {
                (Some(_), _) => Some("sandbox_limit"),
                (None, SessionEnd::Closed) => Some("session_closed"),
                (None, SessionEnd::Cancelled | SessionEnd::Restart) => None,
            };
            life.end(error_type);
        }
        if let Some(report) = &ended.sandbox {
            let text = report.describe();
            tracing::warn!(server = %self.name, error = %text, "the server's sandbox stopped it");
            self.session_stopped_by_sandbox = true;
            let limit = match report {
                crate::sandbox::Report::Limit { kind, .. } => Some(*kind),
                _ => None,
            };
            self.registry.update(&self.name, |view| {
                view.last_error = Some(text);
                if let (Some(sandbox), Some(limit)) = (view.sandbox.as_mut(), limit) {
                    sandbox.last_limit = Some(limit);
                }
            });
        }
        // A server that went away by itself says how and why, at WARN and in its last error:
        // "the session is closed" alone tells an operator nothing.
        if ended.sandbox.is_none() && matches!(end, SessionEnd::Closed) && !self.session_needed_authorization {
            let why = format!("the server {}", ended.explain());
            tracing::warn!(server = %self.name, error = %why, "the server ended its session");
            self.registry.update(&self.name, |view| {
                if view.last_error.is_none() {
                    view.last_error = Some(why);
                }
            });
        }
        let exit = ended.status.map_or_else(|| "unknown".to_owned(), |status| status.to_string());
        tracing::info!(server = %self.name, %exit, "session ended");
        session_span.add_event("session ended", vec![opentelemetry::KeyValue::new("toolhost.exit", exit)]);
        end
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
                tracing::debug!(server = %self.name, "tools/list_changed burst; waiting for quiet");
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
            limits: &self.spec.limits,
            request_timeout: self.spec.request_timeout,
            enumeration_timeout: self.spec.enumeration_timeout,
        };
        loop {
            let clock = PassClock::start();
            let mut stats = PassStats::default();
            let pass_span = trace::pass(&self.name, reason);
            let pass = tokio::select! {
                () = self.cancel.cancelled() => return Err(SessionEnd::Cancelled),
                pass = enumerate::enumerate(connection.handle(), &settings, changes, &mut stats).instrument(pass_span.clone()) => pass,
            };
            let (outcome, error) = match &pass {
                Ok(_) => ("complete", None),
                Err(PassEnd::Superseded) => ("superseded", Some("superseded by tools/list_changed")),
                Err(PassEnd::Failed(error)) => ("failed", Some(error.as_str())),
            };
            trace::finish_pass(&pass_span, outcome, &stats, error);
            drop(pass_span);
            self.last_pass = Some((Instant::now(), clock.elapsed()));
            if outcome != "complete" {
                self.metrics.record_enumeration(&self.name, reason.as_str(), outcome, clock.elapsed());
            }
            match pass {
                Ok(listing) => {
                    if let Some(error) = self.suspicious_empty_listing(&listing) {
                        tracing::warn!(server = %self.name, %error, "not committed; confirming with another listing");
                        self.record_failure(reason, EnumerationOutcome::Failed, Some(error.clone()), clock, stats).await;
                        self.set_state(ServerState::Failed, Some(error));
                        return Ok(false);
                    }
                    self.last_ttl = stats.ttl_ms.filter(|ttl| *ttl > 0).map(Duration::from_millis);
                    let committed = self.commit(listing, reason, clock, stats).await;
                    self.session_listed_ok |= committed;
                    return Ok(committed);
                }
                Err(PassEnd::Superseded) => {
                    tracing::debug!(server = %self.name, "enumeration superseded by tools/list_changed");
                    self.record_failure(reason, EnumerationOutcome::Superseded, None, clock, stats).await;
                    self.wait_for_quiet(changes).await?;
                    reason = EnumerationReason::ListChanged;
                }
                Err(PassEnd::Failed(error)) => {
                    tracing::warn!(server = %self.name, %error, "enumeration failed; the current generation stays");
                    self.record_failure(reason, EnumerationOutcome::Failed, Some(error.clone()), clock, stats).await;
                    self.set_state(ServerState::Failed, Some(error));
                    return Ok(false);
                }
            }
        }
    }

    /// An empty listing that would empty a non-empty catalog right after (re)connecting or after
    /// a failure is held back once: servers that lost their credentials or state often answer
    /// with nothing. A second empty listing in a row confirms it.
    fn suspicious_empty_listing(&mut self, listing: &Listing) -> Option<String> {
        if !listing.tools.is_empty() {
            self.empty_listing_held = false;
            return None;
        }
        let current = self.registry.server(&self.name).and_then(|view| view.generation.clone())?;
        if current.tools.is_empty() || self.session_listed_ok || self.empty_listing_held {
            return None;
        }
        self.empty_listing_held = true;
        Some(format!(
            "the server listed no tools right after connecting; generation {} ({} tools) stays until a second listing confirms it",
            current.number,
            current.tools.len()
        ))
    }

    /// Waits until no list_changed has arrived for [`QUIET_PERIOD`] and listing has been idle
    /// for [`IDLE_PER_PASS`] times the last pass (at most [`MAX_QUIET_WAIT`] in all).
    async fn wait_for_quiet(&self, changes: &mut watch::Receiver<u64>) -> Result<(), SessionEnd> {
        let give_up = deadline::after(MAX_QUIET_WAIT);
        let idle_until = self.last_pass.map(|(ended, took)| ended + took.saturating_mul(IDLE_PER_PASS).min(MAX_QUIET_WAIT));
        changes.borrow_and_update();
        loop {
            let quiet_until = deadline::after(QUIET_PERIOD).max(idle_until.unwrap_or_else(Instant::now));
            tokio::select! {
                () = self.cancel.cancelled() => return Err(SessionEnd::Cancelled),
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
        self.registry.update(&self.name, |view| {
            view.state = state;
            if error.is_some() {
                view.last_error = error;
            }
        });
    }
}

/// A change with no other within [`ISOLATION`] before it (or the first of a session).
fn is_isolated(gap_before: Option<Duration>) -> bool {
    gap_before.is_none_or(|gap| gap >= ISOLATION)
}

/// An open `subscriptions/listen`: completes when the subscription ends.
type ListenFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), UpstreamError>> + Send + 'a>>;

/// Completes at `at`, or never when there is no deadline.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When to look again after a listing that was fresh for `ttl`: never sooner than a floor (ttlMs
/// is a hint, not a polling interval), with up to 10% jitter so servers do not refresh in step.
fn ttl_delay(ttl: Duration) -> Duration {
    const FLOOR: Duration = Duration::from_secs(5);
    // A server's ttlMs can be any u64; a day is as long as toolhost waits to look again.
    const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
    let base = ttl.clamp(FLOOR, MAX_TTL);
    base.saturating_add(base.mul_f64(fastrand::f64() * 0.1))
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
}
