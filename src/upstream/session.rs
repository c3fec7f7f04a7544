//! One JSON-RPC session over a pair of byte streams: request/response correlation, answers to
//! server-initiated requests, and change notifications.
//!
//! Two tasks per session: a reader that routes every incoming line, and a writer that owns the
//! server's input. Callers never wait on each other: a request registers its reply slot in the
//! pending map (a short, never-awaited lock), queues its line and awaits its own oneshot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::upstream::queue::Slot as CallSlot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::mcp::jsonrpc::{self, Incoming, RequestId, RpcError};
use crate::mcp::lifecycle::{METHOD_CANCELLED, METHOD_PING, METHOD_PROGRESS, METHOD_TOOLS_LIST_CHANGED};
use crate::mcp::lines::{Line, Lines};
use crate::telemetry::mcp::{Operation, Side, Wire};
use crate::telemetry::throttle::Throttle;
use crate::upstream::UpstreamError;

/// How many outgoing lines may wait for the server to read them before requests are refused.
const OUTGOING_QUEUE: usize = 1024;
/// Log lines a second about one server's misbehaviour (garbage, stray responses, oversized
/// messages, unexpected requests); the rest are counted in [`SessionStats`] and summarised.
const DIAGNOSTICS_PER_SECOND: u32 = 5;
/// How long a request whose caller gave up keeps its concurrency slot while the server may
/// still be working on it (after `notifications/cancelled`): a server that ignores
/// cancellation cannot be handed more work than `max_concurrent_calls` by callers that time out.
const ABANDONED_GRACE: Duration = Duration::from_secs(5);

type Reply = Result<Box<RawValue>, Failed>;

/// Why a request got no result.
#[derive(Debug)]
enum Failed {
    /// The server answered with a JSON-RPC error.
    Rpc(RpcError),
    /// The transport lost the exchange ([`Core::fail_request`]).
    Transport(ExchangeFailure),
}

/// How a transport lost a request's exchange: whether the server may have received it decides
/// whether a call may be tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExchangeFailure {
    /// It never left toolhost (no connection, a request that could not be built, no token).
    NotSent(String),
    /// It was sent and the exchange broke (a reset, a cut stream, no response in time, an HTTP
    /// error status): the server may have run it.
    Lost(String),
}

/// Counters a session keeps about its peer's misbehaviour.
#[derive(Debug, Default)]
pub struct SessionStats {
    /// Lines on the server's output that were not JSON-RPC messages.
    pub num_bad_lines: AtomicU64,
    /// Lines longer than the maximum message size, discarded.
    pub num_oversized_lines: AtomicU64,
    /// Responses that arrived after their request had timed out or been cancelled.
    pub num_late_responses: AtomicU64,
    /// `notifications/tools/list_changed` received.
    pub num_list_changed: AtomicU64,
    /// Server-to-client requests toolhost refused with -32601.
    pub num_refused_requests: AtomicU64,
}

/// The cheap, cloneable side of a session: send requests and watch for changes.
#[derive(Clone)]
pub struct SessionHandle {
    shared: Arc<Shared>,
}

struct Shared {
    server: Arc<str>,
    /// How the server is reached, and where each request's duration goes (the MCP conventions).
    observed: Observed,
    /// The protocol version the server agreed to, once it has.
    protocol_version: OnceLock<Arc<str>>,
    /// A 2025-era Streamable HTTP server's `Mcp-Session-Id`, once it gave one.
    session_id: OnceLock<Arc<str>>,
    pending: Mutex<HashMap<RequestId, Slot>>,
    /// Requests whose caller gave up, holding their concurrency slot until the server answers
    /// or [`ABANDONED_GRACE`] ends.
    abandoned: Mutex<HashMap<RequestId, (CallSlot, Instant)>>,
    abandoned_added: Notify,
    next_id: AtomicU64,
    outgoing: mpsc::Sender<String>,
    /// Cancelled when the session can no longer carry messages (EOF, I/O error or close).
    closed: CancellationToken,
    /// Counts list_changed notifications; a watch so that bursts coalesce for free.
    list_changed: watch::Sender<u64>,
    stats: SessionStats,
    /// Modern era: the `_meta` every request carries (set once, after discovery).
    request_meta: OnceLock<serde_json::Map<String, serde_json::Value>>,
    /// Modern era: the ids of open `subscriptions/listen` requests, and those acknowledged.
    subscriptions: Mutex<Subscriptions>,
    /// Bounds the log lines the server's misbehaviour can cause.
    diagnostics: Throttle,
    /// When the last list_changed arrived, and how long after the one before it.
    change_times: Mutex<(Option<Instant>, Option<Duration>)>,
    /// Where `notifications/progress` for each progress token toolhost issued goes.
    progress: Mutex<HashMap<u64, mpsc::Sender<Box<RawValue>>>>,
    next_progress_token: AtomicU64,
}

/// How many progress notifications may wait for a slow caller; past that they are dropped
/// (progress is advisory, and a caller must not make the session's reader wait).
pub const PROGRESS_QUEUE: usize = 32;

/// A progress token routed to a caller while this value lives.
pub struct ProgressRoute {
    shared: Arc<Shared>,
    pub token: u64,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.shared.progress.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.token);
    }
}

/// A request waiting for its response.
struct Slot {
    reply: oneshot::Sender<Reply>,
    /// The caller's concurrency slot, released when the response arrives (or, if the caller
    /// gives up first, after the grace).
    permit: Option<CallSlot>,
    /// Cancelled when the caller stops waiting: a transport stops working on the request.
    caller_gone: CancellationToken,
}

#[derive(Default)]
struct Subscriptions {
    open: HashMap<String, bool>,
    acknowledged: Option<watch::Sender<u64>>,
}

/// What a session's telemetry needs to know of it.
#[derive(Clone)]
pub struct Observed {
    pub wire: Wire,
    /// `mcp.client.operation.duration`.
    pub operations: opentelemetry::metrics::Histogram<f64>,
}

/// The owning side of a session: its I/O tasks, ended by [`SessionTasks::join`] or, dropped
/// without it (its owner panicked or was aborted), at once.
pub(crate) struct SessionTasks {
    /// Tells the writer to flush what is queued and close the server's input.
    close_input: CancellationToken,
    reader: AbortOnDropHandle<()>,
    writer: AbortOnDropHandle<()>,
    janitor: AbortOnDropHandle<()>,
}

/// Starts the reader and writer tasks over `output` (what the server writes) and `input`.
pub(crate) fn start<R, W>(
    server: Arc<str>,
    observed: Observed,
    output: R,
    input: W,
    max_message_bytes: usize,
) -> (SessionHandle, SessionTasks)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (handle, core, outgoing_rx) = start_core(server, observed);
    let shared = core.shared;
    let close_input = CancellationToken::new();
    let reader = AbortOnDropHandle::new(tokio::spawn(read_loop(shared.clone(), output, max_message_bytes)));
    let writer = AbortOnDropHandle::new(tokio::spawn(write_loop(shared.clone(), input, outgoing_rx, close_input.clone())));
    let janitor = AbortOnDropHandle::new(tokio::spawn(expire_abandoned(shared.clone())));
    let tasks = SessionTasks { close_input, reader, writer, janitor };
    (handle, tasks)
}

/// The transport-facing side of a session whose I/O a transport drives itself (HTTP): it
/// delivers each incoming message with [`Core::route`] and sends the lines it takes from the
/// returned receiver.
pub(crate) struct Core {
    shared: Arc<Shared>,
}

/// A session without I/O tasks; see [`Core`].
pub(crate) fn start_core(server: Arc<str>, observed: Observed) -> (SessionHandle, Core, mpsc::Receiver<String>) {
    let (outgoing_tx, outgoing_rx) = mpsc::channel(OUTGOING_QUEUE);
    let shared = Arc::new(Shared {
        server,
        observed,
        protocol_version: OnceLock::new(),
        session_id: OnceLock::new(),
        pending: Mutex::new(HashMap::new()),
        abandoned: Mutex::new(HashMap::new()),
        abandoned_added: Notify::new(),
        next_id: AtomicU64::new(1),
        outgoing: outgoing_tx,
        closed: CancellationToken::new(),
        list_changed: watch::channel(0).0,
        stats: SessionStats::default(),
        request_meta: OnceLock::new(),
        subscriptions: Mutex::default(),
        diagnostics: Throttle::new(DIAGNOSTICS_PER_SECOND),
        change_times: Mutex::default(),
        progress: Mutex::default(),
        next_progress_token: AtomicU64::new(1),
    });
    (SessionHandle { shared: shared.clone() }, Core { shared }, outgoing_rx)
}

impl Core {
    /// The server's `Mcp-Session-Id` (2025 era), for the telemetry; the transport keeps and
    /// sends its own copy.
    pub(crate) fn session_started(&self, id: &str) {
        let _ = self.shared.session_id.set(Arc::from(id));
    }

    /// Delivers one message the server sent.
    pub(crate) fn route(&self, message: &[u8]) {
        self.shared.route(message);
    }

    /// Answers a request that will never get a response from the server (its HTTP exchange
    /// failed), so its caller does not wait for a timeout, and knows whether it may have run.
    pub(crate) fn fail_request(&self, id: RequestId, failure: ExchangeFailure) {
        let slot = self.shared.lock_pending().remove(&id);
        if let Some(slot) = slot {
            let _ = slot.reply.send(Err(Failed::Transport(failure)));
        }
        // An exchange that failed will bring no late answer: its slot is free.
        drop(self.shared.lock_abandoned().remove(&id));
    }

    /// Completes when the caller of request `id` stops waiting for it (at once if it already
    /// has); a transport then abandons the exchange.
    pub(crate) fn caller_gone(&self, id: RequestId) -> CancellationToken {
        self.shared.lock_pending().get(&id).map_or_else(
            || {
                let gone = CancellationToken::new();
                gone.cancel();
                gone
            },
            |slot| slot.caller_gone.clone(),
        )
    }

    /// Expires abandoned requests' slots; a transport without [`SessionTasks`] runs it.
    pub(crate) async fn expire_abandoned(&self) {
        expire_abandoned(self.shared.clone()).await;
    }

    /// Ends the session: every waiting request fails as closed.
    pub(crate) fn close(&self) {
        self.shared.fail_pending();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// A request still waits for its response.
    pub(crate) fn is_pending(&self, id: RequestId) -> bool {
        self.shared.lock_pending().contains_key(&id)
    }

    pub(crate) async fn closed(&self) {
        self.shared.closed.cancelled().await;
    }
}

// === impl SessionHandle ===

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle").field("server", &self.shared.server).field("closed", &self.is_closed()).finish()
    }
}

impl SessionHandle {
    /// Sends a request and waits for its result, at most `timeout`.
    ///
    /// If the wait ends for any reason but a reply (timeout, or the caller dropping the future),
    /// and `cancellable` is set, the server is sent `notifications/cancelled` for it.
    ///
    /// # Errors
    /// The server's JSON-RPC error, a timeout, a closed session or a full input queue.
    pub async fn request(
        &self,
        method: &str,
        params: Option<&RawValue>,
        timeout: Duration,
        cancellable: bool,
    ) -> Result<Box<RawValue>, UpstreamError> {
        self.request_observed(method, params, timeout, cancellable, None, |_| {}).await
    }

    /// [`SessionHandle::request`] that holds `permit` (a concurrency slot) until the server
    /// answers: if the caller gives up first, the slot stays taken for a bounded grace after the
    /// cancellation, because the server may still be working.
    ///
    /// # Errors
    /// As [`SessionHandle::request`].
    pub async fn request_holding(
        &self,
        method: &str,
        params: Option<&RawValue>,
        timeout: Duration,
        permit: CallSlot,
    ) -> Result<Box<RawValue>, UpstreamError> {
        self.request_observed(method, params, timeout, true, Some(permit), |_| {}).await
    }

    /// [`SessionHandle::request`], telling `on_id` the request's id before it is sent.
    async fn request_observed(
        &self,
        method: &str,
        params: Option<&RawValue>,
        timeout: Duration,
        cancellable: bool,
        permit: Option<CallSlot>,
        on_id: impl FnOnce(RequestId),
    ) -> Result<Box<RawValue>, UpstreamError> {
        if self.shared.closed.is_cancelled() {
            return Err(UpstreamError::Closed);
        }
        let merged;
        let params = match (self.shared.request_meta.get(), params) {
            (Some(meta), params) => {
                merged = crate::mcp::modern::with_meta(params, meta);
                merged.as_deref().or(params)
            }
            (None, params) => params,
        };
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        on_id(id);
        // The request's span (a page of tools/list, an upstream tools/call) carries its id.
        if crate::telemetry::traces_exported() {
            tracing_opentelemetry::OpenTelemetrySpanExt::set_attribute(&tracing::Span::current(), "jsonrpc.request.id", id.to_string());
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        self.shared.lock_pending().insert(id, Slot { reply: reply_tx, permit, caller_gone: CancellationToken::new() });
        let mut guard = PendingGuard { shared: &self.shared, id, cancellable, done: false };
        self.shared.send_line(jsonrpc::encode_request(id, method, params))?;
        let reply = tokio::select! {
            reply = reply_rx => reply,
            () = tokio::time::sleep(timeout) => {
                return Err(UpstreamError::Timeout { method: method.to_owned(), after: timeout });
            }
        };
        guard.done = true;
        match reply {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(Failed::Rpc(error))) => Err(UpstreamError::Rpc(error)),
            Ok(Err(Failed::Transport(ExchangeFailure::NotSent(message)))) => Err(UpstreamError::NotSent(message)),
            Ok(Err(Failed::Transport(ExchangeFailure::Lost(message)))) => Err(UpstreamError::Lost(message)),
            Err(_) => Err(UpstreamError::Closed),
        }
    }

    /// A fresh progress token whose `notifications/progress` go to `sink` until the route drops.
    pub fn route_progress(&self, sink: mpsc::Sender<Box<RawValue>>) -> ProgressRoute {
        let token = self.shared.next_progress_token.fetch_add(1, Ordering::Relaxed);
        self.shared.progress.lock().unwrap_or_else(PoisonError::into_inner).insert(token, sink);
        ProgressRoute { shared: self.shared.clone(), token }
    }

    /// The span and duration of one request toolhost is about to send on this session, as the MCP
    /// semantic conventions describe it; send the request inside [`Operation::span`] (its id
    /// lands there) and [`judge`] the result.
    pub fn operation(&self, method: &str, target: Option<&str>) -> Operation {
        let mut operation = Operation::start(Side::Client, &self.shared.observed.operations, method, target, &self.shared.observed.wire);
        operation.attribute(opentelemetry::KeyValue::new("toolhost.server", self.shared.server.to_string()));
        if let Some(version) = self.shared.protocol_version.get() {
            operation.protocol_version(version);
        }
        if let Some(id) = self.shared.session_id.get() {
            operation.session(id);
        }
        operation
    }

    /// The protocol version the server agreed to; later operations carry it.
    pub fn agreed_version(&self, version: &str) {
        let _ = self.shared.protocol_version.set(Arc::from(version));
    }

    /// How the server is reached.
    pub fn wire(&self) -> &Wire {
        &self.shared.observed.wire
    }

    /// Modern era: every later request carries these `_meta` keys.
    pub fn set_request_meta(&self, meta: serde_json::Map<String, serde_json::Value>) {
        let _ = self.shared.request_meta.set(meta);
    }

    /// Modern era: holds a `subscriptions/listen` open until it ends (a graceful result, an
    /// error, or the session closing). `acknowledged` is told when the server acknowledges it;
    /// list_changed notifications tagged with its id count as changes.
    ///
    /// # Errors
    /// The reason the subscription ended, when it did not end with a result.
    pub async fn listen(&self, params: &RawValue, acknowledged: watch::Sender<u64>) -> Result<(), UpstreamError> {
        let mut registered = None;
        let shared = &self.shared;
        let result = self
            .request_observed(crate::mcp::modern::METHOD_LISTEN, Some(params), Duration::from_secs(365 * 24 * 3600), true, None, |id| {
                let mut subscriptions = shared.lock_subscriptions();
                subscriptions.open.insert(id.to_string(), false);
                subscriptions.acknowledged = Some(acknowledged);
                registered = Some(id.to_string());
            })
            .await;
        if let Some(id) = registered {
            self.shared.lock_subscriptions().open.remove(&id);
        }
        result.map(|_| ())
    }

    /// Sends a notification.
    ///
    /// # Errors
    /// A closed session or a full input queue.
    pub fn notify(&self, method: &str, params: Option<&RawValue>) -> Result<(), UpstreamError> {
        self.shared.send_line(jsonrpc::encode_notification(method, params))
    }

    /// Completes when the session can no longer carry messages.
    pub async fn closed(&self) {
        self.shared.closed.cancelled().await;
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// How long before the latest list_changed the previous one arrived (`None` before a second
    /// one): what tells an isolated change from a burst.
    pub fn last_change_gap(&self) -> Option<Duration> {
        self.shared.change_times.lock().unwrap_or_else(PoisonError::into_inner).1
    }

    /// A receiver that changes whenever the server sends `notifications/tools/list_changed`.
    pub fn list_changed(&self) -> watch::Receiver<u64> {
        self.shared.list_changed.subscribe()
    }

    pub fn stats(&self) -> &SessionStats {
        &self.shared.stats
    }
}

/// Marks `operation` with how its request ended: the server's JSON-RPC error, or the failure.
pub fn judge(operation: &mut Operation, result: &Result<Box<RawValue>, UpstreamError>) {
    match result {
        Ok(_) => {}
        Err(UpstreamError::Rpc(error)) => operation.rpc_error(error.code, &error.message),
        Err(error) => operation.failed(error.kind(), &error.to_string()),
    }
}

// === impl SessionTasks ===

impl SessionTasks {
    /// Closes the server's input after flushing what is queued.
    pub(crate) fn close_input(&self) {
        self.close_input.cancel();
    }

    /// Waits for the reader and the writer, aborting them after `deadline` (a grandchild may hold a pipe open).
    pub(crate) async fn join(self, deadline: Duration) {
        self.close_input.cancel();
        let SessionTasks { reader, writer, janitor, .. } = self;
        // Past the deadline, the handles are dropped with the wait: both tasks are aborted.
        let _ = tokio::time::timeout(deadline, async {
            let _ = reader.await;
            let _ = writer.await;
        })
        .await;
        // The janitor ends when the session closes; one that never closed is over now anyway.
        janitor.abort();
        let _ = janitor.await;
    }
}

// === impl Shared ===

impl Shared {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Slot>> {
        // The map stays consistent even if a holder panicked: every operation is a single insert or remove.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_abandoned(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, (CallSlot, Instant)>> {
        self.abandoned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send_line(&self, line: String) -> Result<(), UpstreamError> {
        self.outgoing.try_send(line).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => UpstreamError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => UpstreamError::Closed,
        })
    }

    fn lock_subscriptions(&self) -> std::sync::MutexGuard<'_, Subscriptions> {
        self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn route(&self, line: &[u8]) {
        match jsonrpc::parse_line(line) {
            Ok(Incoming::Response { id, outcome }) => {
                let slot = self.lock_pending().remove(&id);
                match slot {
                    Some(slot) => {
                        let _ = slot.reply.send(outcome.map(ToOwned::to_owned).map_err(|error| Failed::Rpc(scrub(error))));
                    }
                    None if id >= self.next_id.load(Ordering::Relaxed) => {
                        self.stats.num_bad_lines.fetch_add(1, Ordering::Relaxed);
                        if let Some(suppressed) = self.diagnostics.admit() {
                            tracing::warn!(server = %self.server, jsonrpc.request.id = id, suppressed, "response with an id toolhost never issued");
                        }
                    }
                    None => {
                        // The server finished work its caller gave up on: its slot is free now.
                        drop(self.lock_abandoned().remove(&id));
                        self.stats.num_late_responses.fetch_add(1, Ordering::Relaxed);
                        if let Some(suppressed) = self.diagnostics.admit() {
                            tracing::debug!(server = %self.server, jsonrpc.request.id = id, suppressed, "response to a request no longer waited for");
                        }
                    }
                }
            }
            Ok(Incoming::ForeignResponse) => {
                self.stats.num_bad_lines.fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = self.diagnostics.admit() {
                    tracing::warn!(server = %self.server, suppressed, "response with an id toolhost never issued");
                }
            }
            Ok(Incoming::Request { id, method, .. }) => self.answer_server_request(id, method),
            Ok(Incoming::Notification { method, params }) => self.on_notification(method, params),
            Err(error) => {
                self.stats.num_bad_lines.fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = self.diagnostics.admit() {
                    let preview = crate::secrets::redact_owned(String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned());
                    tracing::warn!(server = %self.server, %error, line.preview = %preview, suppressed, "ignored a line that is not a JSON-RPC message");
                }
            }
        }
    }

    fn answer_server_request(&self, id: &RawValue, method: &str) {
        let line = if method == METHOD_PING {
            jsonrpc::encode_result(id, "{}")
        } else {
            // toolhost advertises no client capabilities, so roots, sampling, elicitation and
            // anything else are refused rather than answered with a fake success.
            self.stats.num_refused_requests.fetch_add(1, Ordering::Relaxed);
            if let Some(suppressed) = self.diagnostics.admit() {
                tracing::info!(server = %self.server, mcp.method.name = method, suppressed, "refused a server request toolhost did not advertise");
            }
            jsonrpc::encode_error(id, jsonrpc::code::METHOD_NOT_FOUND, &format!("toolhost does not support {method}"))
        };
        if let Err(error) = self.send_line(line)
            && let Some(suppressed) = self.diagnostics.admit()
        {
            tracing::warn!(server = %self.server, %error, suppressed, "could not answer a server request");
        }
    }

    fn on_notification(&self, method: &str, params: Option<&RawValue>) {
        // Modern notifications belong to a subscription: one toolhost did not open is ignored.
        let subscription = params.and_then(subscription_of);
        if let Some(subscription) = &subscription {
            let mut subscriptions = self.lock_subscriptions();
            match subscriptions.open.get_mut(subscription) {
                None => {
                    if let Some(suppressed) = self.diagnostics.admit() {
                        tracing::debug!(server = %self.server, suppressed, "notification for a subscription toolhost did not open");
                    }
                    return;
                }
                Some(acknowledged) if method == crate::mcp::modern::METHOD_ACKNOWLEDGED => {
                    *acknowledged = true;
                    if let Some(sender) = &subscriptions.acknowledged {
                        sender.send_modify(|n| *n += 1);
                    }
                    return;
                }
                Some(_) => {}
            }
        }
        if method == METHOD_PROGRESS {
            self.route_progress(params);
        } else if method == METHOD_TOOLS_LIST_CHANGED {
            {
                let mut times = self.change_times.lock().unwrap_or_else(PoisonError::into_inner);
                let now = Instant::now();
                *times = (Some(now), times.0.map(|previous| now.saturating_duration_since(previous)));
            }
            self.stats.num_list_changed.fetch_add(1, Ordering::Relaxed);
            self.list_changed.send_modify(|n| *n += 1);
        } else if let Some(suppressed) = self.diagnostics.admit() {
            tracing::debug!(server = %self.server, mcp.method.name = method, suppressed, "notification");
        }
    }

    /// Hands a progress notification to the caller whose token it names; a token toolhost did
    /// not issue, or whose call has ended, is ignored.
    fn route_progress(&self, params: Option<&RawValue>) {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Token {
            progress_token: u64,
        }
        let Some(params) = params else { return };
        let Ok(Token { progress_token }) = serde_json::from_str::<Token>(params.get()) else { return };
        let sink = self.progress.lock().unwrap_or_else(PoisonError::into_inner).get(&progress_token).cloned();
        if let Some(sink) = sink {
            let _ = sink.try_send(params.to_owned());
        }
    }

    /// Fails every waiting request: the session is gone.
    fn fail_pending(&self) {
        let suppressed = self.diagnostics.take_suppressed();
        if suppressed > 0 && !self.closed.is_cancelled() {
            tracing::warn!(server = %self.server, suppressed, "diagnostics about this session were not logged (rate limit)");
        }
        self.closed.cancel();
        let drained: Vec<_> = self.lock_pending().drain().collect();
        drop(drained);
        // Nothing more will come back from this server: every slot it held is free.
        let abandoned: Vec<_> = self.lock_abandoned().drain().collect();
        drop(abandoned);
    }
}

/// Removes an abandoned request from the pending map and tells the server to stop working on it.
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: RequestId,
    cancellable: bool,
    done: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let slot = self.shared.lock_pending().remove(&self.id);
        let was_pending = slot.is_some();
        if let Some(slot) = slot {
            slot.caller_gone.cancel();
            if let Some(permit) = slot.permit
                && !self.shared.closed.is_cancelled()
            {
                self.shared.lock_abandoned().insert(self.id, (permit, Instant::now() + ABANDONED_GRACE));
                self.shared.abandoned_added.notify_one();
            }
        }
        if was_pending && self.cancellable && !self.shared.closed.is_cancelled() {
            let params = format!(r#"{{"requestId":{},"reason":"toolhost stopped waiting"}}"#, self.id);
            if let Ok(params) = RawValue::from_string(params) {
                let _ = self.shared.send_line(jsonrpc::encode_notification(METHOD_CANCELLED, Some(&params)));
            }
        }
    }
}

/// An upstream's error with every registered secret scrubbed: it travels on to logs, statuses
/// and `last_error`.
fn scrub(mut error: RpcError) -> RpcError {
    error.message = crate::secrets::redact_owned(error.message);
    if let Some(data) = &error.data
        && let std::borrow::Cow::Owned(text) = crate::secrets::redact(data.get())
    {
        error.data = RawValue::from_string(text).ok();
    }
    error
}

/// `params._meta["io.modelcontextprotocol/subscriptionId"]`, as a string.
fn subscription_of(params: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta", default)]
        meta: Option<serde_json::Map<String, serde_json::Value>>,
    }
    let params: Params = serde_json::from_str(params.get()).ok()?;
    let id = params.meta?.remove(crate::mcp::modern::SUBSCRIPTION_ID)?;
    Some(match id {
        serde_json::Value::String(id) => id,
        other => other.to_string(),
    })
}

/// Frees the slots of abandoned requests whose grace has ended, until the session closes.
async fn expire_abandoned(shared: Arc<Shared>) {
    loop {
        let next = {
            let now = Instant::now();
            let mut abandoned = shared.lock_abandoned();
            abandoned.retain(|_, (_, until)| *until > now);
            abandoned.values().map(|(_, until)| *until).min()
        };
        let wait = async {
            match next {
                Some(until) => tokio::time::sleep_until(until.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shared.closed.cancelled() => return,
            () = shared.abandoned_added.notified() => {}
            () = wait => {}
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(shared: Arc<Shared>, output: R, max_message_bytes: usize) {
    let mut lines = Lines::with_capacity(output, max_message_bytes, 64 * 1024);
    loop {
        match lines.next().await {
            Ok(Line::Complete(line)) if line.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Line::Complete(line)) => shared.route(&line),
            Ok(Line::Oversized(len)) => {
                shared.stats.num_oversized_lines.fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = shared.diagnostics.admit() {
                    tracing::warn!(server = %shared.server, bytes = len, limit = max_message_bytes, suppressed, "discarded a message over the size limit");
                }
            }
            Ok(Line::Eof) => break,
            Err(error) => {
                tracing::warn!(server = %shared.server, %error, "reading from the server failed");
                break;
            }
        }
    }
    shared.fail_pending();
}

async fn write_loop<W: AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    input: W,
    mut outgoing: mpsc::Receiver<String>,
    close_input: CancellationToken,
) {
    let mut writer = BufWriter::new(input);
    loop {
        let line = tokio::select! {
            biased;
            line = outgoing.recv() => line,
            () = close_input.cancelled() => None,
        };
        let Some(line) = line else { break };
        let mut result = writer.write_all(line.as_bytes()).await;
        // Batch whatever else is already queued into the same flush.
        while let (Ok(()), Ok(more)) = (&result, outgoing.try_recv()) {
            result = writer.write_all(more.as_bytes()).await;
        }
        if let Err(error) = result.and(writer.flush().await) {
            tracing::debug!(server = %shared.server, %error, "writing to the server failed");
            shared.fail_pending();
            return;
        }
    }
    // Flush what was queued before the close, then drop the input: the server sees EOF.
    while let Ok(more) = outgoing.try_recv() {
        if writer.write_all(more.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = writer.flush().await;
    let _ = writer.shutdown().await;
}

#[cfg(test)]
mod tests {
    //! The session over in-memory streams: the seam between the JSON-RPC core and a transport,
    //! tested without a process, with paused time.

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    fn observed() -> Observed {
        Observed { wire: Wire::pipe(), operations: opentelemetry::global::meter("test").f64_histogram("test").build() }
    }

    /// A session whose server is the returned pair: the lines toolhost wrote, and a writer for
    /// what the server says.
    fn session() -> (SessionHandle, SessionTasks, tokio::io::Lines<BufReader<tokio::io::DuplexStream>>, tokio::io::DuplexStream) {
        let (server_out, toolhost_reads) = tokio::io::duplex(64 * 1024);
        let (toolhost_writes, server_in) = tokio::io::duplex(64 * 1024);
        let (handle, tasks) = start("test".into(), observed(), toolhost_reads, toolhost_writes, 1 << 20);
        (handle, tasks, BufReader::new(server_in).lines(), server_out)
    }

    #[tokio::test]
    async fn answers_find_their_requests_whatever_their_order_and_garbage_is_counted() {
        let (handle, _tasks, mut sent, mut server) = session();
        let first = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request("tools/call", None, Duration::from_secs(5), true).await }
        });
        let second = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request("tools/list", None, Duration::from_secs(5), true).await }
        });
        let mut ids = Vec::new();
        for _ in 0..2 {
            let line = sent.next_line().await.unwrap().unwrap();
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            ids.push((message["id"].as_u64().unwrap(), message["method"].as_str().unwrap().to_owned()));
        }
        // Garbage, then the answers in the reverse order.
        server.write_all(b"not json at all\n").await.unwrap();
        for (id, method) in ids.iter().rev() {
            server
                .write_all(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"for\":\"{method}\"}}}}\n").as_bytes())
                .await
                .unwrap();
        }
        assert_eq!(first.await.unwrap().unwrap().get(), r#"{"for":"tools/call"}"#);
        assert_eq!(second.await.unwrap().unwrap().get(), r#"{"for":"tools/list"}"#);
        assert_eq!(handle.stats().num_bad_lines.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_times_out_and_is_cancelled_and_its_late_answer_is_counted() {
        let (handle, _tasks, mut sent, mut server) = session();
        let waiting = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request("tools/call", None, Duration::from_secs(30), true).await }
        });
        let request: serde_json::Value = serde_json::from_str(&sent.next_line().await.unwrap().unwrap()).unwrap();
        // The clock jumps: nothing real waits 30 s.
        let answer = waiting.await.unwrap();
        assert!(matches!(answer, Err(UpstreamError::Timeout { .. })), "{answer:?}");
        let cancelled: serde_json::Value = serde_json::from_str(&sent.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(cancelled["method"], "notifications/cancelled");
        assert_eq!(cancelled["params"]["requestId"], request["id"]);
        // The server answers anyway: counted, not delivered to anyone.
        server.write_all(format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{}}}}\n", request["id"]).as_bytes()).await.unwrap();
        // Lines are read in order: once a later request is answered, the late answer was seen.
        let ping = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request("ping", None, Duration::from_secs(5), true).await }
        });
        let ping_request: serde_json::Value = serde_json::from_str(&sent.next_line().await.unwrap().unwrap()).unwrap();
        server.write_all(format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{}}}}\n", ping_request["id"]).as_bytes()).await.unwrap();
        ping.await.unwrap().unwrap();
        assert_eq!(handle.stats().num_late_responses.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_servers_requests_are_refused_and_list_changed_is_counted() {
        let (handle, _tasks, mut sent, mut server) = session();
        let mut changes = handle.list_changed();
        server.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"sampling/createMessage\",\"params\":{}}\n").await.unwrap();
        server.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n").await.unwrap();
        let refusal: serde_json::Value = serde_json::from_str(&sent.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!((refusal["id"].as_str(), refusal["error"]["code"].as_i64()), (Some("s1"), Some(-32601)));
        changes.changed().await.unwrap();
        assert_eq!(handle.stats().num_list_changed.load(Ordering::Relaxed), 1);
        assert_eq!(handle.stats().num_refused_requests.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn when_the_server_goes_every_waiting_request_fails_as_closed() {
        let (handle, _tasks, mut sent, server) = session();
        let waiting = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request("tools/call", None, Duration::from_secs(5), true).await }
        });
        sent.next_line().await.unwrap().unwrap();
        drop(server);
        assert!(matches!(waiting.await.unwrap(), Err(UpstreamError::Closed)));
        handle.closed().await;
        assert!(matches!(handle.request("ping", None, Duration::from_secs(1), true).await, Err(UpstreamError::Closed)));
    }
}
