//! The MCP endpoint on a Unix socket: newline-delimited JSON-RPC, as MCP's stdio transport
//! frames it (the spec recommends that framing for local byte streams). One connection is one
//! session; the kernel names the caller (`SO_PEERCRED`), as on the gRPC socket.
//!
//! Each connection is one task that reads; calls run on tasks it owns (a `JoinSet`, so closing
//! the connection or `notifications/cancelled` aborts them, which cancels them upstream), and
//! one writer task owns the socket's write half. A client that only shuts down its sending side
//! (stdin closed on a piped `toolhost mcp`) still gets the answers to what it asked: its
//! subscriptions end, its calls run to their end, then the connection closes.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use super::asking::ClientLink;
use super::message::{self, Message, Request};
use super::{Admission, ChangeWatch, Endpoint, Origin, View, reply};
use crate::door::model::{Identity, UnixPeer};
use crate::door::observe::{SessionLife, Throttle, Wire, session_life};
use crate::mcp::lifecycle::{METHOD_CANCELLED, METHOD_INITIALIZE, METHOD_TOOLS_CALL, METHOD_TOOLS_LIST_CHANGED};
use crate::mcp::lines::{Line, Lines};
use crate::mcp::modern::METHOD_LISTEN;

/// A toolhost notification a client sends first to be served one profile (`toolhost mcp
/// --profile NAME` does): `{"method": "notifications/toolhost/profile", "params": {"name": NAME}}`.
pub const PROFILE_NOTIFICATION: &str = "notifications/toolhost/profile";
/// Longest message a client may send.
pub(super) const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// Requests one connection may have in flight; past that, requests are refused until some end.
const MAX_IN_FLIGHT: usize = 256;
/// Lines waiting for a slow client before its calls' answers wait too.
const OUTGOING_QUEUE: usize = 1024;
/// How long a closing connection may take to write what was already answered.
const FLUSH_ON_CLOSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Accepts connections until `cancel`; each becomes a task in `tracker`.
pub async fn serve_unix(listener: UnixListener, endpoint: Arc<Endpoint>, tracker: TaskTracker, cancel: CancellationToken) {
    let slots = Arc::new(tokio::sync::Semaphore::new(super::MAX_CONNECTIONS));
    let shares = crate::listen::shares::Shares::new(super::CONNECTIONS_PER_PEER);
    let warnings = Throttle::new(1);
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    crate::listen::accept_failed(&error, super::DOOR).await;
                    continue;
                }
            },
        };
        let Some(slot) = super::connection_slot(&slots, &warnings) else { continue };
        let Some(peer) = UnixPeer::of(&stream) else {
            tracing::warn!("an MCP connection without peer credentials was closed");
            continue;
        };
        let Some(share) = crate::listen::connection_share(&shares, &UnixPeer::share_key(Some(&peer)), &warnings, super::DOOR) else {
            continue;
        };
        let connection = Connection::new(endpoint.clone(), Identity::unix(peer));
        let cancel = cancel.clone();
        tracker.spawn(async move {
            connection.run(stream, cancel).await;
            drop((slot, share));
        });
    }
}

/// One client's session.
struct Connection {
    endpoint: Arc<Endpoint>,
    admission: Admission,
    profile: Option<Arc<super::Profile>>,
    /// Requests running on tasks (calls, subscriptions), by their id's JSON text.
    in_flight: HashMap<Box<str>, AbortHandle>,
    /// Whether `initialize` started the legacy list_changed forwarder.
    announcing: bool,
    /// A request has been served: the profile can no longer change.
    serving: bool,
    /// Questions to the client and its answers (2025 clients, for servers that need input).
    client: Arc<ClientLink>,
    /// Where requests come from, for their spans: a Unix socket, and the version `initialize`
    /// agreed to.
    origin: Arc<Origin>,
    /// The 2025 session `initialize` began, recorded in `mcp.server.session.duration` when the
    /// connection ends.
    session: Option<SessionLife>,
}

/// What a connection runs on tasks: calls, which end by themselves, and streams (subscriptions,
/// change announcements), which last as long as the client listens.
struct Tasks {
    calls: JoinSet<Option<Box<str>>>,
    streams: JoinSet<Option<Box<str>>>,
}

/// After end-of-file: whether the client only shut down its sending side and still reads (a
/// closed peer reports a hang-up on the socket; a half-closed one does not).
async fn still_reading(read: &tokio::net::unix::OwnedReadHalf) -> bool {
    let socket: &UnixStream = read.as_ref();
    match tokio::time::timeout(std::time::Duration::from_millis(100), socket.ready(tokio::io::Interest::WRITABLE)).await {
        Ok(Ok(ready)) => !ready.is_write_closed(),
        _ => false,
    }
}

#[derive(Deserialize)]
struct ProfileChoice {
    name: String,
}

impl Connection {
    fn new(endpoint: Arc<Endpoint>, identity: Identity) -> Connection {
        Connection {
            endpoint,
            admission: Admission::new(identity),
            profile: None,
            in_flight: HashMap::new(),
            announcing: false,
            serving: false,
            client: Arc::default(),
            origin: Arc::new(Origin { wire: Wire::unix(None), session: None, version: None }),
            session: None,
        }
    }

    async fn run(mut self, stream: UnixStream, cancel: CancellationToken) {
        let (read, write) = stream.into_split();
        let (out, out_rx) = mpsc::channel::<String>(OUTGOING_QUEUE);
        // Owned here: a connection task aborted (at shutdown's deadline) takes its writer along.
        let mut writer = AbortOnDropHandle::new(tokio::spawn(write_loop(write, out_rx)));
        let mut tasks = Tasks { calls: JoinSet::new(), streams: JoinSet::new() };
        let mut lines = Lines::new(read, MAX_MESSAGE_BYTES);
        let mut reading = true;
        while reading || !tasks.calls.is_empty() {
            tokio::select! {
                () = cancel.cancelled() => break,
                // The writer ended: the client is gone.
                _ = &mut writer => break,
                Some(done) = tasks.calls.join_next() => {
                    if let Ok(Some(id)) = done {
                        self.in_flight.remove(&id);
                    }
                }
                Some(done) = tasks.streams.join_next() => {
                    if let Ok(Some(id)) = done {
                        self.in_flight.remove(&id);
                    }
                }
                line = lines.next(), if reading => match line {
                    Ok(Line::Complete(buf)) if buf.iter().all(u8::is_ascii_whitespace) => {}
                    Ok(Line::Complete(mut buf)) => {
                        if !self.on_line(&mut buf, &out, &mut tasks).await {
                            break;
                        }
                    }
                    Ok(Line::Oversized(bytes)) => {
                        let message = format!("a message of {bytes} bytes exceeds the limit of {MAX_MESSAGE_BYTES}");
                        if out.send(reply::unreadable(-32600, &message)).await.is_err() {
                            break;
                        }
                    }
                    // Gone altogether: what it asked is cancelled. Only stopped sending: it still
                    // reads, so its calls finish and are answered; subscriptions end now.
                    Ok(Line::Eof) if still_reading(lines.get_ref()).await => {
                        reading = false;
                        tasks.streams.abort_all();
                    }
                    Ok(Line::Eof) | Err(_) => break,
                },
            }
        }
        // Aborting the calls still running cancels them upstream; then what was already answered
        // is written out, briefly, before the socket closes.
        tasks.calls.shutdown().await;
        tasks.streams.shutdown().await;
        drop(out);
        if tokio::time::timeout(FLUSH_ON_CLOSE, &mut writer).await.is_err() {
            writer.abort();
        }
    }

    /// Handles one message; `false` ends the connection.
    async fn on_line(&mut self, buf: &mut Vec<u8>, out: &mpsc::Sender<String>, tasks: &mut Tasks) -> bool {
        let message = match message::read(buf) {
            Ok(message) => message,
            Err(unreadable) => return out.send(reply::unreadable(unreadable.code, &unreadable.message)).await.is_ok(),
        };
        let request = match message {
            Message::Response { id, result, error } => {
                self.client.on_response(id, result, error);
                return true;
            }
            Message::Notification { method, params } => return self.on_notification(&method, params, out).await,
            Message::Request(request) => request,
        };
        self.serving = true;
        let caller = match self.endpoint.admit(&mut self.admission) {
            Ok(caller) => caller,
            Err(refusal) => return out.send(reply::refusal(request.id, &refusal)).await.is_ok(),
        };
        if request.method == METHOD_INITIALIZE {
            self.client.declare(request.params);
            // A 2025 session on this connection: its version, and its life in the session metric.
            let requested = message::Params::read(request.params).ok().and_then(|params| params.protocol_version);
            let version = super::agreed_version(requested.as_deref());
            self.origin = Arc::new(Origin { wire: Wire::unix(None), session: None, version: Some(Arc::from(version)) });
            self.session = Some(session_life(&self.endpoint.door, version, &self.origin.wire));
        }
        let view =
            View { caller, profile: self.profile.clone(), trace: None, client: Some(self.client.clone()), origin: self.origin.clone() };
        let key: Box<str> = request.id.get().into();
        match &*request.method {
            METHOD_TOOLS_CALL | METHOD_LISTEN => {
                if self.in_flight.len() >= MAX_IN_FLIGHT || self.in_flight.contains_key(&key) {
                    let problem = match self.in_flight.contains_key(&key) {
                        true => "a request with this id is still running".to_owned(),
                        false => format!("more than {MAX_IN_FLIGHT} requests in flight on this connection"),
                    };
                    return out.send(reply::error(request.id, reply::SERVER_ERROR, &problem, None)).await.is_ok();
                }
                let listen = request.method == METHOD_LISTEN;
                let line = std::mem::take(buf);
                let (endpoint, out) = (self.endpoint.clone(), out.clone());
                let handle = match listen {
                    true => tasks.streams.spawn(listen_task(endpoint, view, line, out, key.clone())),
                    false => tasks.calls.spawn(call_task(endpoint, view, line, out, key.clone())),
                };
                self.in_flight.insert(key, handle);
                true
            }
            method => {
                let answer = self.endpoint.answer(&view, &request, None).await;
                let initialized = method == METHOD_INITIALIZE && !self.announcing;
                let sent = out.send(answer).await.is_ok();
                if initialized {
                    self.announcing = true;
                    tasks.streams.spawn(announce_changes(self.endpoint.clone(), view, out.clone()));
                }
                sent
            }
        }
    }

    async fn on_notification(&mut self, method: &str, params: Option<&RawValue>, out: &mpsc::Sender<String>) -> bool {
        match method {
            METHOD_CANCELLED => {
                if let Some(handle) = message::cancelled_request(params).and_then(|id| self.in_flight.remove(id)) {
                    handle.abort();
                }
                true
            }
            PROFILE_NOTIFICATION if self.serving => {
                // Its listings and change notifications are already under way for the whole view.
                out.send(reply::unreadable(-32600, "choose the profile before the first request")).await.is_ok()
            }
            PROFILE_NOTIFICATION => {
                let choice = params.and_then(|params| serde_json::from_str::<ProfileChoice>(params.get()).ok());
                match choice.and_then(|choice| self.endpoint.profile(&choice.name).ok_or(choice.name).ok()) {
                    Some(profile) => {
                        self.profile = Some(profile);
                        true
                    }
                    None => {
                        // Serving the whole catalog instead would be a surprise: say so and end.
                        let _ = out.send(reply::unreadable(-32602, "no such profile in [mcp.profiles]")).await;
                        false
                    }
                }
            }
            _ => true,
        }
    }
}

/// Runs one call; the connection aborts the task to cancel it.
async fn call_task(endpoint: Arc<Endpoint>, view: View, line: Vec<u8>, out: mpsc::Sender<String>, key: Box<str>) -> Option<Box<str>> {
    if let Ok(Message::Request(request)) = message::read(&line) {
        let answer = endpoint.answer(&view, &request, Some(&out)).await;
        let _ = out.send(answer).await;
    }
    Some(key)
}

/// A 2026 `subscriptions/listen`: acknowledged at once, then one `list_changed` tagged with the
/// subscription each time the caller's view changes, until the client cancels it.
async fn listen_task(endpoint: Arc<Endpoint>, view: View, line: Vec<u8>, out: mpsc::Sender<String>, key: Box<str>) -> Option<Box<str>> {
    let Ok(Message::Request(request)) = message::read(&line) else { return Some(key) };
    if let Err(message::Refused(answer)) = check_listen(&request) {
        let _ = out.send(answer).await;
        return Some(key);
    }
    let wanted = message::listens_for_tools(request.params);
    if out.send(reply::listen_acknowledged(request.id, wanted)).await.is_err() || !wanted {
        // Nothing to send on it: the subscription stays open, silent, until cancelled.
        std::future::pending::<()>().await;
    }
    ChangeWatch::new(&endpoint, &view).forward(&endpoint, &view, &reply::listen_tools_changed(request.id), &out).await;
    Some(key)
}

/// The 2026 rules apply to a listen request too.
fn check_listen(request: &Request<'_>) -> Result<(), message::Refused> {
    let params = message::Params::read(request.params)
        .map_err(|problem| message::Refused(reply::error(request.id, -32602, &problem.to_string(), None)))?;
    params.check_modern(request.id)
}

/// Legacy sessions: `notifications/tools/list_changed` whenever the caller's view changes.
async fn announce_changes(endpoint: Arc<Endpoint>, view: View, out: mpsc::Sender<String>) -> Option<Box<str>> {
    ChangeWatch::new(&endpoint, &view).forward(&endpoint, &view, &reply::notification(METHOD_TOOLS_LIST_CHANGED, None), &out).await;
    // Not a request: nothing to remove from the in-flight map, and the connection goes on.
    std::future::pending::<Option<Box<str>>>().await
}

/// Writes lines as they come, flushing when none are waiting.
async fn write_loop(write: OwnedWriteHalf, mut lines: mpsc::Receiver<String>) {
    let mut writer = BufWriter::with_capacity(64 * 1024, write);
    while let Some(line) = lines.recv().await {
        if writer.write_all(line.as_bytes()).await.is_err() {
            return;
        }
        while let Ok(line) = lines.try_recv() {
            if writer.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
}
