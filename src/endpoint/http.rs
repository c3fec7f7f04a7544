//! The MCP endpoint over Streamable HTTP, at `/mcp` (and `/mcp/PROFILE`), both eras per request:
//! a POST whose `_meta` (or `MCP-Protocol-Version` header) names 2026-07-28 is stateless, with
//! the `Mcp-Method`/`Mcp-Name` headers checked against the body; anything else is the 2025
//! session shape (`initialize` mints an `Mcp-Session-Id`, GET opens the notification stream,
//! DELETE ends the session, an unknown session is 404).
//!
//! Callers are identified by a bearer token, or on loopback by the kernel's socket table (the
//! uid that owns the client's socket). Browser origins other than loopback ones and those
//! configured are refused (DNS rebinding).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::message::{self, Message, Params};
use super::sessions::{Session, Sessions};
use super::{Admission, ChangeWatch, Endpoint, Era, Origin, View, reply};
use crate::door::model::{Identity, PROGRESS_QUEUE, Refusal, UnixPeer};
use crate::door::observe::{Throttle, Wire};
use crate::listen::http::{Body, serve_connection, sse};
use crate::mcp::lifecycle::{LEGACY_VERSIONS, METHOD_CANCELLED, METHOD_INITIALIZE, METHOD_TOOLS_CALL, METHOD_TOOLS_LIST_CHANGED};
use crate::mcp::modern::{self, HEADER_MISMATCH, METHOD_LISTEN};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// How long a connection may take to send its request head, and then its body.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts connections until `cancel`; each is served on a task in `tracker`.
pub async fn serve_http(listener: TcpListener, endpoint: Arc<Endpoint>, tracker: TaskTracker, cancel: CancellationToken) {
    let sessions = Arc::new(Sessions::default());
    tracker.spawn(sessions.clone().expire(cancel.clone()));
    let slots = Arc::new(tokio::sync::Semaphore::new(super::MAX_CONNECTIONS));
    let shares = crate::listen::shares::Shares::new(super::CONNECTIONS_PER_PEER);
    let warnings = Arc::new(Throttle::new(1));
    loop {
        let (stream, remote) = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    crate::listen::accept_failed(&error, super::DOOR).await;
                    continue;
                }
            },
        };
        let Some(slot) = super::connection_slot(&slots, &warnings) else { continue };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        let (endpoint, sessions, cancel) = (endpoint.clone(), sessions.clone(), cancel.clone());
        let (shares, warnings) = (shares.clone(), warnings.clone());
        tracker.spawn(async move {
            // The socket table is read on the blocking pool, never on the accept loop: a host
            // with a huge table slows this connection's start, not everyone's.
            let lookup = tokio::task::spawn_blocking(move || local.and_then(|local| UnixPeer::of_loopback(local, remote)));
            let peer = lookup.await.ok().flatten();
            let Some(_share) = crate::listen::connection_share(&shares, &UnixPeer::share_key(peer.as_ref()), &warnings, super::DOOR) else {
                return;
            };
            let origin = Arc::new(Origin {
                wire: Wire::http(Some(Arc::from(remote.ip().to_string())), Some(remote.port())),
                session: None,
                version: None,
            });
            let front =
                Arc::new(Front { endpoint, sessions, peer, origin, admission: std::sync::Mutex::new(None), cancel: cancel.clone() });
            let service = hyper::service::service_fn(move |request| {
                let front = front.clone();
                async move { Ok::<_, Infallible>(front.handle(request).await) }
            });
            serve_connection(stream, service, HEADER_TIMEOUT, &cancel).await;
            drop(slot);
        });
    }
}

/// What every request on one connection shares.
struct Front {
    endpoint: Arc<Endpoint>,
    sessions: Arc<Sessions>,
    /// The connection's owner, when it is on loopback and the kernel said.
    peer: Option<UnixPeer>,
    /// The connection's address, for its requests' spans.
    origin: Arc<Origin>,
    /// The last token presented on this connection, with its admission.
    admission: std::sync::Mutex<Option<(Option<Vec<u8>>, Admission)>>,
    cancel: CancellationToken,
}

impl Front {
    async fn handle(&self, request: http::Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        let profile = match path.trim_end_matches('/') {
            "/mcp" => None,
            other => match other.strip_prefix("/mcp/").and_then(|name| self.endpoint.profile(name)) {
                Some(profile) => Some(profile),
                None => return plain(StatusCode::NOT_FOUND, "no MCP endpoint here: use /mcp or /mcp/PROFILE"),
            },
        };
        if let Some(host) = request.headers().get(header::HOST) {
            let allowed = host.to_str().is_ok_and(|host| self.endpoint.settings().origins().host_allowed(host));
            if !allowed {
                return rpc_error(StatusCode::FORBIDDEN, -32600, "this Host may not use the endpoint (DNS rebinding protection)");
            }
        }
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|origin| self.endpoint.settings().origins().origin_allowed(origin));
            if !allowed {
                return rpc_error(StatusCode::FORBIDDEN, -32600, "this Origin may not use the endpoint (DNS rebinding protection)");
            }
        }
        let token = Identity::bearer(request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
        let admitted = {
            // A keep-alive connection's requests usually carry the same token: admitted once
            // per token and policy, not per request.
            let mut cached = self.admission.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match cached.as_mut() {
                Some((cached_token, admission)) if *cached_token == token => self.endpoint.admit(admission),
                _ => {
                    let mut admission = Admission::new(Identity::loopback(self.peer.clone(), token.clone()));
                    let admitted = self.endpoint.admit(&mut admission);
                    *cached = Some((token, admission));
                    admitted
                }
            }
        };
        let caller = match admitted {
            Ok(caller) => caller,
            Err(refusal) => {
                let status = match refusal {
                    Refusal::Unauthenticated => StatusCode::UNAUTHORIZED,
                    _ => StatusCode::FORBIDDEN,
                };
                let mut response = rpc_error(status, reply::SERVER_ERROR, &refusal.to_string());
                if status == StatusCode::UNAUTHORIZED {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                }
                return response;
            }
        };
        let trace = header_text(request.headers(), "traceparent")
            .filter(|parent| parent.len() <= 128)
            .map(|parent| (parent.to_owned(), header_text(request.headers(), "tracestate").filter(|s| s.len() <= 512).map(str::to_owned)));
        let view = View { caller, profile, trace, client: None, origin: self.origin.clone() };
        match *request.method() {
            Method::POST => self.post(request, view).await,
            Method::GET => self.get(request.headers(), &view),
            Method::DELETE => self.delete(request.headers(), &view),
            _ => plain(StatusCode::METHOD_NOT_ALLOWED, "use POST (and GET or DELETE with a 2025 session)"),
        }
    }

    async fn post(&self, request: http::Request<Incoming>, view: View) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let headers = parts.headers;
        let json = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
        if !json {
            return rpc_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, -32700, "the body must be application/json");
        }
        let body = Limited::new(body, super::socket::MAX_MESSAGE_BYTES).collect();
        let body = match tokio::time::timeout(BODY_TIMEOUT, body).await {
            Ok(Ok(body)) => body.to_bytes(),
            Ok(Err(_)) => return rpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, "the message is too large, or the body was cut off"),
            Err(_) => return rpc_error(StatusCode::REQUEST_TIMEOUT, -32600, "the request body did not arrive in time"),
        };
        let message = match message::read(&body) {
            Ok(message) => message,
            Err(unreadable) => return rpc_error(StatusCode::BAD_REQUEST, unreadable.code, &unreadable.message),
        };
        let header_version = header_text(&headers, VERSION_HEADER);
        let (method, params) = match &message {
            Message::Request(request) => (Some(&*request.method), request.params),
            Message::Notification { method, params } => (Some(&**method), *params),
            Message::Response { .. } => (None, None),
        };
        let parsed = Params::read(params).unwrap_or_default();
        let modern = parsed.era() == Era::Modern || header_version == Some(modern::VERSION) || method == Some(modern::METHOD_DISCOVER);
        if modern {
            return self.post_modern(&headers, &body, &message, &parsed, view).await;
        }
        if let Some(version) = header_version
            && !LEGACY_VERSIONS.contains(&version)
        {
            return rpc_error(StatusCode::BAD_REQUEST, -32600, &format!("unsupported MCP-Protocol-Version {:?}", reply::clip(version)));
        }
        self.post_legacy(&headers, &body, &message, view).await
    }

    async fn post_modern(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        message: &Message<'_>,
        params: &Params<'_>,
        view: View,
    ) -> Response<Body> {
        let Message::Request(request) = message else {
            // Notifications need no answer (cancellation is closing the stream in this era).
            return empty(StatusCode::ACCEPTED);
        };
        if let Err(message::Refused(line)) = params.check_modern(request.id) {
            return json(StatusCode::BAD_REQUEST, line);
        }
        let meta_version = params.meta.as_ref().and_then(|meta| meta.protocol_version.as_deref());
        let mismatch = if header_text(headers, VERSION_HEADER) != meta_version {
            Some("MCP-Protocol-Version must equal _meta's io.modelcontextprotocol/protocolVersion")
        } else if header_text(headers, "mcp-method") != Some(&*request.method) {
            Some("Mcp-Method must equal the body's method")
        } else if request.method == METHOD_TOOLS_CALL && header_text(headers, "mcp-name") != params.name.as_deref() {
            Some("Mcp-Name must equal params.name")
        } else if super::tasks::names_a_task(&request.method) && header_text(headers, "mcp-name") != params.task_id.as_deref() {
            Some("Mcp-Name must equal params.taskId")
        } else {
            None
        };
        if let Some(problem) = mismatch {
            return json(StatusCode::BAD_REQUEST, reply::error(request.id, HEADER_MISMATCH, problem, None));
        }
        match &*request.method {
            METHOD_LISTEN => self.listen(request, view),
            METHOD_TOOLS_CALL if wants_stream(headers) && params.progress_token.is_some() => self.call_streamed(body.clone(), view, None),
            method => {
                let line = self.endpoint.answer(&view, request, None).await;
                let status = if super::serves(method) { StatusCode::OK } else { StatusCode::NOT_FOUND };
                json(status, line)
            }
        }
    }

    async fn post_legacy(&self, headers: &HeaderMap, body: &Bytes, message: &Message<'_>, view: View) -> Response<Body> {
        let session_id = header_text(headers, SESSION_HEADER);
        if let Message::Request(request) = message
            && request.method == METHOD_INITIALIZE
        {
            let line = self.endpoint.answer(&view, request, None).await;
            let requested = Params::read(request.params).ok().and_then(|params| params.protocol_version);
            let version = super::agreed_version(requested.as_deref());
            let session = self.sessions.open(&view, version, &self.endpoint.door);
            let Some(session) = session else {
                return rpc_error(StatusCode::SERVICE_UNAVAILABLE, reply::SERVER_ERROR, "too many MCP sessions are open; try again later");
            };
            session.client.declare(request.params);
            let mut response = json(StatusCode::OK, line);
            if let Ok(value) = HeaderValue::from_str(session.id()) {
                response.headers_mut().insert(SESSION_HEADER, value);
            }
            return response;
        }
        let Some(session_id) = session_id else {
            return rpc_error(StatusCode::BAD_REQUEST, -32600, "missing Mcp-Session-Id: send initialize first");
        };
        let Some(session) = self.sessions.get(session_id, &view) else {
            return rpc_error(StatusCode::NOT_FOUND, -32001, "unknown or expired session: initialize a new one");
        };
        let view = View {
            caller: view.caller,
            profile: session.profile(),
            trace: view.trace,
            client: Some(session.client.clone()),
            origin: session.origin(),
        };
        let request = match message {
            Message::Response { id, result, error } => {
                session.client.on_response(*id, *result, *error);
                return empty(StatusCode::ACCEPTED);
            }
            Message::Notification { method, params } => {
                if method == METHOD_CANCELLED {
                    session.cancel(*params);
                }
                return empty(StatusCode::ACCEPTED);
            }
            Message::Request(request) => request,
        };
        if request.method == METHOD_TOOLS_CALL {
            let Some(cancelled) = session.start(request.id) else {
                return json(
                    StatusCode::OK,
                    reply::error(request.id, reply::SERVER_ERROR, "too many calls in flight on this session", None),
                );
            };
            // On an SSE response, progress can reach the client, and so can toolhost's questions
            // for a server that needs input, when the client declared it can answer them.
            let streams = session.client.can_be_asked() || Params::read(request.params).is_ok_and(|p| p.progress_token.is_some());
            if wants_stream(headers) && streams {
                return self.call_streamed(body.clone(), view, Some((session, cancelled)));
            }
            let line = tokio::select! {
                line = self.endpoint.answer(&view, request, None) => Some(line),
                () = cancelled.cancelled() => None,
            };
            session.finish(request.id.get());
            return match line {
                Some(line) => json(StatusCode::OK, line),
                // Cancelled: the client wants no answer; the HTTP request still needs a response.
                None => empty(StatusCode::ACCEPTED),
            };
        }
        json(StatusCode::OK, self.endpoint.answer(&view, request, None).await)
    }

    /// A call whose progress travels on an SSE response, then its result. A 2025 session's
    /// call also ends on `notifications/cancelled`.
    /// `body` is the request's (a shared buffer): the task that outlives this borrow reads it again.
    fn call_streamed(&self, body: Bytes, view: View, session: Option<(Arc<Session>, CancellationToken)>) -> Response<Body> {
        let (tx, rx) = mpsc::channel::<String>(PROGRESS_QUEUE);
        let endpoint = self.endpoint.clone();
        let stop = self.cancel.clone();
        let task = async move {
            let Ok(Message::Request(request)) = message::read(&body) else { return };
            let cancelled = session.as_ref().map_or_else(CancellationToken::new, |(_, token)| token.clone());
            let answer = tokio::select! {
                answer = endpoint.answer(&view, &request, Some(&tx)) => Some(answer),
                () = cancelled.cancelled() => None,
                () = stop.cancelled() => None,
            };
            if let Some((session, _)) = &session {
                session.finish(request.id.get());
            }
            if let Some(answer) = answer {
                let _ = tx.send(answer).await;
            }
        };
        sse(rx, "message", Some(Box::pin(task)))
    }

    /// A 2026 `subscriptions/listen` stream: the acknowledgement, then a tagged list_changed
    /// whenever the caller's view changes, with keep-alive comments; it ends when the client
    /// closes it or toolhost stops.
    fn listen(&self, request: &message::Request<'_>, view: View) -> Response<Body> {
        let (tx, rx) = mpsc::channel::<String>(8);
        let wanted = message::listens_for_tools(request.params);
        let (acknowledged, changed_line) = (reply::listen_acknowledged(request.id, wanted), reply::listen_tools_changed(request.id));
        let endpoint = self.endpoint.clone();
        let stop = self.cancel.clone();
        let task = async move {
            if tx.send(acknowledged).await.is_err() {
                return;
            }
            let changes = ChangeWatch::new(&endpoint, &view);
            tokio::select! {
                () = stop.cancelled() => {}
                // Nothing asked for: the stream stays open, silent, until the client closes it.
                () = tx.closed(), if !wanted => {}
                () = changes.forward(&endpoint, &view, &changed_line, &tx), if wanted => {}
            }
        };
        sse(rx, "message", Some(Box::pin(task)))
    }

    /// A 2025 session's notification stream.
    fn get(&self, headers: &HeaderMap, view: &View) -> Response<Body> {
        if !wants_stream(headers) {
            return plain(StatusCode::NOT_ACCEPTABLE, "GET opens an event stream: send Accept: text/event-stream");
        }
        let Some(session_id) = header_text(headers, SESSION_HEADER) else {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "GET needs an Mcp-Session-Id (2025 sessions only)");
        };
        let Some(session) = self.sessions.get(session_id, view) else {
            return rpc_error(StatusCode::NOT_FOUND, -32001, "unknown or expired session: initialize a new one");
        };
        let view = View { caller: view.caller.clone(), profile: session.profile(), trace: None, client: None, origin: session.origin() };
        let (tx, rx) = mpsc::channel::<String>(8);
        let endpoint = self.endpoint.clone();
        let stop = self.cancel.clone();
        let (ended, replaced) = (session.ended(), session.take_stream());
        let task = async move {
            let changes = ChangeWatch::new(&endpoint, &view);
            let line = reply::notification(METHOD_TOOLS_LIST_CHANGED, None);
            tokio::select! {
                () = stop.cancelled() => {}
                () = ended.cancelled() => {}
                () = replaced.cancelled() => {}
                () = changes.forward(&endpoint, &view, &line, &tx) => {}
            }
        };
        sse(rx, "message", Some(Box::pin(task)))
    }

    fn delete(&self, headers: &HeaderMap, view: &View) -> Response<Body> {
        let Some(session_id) = header_text(headers, SESSION_HEADER) else {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "DELETE ends a 2025 session: send its Mcp-Session-Id");
        };
        match self.sessions.close(session_id, view) {
            true => empty(StatusCode::NO_CONTENT),
            false => rpc_error(StatusCode::NOT_FOUND, -32001, "unknown or expired session"),
        }
    }
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|value| value.to_str().is_ok_and(|v| v.contains("text/event-stream")))
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn json(status: StatusCode, line: String) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::from(line))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    json(status, reply::unreadable(code, message))
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::from_static(text.as_bytes()))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::new())));
    *response.status_mut() = status;
    response
}
