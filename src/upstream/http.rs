//! Streamable HTTP upstreams (legacy shape, 2025-03-26 to 2025-11-25): every outgoing message
//! is a POST whose answer is JSON or an SSE stream; a GET SSE stream carries the server's own
//! notifications; `Mcp-Session-Id` is kept and sent, and `MCP-Protocol-Version` follows the
//! handshake. A 404 on a request that carried a session id, or a 401/403, ends the session: the
//! supervisor then starts a fresh one (a new `initialize` and a full enumeration), and the
//! requests in flight fail as "outcome unknown", never replayed.
//!
//! The JSON-RPC core (correlation, timeouts, cancellation, ping) is the same as for stdio
//! ([`session::Core`]); this module only moves messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, WWW_AUTHENTICATE};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::HttpSpec;
use crate::config::auth::AuthSpec;
use crate::mcp::headers::{self, ParamHeaders};
use crate::mcp::sse;
use crate::upstream::UpstreamError;
use crate::upstream::oauth::Challenge;
use crate::upstream::oauth::authorizer::{AuthError, Authorizer};
use crate::upstream::session::{self, Core, ExchangeFailure, SessionHandle};
use crate::upstream::web::{HttpClient, client, error_chain, read_body};

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";
/// Resumptions of one interrupted response stream before the request is given up.
const MAX_RESUMES: u32 = 5;
/// Bounds on re-opening the GET stream, and on any `retry:` interval a server asks for.
const GET_RETRY_MIN: Duration = Duration::from_millis(500);
const GET_RETRY_MAX: Duration = Duration::from_secs(30);
/// HTTP exchanges (one per outgoing message) in flight at once per session; further messages
/// wait in the session's bounded queue, whose overflow callers see as "overloaded".
const MAX_EXCHANGES: usize = 64;
/// New authorizations one request may ask for (a `401`, then `403 insufficient_scope` step-ups)
/// before toolhost stops trying: a server that always refuses is no reason to loop.
const MAX_CHALLENGES: u32 = 3;

/// Why an HTTP session ended on the server's word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// 401 or 403: credentials are missing or refused.
    Auth(u16),
    /// OAuth: no token can be had without an operator (`toolhost login`, new credentials).
    AuthRequired(String),
    /// 404 on a request that carried a session id: the server forgot the session.
    SessionExpired,
    /// `initialize` by POST was answered 400, 404 or 405: not a Streamable HTTP endpoint, most
    /// likely the old HTTP+SSE transport (2024-11-05), which toolhost does not speak.
    NotStreamableHttp(u16),
}

/// The protocol's shape on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// The 2025 shape: `Mcp-Session-Id` once `initialize` gave one, `MCP-Protocol-Version` once
    /// the handshake agreed one; a GET stream for notifications, resumable responses.
    Legacy { session: Option<String>, version: Option<String> },
    /// 2026-07-28: no session, no GET stream, no resumption; every POST carries the version and
    /// its method (and tool) in headers.
    Modern { version: String },
}

impl Default for Mode {
    fn default() -> Mode {
        Mode::Legacy { session: None, version: None }
    }
}

impl Mode {
    fn version(&self) -> Option<&str> {
        match self {
            Mode::Legacy { version, .. } => version.as_deref(),
            Mode::Modern { version } => Some(version),
        }
    }

    fn session(&self) -> Option<&str> {
        match self {
            Mode::Legacy { session, .. } => session.as_deref(),
            Mode::Modern { .. } => None,
        }
    }
}

/// The running HTTP side of a session.
pub(crate) struct HttpLink {
    state: Arc<State>,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

struct State {
    server: Arc<str>,
    client: HttpClient,
    uri: Uri,
    /// Configured headers (credentials among them): sent, never logged.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// OAuth: the server's token, shared by its sessions.
    authorizer: Option<Arc<Authorizer>>,
    /// Which shape of the protocol the link speaks now: one value, changed in one step.
    mode: Mutex<Mode>,
    failure: Mutex<Option<Failure>>,
    max_message_bytes: usize,
    request_timeout: Duration,
    core: Core,
    /// 2026-07-28: each tool's `x-mcp-header` arguments, learnt from the server's own
    /// `tools/list` answers as they pass (a listing from its first page starts afresh).
    param_headers: Mutex<HashMap<String, Arc<ParamHeaders>>>,
}

/// Prepares the HTTP client and starts the task that posts every outgoing message.
///
/// # Errors
/// [`UpstreamError::Protocol`] for a URL or a header that cannot be used.
pub(crate) fn start(
    server: &Arc<str>,
    observed: session::Observed,
    spec: &HttpSpec,
    max_message_bytes: usize,
    request_timeout: Duration,
    authorizer: Option<Arc<Authorizer>>,
) -> Result<(SessionHandle, HttpLink), UpstreamError> {
    let uri: Uri = spec.url.parse().map_err(|err| UpstreamError::Protocol(format!("bad url: {err}")))?;
    let mut headers = Vec::with_capacity(spec.headers.len());
    for (name, value) in &spec.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| UpstreamError::Protocol(format!("bad header name {name:?}")))?;
        let mut value =
            HeaderValue::from_str(value.expose()).map_err(|_| UpstreamError::Protocol(format!("bad value for header {name}")))?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    if let Some(AuthSpec::Bearer(token)) = &spec.auth {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| UpstreamError::Protocol("the bearer token is not valid in a header".into()))?;
        value.set_sensitive(true);
        headers.push((AUTHORIZATION, value));
    }
    let client = client(spec, request_timeout)?;
    let (handle, core, outgoing) = session::start_core(server.clone(), observed);
    let state = Arc::new(State {
        server: server.clone(),
        client,
        uri,
        headers,
        authorizer,
        mode: Mutex::new(Mode::default()),
        failure: Mutex::new(None),
        max_message_bytes,
        request_timeout,
        core,
        param_headers: Mutex::default(),
    });
    let link = HttpLink { state, tasks: TaskTracker::new(), cancel: CancellationToken::new() };
    link.tasks.spawn(dispatch(link.state.clone(), outgoing, link.tasks.clone(), link.cancel.clone()));
    let janitor_state = link.state.clone();
    let janitor_cancel = link.cancel.clone();
    link.tasks.spawn(async move {
        tokio::select! {
            () = janitor_cancel.cancelled() => {}
            () = janitor_state.core.expire_abandoned() => {}
        }
    });
    Ok((handle, link))
}

// === impl HttpLink ===

impl HttpLink {
    /// After the handshake: every later request carries this version, and the GET stream for
    /// server notifications opens.
    pub(crate) fn initialized(&self, protocol_version: &str) {
        if let Mode::Legacy { version, .. } = &mut *lock(&self.state.mode) {
            *version = Some(protocol_version.to_owned());
        }
        self.tasks.spawn(listen(self.state.clone(), self.cancel.clone()));
    }

    /// Speak the 2026-07-28 shape (before `server/discover`): every POST carries
    /// `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`.
    pub(crate) fn modern(&self, protocol_version: &str) {
        *lock(&self.state.mode) = Mode::Modern { version: protocol_version.to_owned() };
    }

    /// Back to the legacy shape, after a probe that found a legacy server.
    pub(crate) fn legacy(&self) {
        *lock(&self.state.mode) = Mode::default();
    }

    /// Why the server ended the session, if it did.
    pub(crate) fn failure(&self) -> Option<Failure> {
        lock(&self.state.failure).clone()
    }

    /// Ends the session: DELETE (405 tolerated), then stop every task, at most `grace`.
    pub(crate) async fn shutdown(self, grace: Duration) {
        let session_id = self.state.session_id();
        if let Some(session_id) = session_id
            && !self.state.core.is_closed()
        {
            let bearer = self.state.authorizer.as_ref().and_then(|a| a.peek());
            let request = self.state.request(
                Method::DELETE,
                Bytes::new(),
                &Envelope { session_id: Some(&session_id), bearer: bearer.as_ref(), ..Envelope::default() },
            );
            if let Ok(request) = request {
                let _ = tokio::time::timeout(grace, self.state.client.request(request)).await;
            }
        }
        self.state.core.close();
        self.cancel.cancel();
        self.tasks.close();
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
    }
}

impl State {
    /// Routes a message from the server; a `tools/list` answer first teaches which arguments
    /// each tool's calls mirror into headers.
    fn deliver(&self, message: &[u8], learns: bool) {
        if learns {
            self.learn_param_headers(message);
        }
        self.core.route(message);
    }

    fn learn_param_headers(&self, message: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Answer {
            result: Option<Page>,
        }
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            tools: Vec<serde_json::Value>,
        }
        // Most listings carry no annotation at all: not worth a parse.
        if !message.windows(12).any(|w| w == b"x-mcp-header") {
            return;
        }
        let Ok(Answer { result: Some(page) }) = serde_json::from_slice::<Answer>(message) else { return };
        let mut learnt = lock(&self.param_headers);
        for tool in page.tools {
            let Some(name) = tool.get("name").and_then(serde_json::Value::as_str) else { continue };
            // A tool with invalid annotations is left out of the catalog: it is never called.
            if let Ok(headers) = headers::param_headers(&tool)
                && !headers.is_empty()
            {
                learnt.insert(name.to_owned(), Arc::new(headers));
            }
        }
    }

    /// The `Mcp-Param-*` headers of a call to `tool` (whose message is `line`).
    fn mirrored_arguments(&self, tool: &str, line: &str) -> Vec<(String, String)> {
        #[derive(serde::Deserialize)]
        struct Call {
            params: CallParams,
        }
        #[derive(serde::Deserialize)]
        struct CallParams {
            #[serde(default)]
            arguments: serde_json::Map<String, serde_json::Value>,
        }
        let Some(headers) = lock(&self.param_headers).get(tool).cloned() else { return Vec::new() };
        match serde_json::from_str::<Call>(line) {
            Ok(call) => headers::header_values(&headers, &call.params.arguments),
            Err(_) => Vec::new(),
        }
    }

    fn is_modern(&self) -> bool {
        matches!(*lock(&self.mode), Mode::Modern { .. })
    }

    fn session_id(&self) -> Option<String> {
        lock(&self.mode).session().map(str::to_owned)
    }

    /// A request to the server's URL with the headers `envelope` asks for.
    fn request(&self, method: Method, body: Bytes, envelope: &Envelope<'_>) -> Result<Request<Full<Bytes>>, http::Error> {
        let Envelope { session_id, last_event_id, call, params, bearer } = *envelope;
        let mut builder = Request::builder().method(method.clone()).uri(self.uri.clone());
        if let Some((rpc_method, name)) = call {
            builder = builder.header("mcp-method", rpc_method);
            if let Some(name) = name {
                builder = builder.header("mcp-name", headers::encode(name));
            }
        }
        for (name, value) in params {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder = match method {
            Method::POST => builder.header(ACCEPT, "application/json, text/event-stream").header(CONTENT_TYPE, "application/json"),
            _ => builder.header(ACCEPT, "text/event-stream"),
        };
        if let Some(session_id) = session_id {
            builder = builder.header(SESSION_ID, session_id);
        }
        if let Some(version) = lock(&self.mode).version() {
            builder = builder.header(PROTOCOL_VERSION, version);
        }
        if let Some(last_event_id) = last_event_id {
            builder = builder.header(LAST_EVENT_ID, last_event_id);
        }
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if let Some(bearer) = bearer {
            builder = builder.header(AUTHORIZATION, bearer);
        }
        builder.body(Full::new(body))
    }

    /// The OAuth token for the next request (none without OAuth).
    async fn bearer(&self) -> Result<Option<HeaderValue>, AuthError> {
        match &self.authorizer {
            Some(authorizer) => authorizer.bearer().await,
            None => Ok(None),
        }
    }

    /// A `401` or `403` answered a request sent with `sent`. `Ok(true)`: OAuth got what the
    /// server asked for, send it again; `Ok(false)`: the session is over; `Err`: only this
    /// request fails (the authorization server is unavailable).
    async fn challenged(&self, status: StatusCode, headers: &http::HeaderMap, sent: Option<&HeaderValue>) -> Result<bool, NoToken> {
        let Some(authorizer) = &self.authorizer else {
            self.end(Failure::Auth(status.as_u16()));
            return Ok(false);
        };
        let challenge = headers.get_all(WWW_AUTHENTICATE).iter().filter_map(|v| v.to_str().ok()).find_map(Challenge::parse);
        match authorizer.challenged(status, challenge, sent).await {
            Ok(()) => Ok(true),
            Err(AuthError::Unavailable(message)) => Err(NoToken(message)),
            Err(AuthError::Required(message)) => {
                self.end(Failure::AuthRequired(message));
                Ok(false)
            }
            Err(AuthError::Refused(status)) => {
                self.end(Failure::Auth(status));
                Ok(false)
            }
        }
    }

    /// [`State::end`], as the outcome of an exchange that carried the server's word.
    fn ended<E>(&self, failure: Failure) -> Result<(), E> {
        self.end(failure);
        Ok(())
    }

    /// The session is over on the server's word.
    fn end(&self, failure: Failure) {
        tracing::warn!(server = %self.server, ?failure, "the HTTP session ended");
        *lock(&self.failure) = Some(failure);
        self.core.close();
    }
}

/// No token for now: the authorization server is unavailable (only this request fails).
#[derive(Debug, thiserror::Error)]
#[error("cannot get an access token: {0}")]
struct NoToken(String);

/// The headers of one request besides the configured ones.
#[derive(Clone, Copy, Default)]
struct Envelope<'a> {
    session_id: Option<&'a str>,
    last_event_id: Option<&'a str>,
    /// A modern POST names its JSON-RPC method and name in headers.
    call: Option<(&'a str, Option<&'a str>)>,
    /// `Mcp-Param-*` values.
    params: &'a [(String, String)],
    bearer: Option<&'a HeaderValue>,
}

/// Posts each outgoing message on its own task, so that a long response stream never holds up
/// the next request; at most [`MAX_EXCHANGES`] at once.
async fn dispatch(state: Arc<State>, mut outgoing: mpsc::Receiver<String>, tasks: TaskTracker, cancel: CancellationToken) {
    let exchanges = Arc::new(tokio::sync::Semaphore::new(MAX_EXCHANGES));
    loop {
        let permit = tokio::select! {
            () = cancel.cancelled() => return,
            () = state.core.closed() => return,
            permit = exchanges.clone().acquire_owned() => permit,
        };
        let Ok(permit) = permit else { return };
        let line = tokio::select! {
            () = cancel.cancelled() => return,
            () = state.core.closed() => return,
            line = outgoing.recv() => line,
        };
        let Some(line) = line else { return };
        let state = state.clone();
        let cancel = cancel.clone();
        tasks.spawn(async move {
            post(state, line, cancel).await;
            drop(permit);
        });
    }
}

#[derive(serde::Deserialize)]
struct Outgoing {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<OutgoingParams>,
}

#[derive(serde::Deserialize)]
struct OutgoingParams {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    uri: Option<String>,
}

/// One outgoing message's exchange. It ends when it is done, when the session stops, or when
/// nobody waits for its answer any more (the caller's deadline passed or it gave up); a
/// message that expects no answer gets the request timeout for the whole exchange.
async fn post(state: Arc<State>, line: String, cancel: CancellationToken) {
    let outgoing: Option<Outgoing> = serde_json::from_str(&line).ok();
    let request_id = outgoing.as_ref().filter(|o| o.method.is_some()).and_then(|o| o.id);
    let exchange = exchange(&state, &line, outgoing.as_ref(), request_id, &cancel);
    let outcome = match request_id {
        Some(id) => {
            let caller_gone = state.core.caller_gone(id);
            tokio::select! {
                () = caller_gone.cancelled() => Ok(()),
                outcome = exchange => outcome,
            }
        }
        None => tokio::time::timeout(state.request_timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(ExchangeFailure::Lost(format!("the HTTP exchange took longer than {:?}", state.request_timeout)))),
    };
    if let Err(failure) = outcome {
        // HTTP bodies and transport errors are the server's words: no secret goes further.
        let failure = match failure {
            ExchangeFailure::NotSent(message) => ExchangeFailure::NotSent(crate::secrets::redact_owned(message)),
            ExchangeFailure::Lost(message) => ExchangeFailure::Lost(crate::secrets::redact_owned(message)),
        };
        match request_id {
            Some(id) => state.core.fail_request(id, failure),
            None => tracing::debug!(server = %state.server, ?failure, "an HTTP exchange without a response failed"),
        }
    }
}

/// Sends one message and routes what comes back. `Err` is why its request failed.
async fn exchange(
    state: &State,
    line: &str,
    outgoing: Option<&Outgoing>,
    request_id: Option<u64>,
    cancel: &CancellationToken,
) -> Result<(), ExchangeFailure> {
    let is_initialize = outgoing.and_then(|o| o.method.as_deref()) == Some("initialize");
    let modern = state.is_modern();
    // `initialize` starts a new session: it never carries an old id; modern requests have none.
    let session_id = if is_initialize { None } else { state.session_id() };
    let call = outgoing.filter(|_| modern).and_then(|o| {
        let name = o.params.as_ref().and_then(|p| p.name.as_deref().or(p.uri.as_deref()));
        o.method.as_deref().map(|method| (method, name))
    });
    let mirrored = match call {
        Some(("tools/call", Some(tool))) => state.mirrored_arguments(tool, line),
        _ => Vec::new(),
    };
    let learns = match call {
        Some(("tools/list", _)) => {
            if outgoing.and_then(|o| o.params.as_ref()).is_none_or(|p| p.cursor.is_none()) {
                lock(&state.param_headers).clear();
            }
            true
        }
        _ => false,
    };
    let body = Bytes::from(line.trim_end().to_owned());
    let mut challenges = 0;
    let response = loop {
        let bearer = match state.bearer().await {
            Ok(bearer) => bearer,
            Err(AuthError::Unavailable(message)) => return Err(ExchangeFailure::NotSent(format!("cannot get an access token: {message}"))),
            Err(AuthError::Required(message)) => return state.ended(Failure::AuthRequired(message)),
            Err(AuthError::Refused(status)) => return state.ended(Failure::Auth(status)),
        };
        let request = state
            .request(
                Method::POST,
                body.clone(),
                &Envelope { session_id: session_id.as_deref(), call, params: &mirrored, bearer: bearer.as_ref(), ..Envelope::default() },
            )
            .map_err(|error| ExchangeFailure::NotSent(format!("cannot build the HTTP request: {error}")))?;
        let response = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            response = tokio::time::timeout(state.request_timeout, state.client.request(request)) => response,
        };
        let response = match response {
            Ok(Ok(response)) => response,
            // A connection that never opened carried nothing; any other failure may have.
            Ok(Err(error)) if error.is_connect() => {
                return Err(ExchangeFailure::NotSent(format!("HTTP request failed: {}", error_chain(&error))));
            }
            Ok(Err(error)) => return Err(ExchangeFailure::Lost(format!("HTTP request failed: {}", error_chain(&error)))),
            Err(_) => return Err(ExchangeFailure::Lost(format!("no HTTP response within {:?}", state.request_timeout))),
        };
        let status = response.status();
        if !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            break response;
        }
        // A refused request was not processed: sending it again with a new token is safe. A
        // server that keeps refusing gets MAX_CHALLENGES tries, then the session ends.
        if challenges >= MAX_CHALLENGES {
            return match state.authorizer.is_some() {
                true => state.ended(Failure::AuthRequired(format!(
                    "the server still refuses (HTTP {status}) after {MAX_CHALLENGES} new authorizations"
                ))),
                false => state.ended(Failure::Auth(status.as_u16())),
            };
        }
        challenges += 1;
        // A refused request was not processed: whatever stands in the way, it did not run.
        let challenged = state.challenged(status, response.headers(), bearer.as_ref()).await;
        if !challenged.map_err(|error| ExchangeFailure::NotSent(error.to_string()))? {
            return Ok(());
        }
    };
    receive(state, response, is_initialize, session_id, request_id, learns, cancel)
        .await
        .map_err(|broken| ExchangeFailure::Lost(broken.to_string()))
}

/// How an exchange broke after its request reached the server: the request may have run, so it
/// is reported as lost ([`ExchangeFailure::Lost`]), never retried.
#[derive(Debug, thiserror::Error)]
enum Broken {
    #[error("HTTP {status}: {snippet}")]
    Status { status: StatusCode, snippet: String },
    #[error("{0}")]
    Body(#[from] crate::upstream::web::BodyError),
    #[error("reading the event stream failed: {0}")]
    Stream(hyper::Error),
    #[error("reading the event stream failed: {0}")]
    EventTooLarge(#[from] sse::EventTooLarge),
    #[error("the response stream ended before the response")]
    StreamEnded,
    #[error("the response stream ended before the response and cannot be resumed (no event id)")]
    NotResumable,
    #[error("cannot resume the response stream: {0}")]
    NoToken(AuthError),
    #[error("resuming the response stream failed: {0}")]
    Resume(String),
    #[error("resuming the response stream got no answer within {0:?}")]
    ResumeTimeout(Duration),
}

/// What comes back for a request the server received: any failure from here on loses an
/// exchange whose request may have run.
async fn receive(
    state: &State,
    response: http::Response<hyper::body::Incoming>,
    is_initialize: bool,
    session_id: Option<String>,
    request_id: Option<u64>,
    learns: bool,
    cancel: &CancellationToken,
) -> Result<(), Broken> {
    let status = response.status();
    if is_initialize && let Some(id) = response.headers().get(SESSION_ID).and_then(|v| v.to_str().ok()) {
        if let Mode::Legacy { session, .. } = &mut *lock(&state.mode) {
            *session = Some(id.to_owned());
        }
        state.core.session_started(id);
    }
    match status {
        StatusCode::NOT_FOUND if session_id.is_some() => return state.ended(Failure::SessionExpired),
        StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED if is_initialize => {
            return state.ended(Failure::NotStreamableHttp(status.as_u16()));
        }
        _ => {}
    }
    if !status.is_success() {
        let body = read_body(response.into_body(), 64 * 1024).await.unwrap_or_default();
        // A JSON-RPC error in the body (a modern server's 400 or 404) is the real answer.
        if is_rpc_error(&body) {
            state.core.route(&body);
            return Ok(());
        }
        let snippet = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
        return Err(Broken::Status { status, snippet });
    }
    if status == StatusCode::ACCEPTED {
        return Ok(());
    }
    let is_stream = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        let body = read_body(response.into_body(), state.max_message_bytes).await?;
        if !body.iter().all(u8::is_ascii_whitespace) {
            state.deliver(&body, learns);
        }
        return Ok(());
    }
    // A response stream: route every event; if it ends before the response, resume it with
    // GET + Last-Event-ID after the server's retry interval (capped).
    let mut decoder = sse::Decoder::default();
    let mut body = response.into_body();
    let mut resumes = 0;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            ended = stream_events(state, &mut body, &mut decoder, request_id, learns) => ended?,
        }
        let answered = request_id.is_none_or(|id| !state.core.is_pending(id));
        // 2026-07-28 has no resumption: a broken stream loses the request, which is never replayed.
        if answered || resumes >= MAX_RESUMES || state.is_modern() {
            return if answered { Ok(()) } else { Err(Broken::StreamEnded) };
        }
        let Some(last_event_id) = decoder.last_event_id.clone() else {
            return Err(Broken::NotResumable);
        };
        resumes += 1;
        tokio::time::sleep(retry_interval(&decoder, Duration::from_secs(1))).await;
        let session_id = state.session_id();
        let bearer = state.bearer().await.map_err(Broken::NoToken)?;
        let envelope = Envelope {
            session_id: session_id.as_deref(),
            last_event_id: Some(&last_event_id),
            bearer: bearer.as_ref(),
            ..Envelope::default()
        };
        let Ok(request) = state.request(Method::GET, Bytes::new(), &envelope) else {
            return Ok(());
        };
        match tokio::time::timeout(state.request_timeout, state.client.request(request)).await {
            Ok(Ok(response)) if response.status().is_success() => body = response.into_body(),
            Ok(Ok(response)) if response.status() == StatusCode::NOT_FOUND && session_id.is_some() => {
                return state.ended(Failure::SessionExpired);
            }
            Ok(Ok(response)) => return Err(Broken::Resume(format!("HTTP {}", response.status()))),
            Ok(Err(error)) => return Err(Broken::Resume(error_chain(&error))),
            Err(_) => return Err(Broken::ResumeTimeout(state.request_timeout)),
        }
    }
}

/// The server's `retry:` interval, within [`GET_RETRY_MIN`]..=[`GET_RETRY_MAX`], or `default`.
fn retry_interval(decoder: &sse::Decoder, default: Duration) -> Duration {
    decoder.retry_ms.map_or(default, Duration::from_millis).clamp(GET_RETRY_MIN, GET_RETRY_MAX)
}

/// Routes every event of an SSE body until it ends, or, for a request's response stream, until
/// the response has arrived (a server that holds the stream open costs nothing after that).
async fn stream_events(
    state: &State,
    body: &mut hyper::body::Incoming,
    decoder: &mut sse::Decoder,
    request_id: Option<u64>,
    learns: bool,
) -> Result<(), Broken> {
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Broken::Stream)?;
        let Ok(data) = frame.into_data() else { continue };
        for event in decoder.feed(&data, state.max_message_bytes)? {
            if (event.event.is_empty() || event.event == "message") && !event.data.trim().is_empty() {
                state.deliver(event.data.as_bytes(), learns);
            }
        }
        if request_id.is_some_and(|id| !state.core.is_pending(id)) {
            return Ok(());
        }
    }
    Ok(())
}

/// The GET stream for server-initiated messages, re-opened when it drops. A 405 means the
/// server offers none.
async fn listen(state: Arc<State>, cancel: CancellationToken) {
    let mut decoder = sse::Decoder::default();
    let mut delay = GET_RETRY_MIN;
    loop {
        let session_id = state.session_id();
        let bearer = match state.bearer().await {
            Ok(bearer) => bearer,
            Err(AuthError::Required(message)) => return state.end(Failure::AuthRequired(message)),
            Err(error) => {
                tracing::debug!(server = %state.server, %error, "the GET stream waits for a token");
                None
            }
        };
        let Ok(request) = state.request(
            Method::GET,
            Bytes::new(),
            &Envelope {
                session_id: session_id.as_deref(),
                last_event_id: decoder.last_event_id.as_deref(),
                bearer: bearer.as_ref(),
                ..Envelope::default()
            },
        ) else {
            return;
        };
        let response = tokio::select! {
            () = cancel.cancelled() => return,
            () = state.core.closed() => return,
            response = state.client.request(request) => response,
        };
        match response {
            Ok(response) if response.status() == StatusCode::METHOD_NOT_ALLOWED => {
                tracing::debug!(server = %state.server, "the server offers no GET stream");
                return;
            }
            Ok(response) if response.status() == StatusCode::NOT_FOUND && session_id.is_some() => {
                return state.end(Failure::SessionExpired);
            }
            Ok(response) if matches!(response.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                match state.challenged(response.status(), response.headers(), bearer.as_ref()).await {
                    // Reopened after the usual wait: a server that refuses every token costs one
                    // authorization per interval, not a loop.
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(error) => tracing::debug!(server = %state.server, %error, "the GET stream waits for a token"),
                }
            }
            Ok(response) if response.status().is_success() => {
                delay = GET_RETRY_MIN;
                let mut body = response.into_body();
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = state.core.closed() => return,
                    ended = stream_events(&state, &mut body, &mut decoder, None, false) => {
                        if let Err(error) = ended {
                            tracing::debug!(server = %state.server, %error, "the GET stream broke");
                        }
                    }
                }
            }
            Ok(response) => tracing::debug!(server = %state.server, status = %response.status(), "the GET stream was refused"),
            Err(error) => tracing::debug!(server = %state.server, %error, "the GET stream could not open"),
        }
        let wait = retry_interval(&decoder, delay);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = state.core.closed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        delay = (delay * 2).min(GET_RETRY_MAX);
    }
}

fn is_rpc_error(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|value| value.get("error").is_some() && value["id"].is_u64())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_sent_as_is_or_base64_encoded() {
        assert_eq!(headers::encode("get_weather"), "get_weather");
        assert_eq!(headers::encode("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(headers::encode(" padded"), "=?base64?IHBhZGRlZA==?=");
    }
}
