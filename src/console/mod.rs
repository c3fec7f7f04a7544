//! The operator console: HTML pages served by the daemon (servers, catalog, tasks, limits,
//! review, audit), kept live by the catalog watch over server-sent events (and, for what moves
//! with every call, by fetching again), under the same identities and policy as the other doors.
//! Loopback TCP and Unix sockets only. Everything it serves is in the binary.
//!
//! A request passes [`guard`] (Host, Origin, fetch metadata), gets a session (a cookie, a CSRF
//! token, the token it signed in with), is admitted like any caller (the kernel's word for a
//! loopback peer, else the session's token) and answered by one view. Actions are POSTs with the
//! session's CSRF token and need `admin`, but for cancelling one's own task.

mod approvals;
mod catalog;
mod chart;
mod diff;
mod error;
mod events;
mod guard;
mod html;
mod limits;
mod login;
mod review;
mod servers;
mod sessions;
mod tasks;
mod trail;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use maud::Markup;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::door::Door;
use crate::door::error::DoorError;
use crate::door::model::{Caller, ConsoleConfig, Identity, Listener, Refusal, ServerAction, UnixPeer, now_ms};
use crate::door::observe::Throttle;
use crate::door::operator::{Operator, Via};
use crate::listen::http::Body;
use crate::listen::shares::{PeerRate, Shares};
use crate::listen::{self, BindError, Bound, BoundAddr, Origins};
pub use error::ConsoleError;
use html::Ctx;
use sessions::{Session, Sessions};

/// Connections open at once.
const MAX_CONNECTIONS: usize = 1024;
/// Connections one peer (a uid, as the kernel says) may hold open: a browser's handful of
/// tabs, never everyone's room.
const CONNECTIONS_PER_PEER: usize = 48;
/// How long a connection may take to send its request head, and then a form.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest form accepted (a token, a few names).
const MAX_FORM_BYTES: usize = 16 * 1024;
/// Sign-in attempts per second of one peer.
const LOGINS_PER_SECOND: u32 = 5;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
const ICON: &str = include_str!("assets/icon.svg");

/// What the console needs of the daemon.
pub struct Console {
    door: Door,
    operator: Operator,
    origins: Origins,
    sessions: Sessions,
    streams: Arc<tokio::sync::Semaphore>,
    stream_shares: Arc<Shares>,
    connections: Arc<Shares>,
    logins: PeerRate,
    warnings: Throttle,
}

/// Who is on the other end of one connection, as the kernel says.
#[derive(Clone)]
struct Peer {
    unix: bool,
    peer: Option<UnixPeer>,
}

impl Peer {
    /// Whose share the connection counts against ([`UnixPeer::share_key`]).
    fn key(&self) -> String {
        UnixPeer::share_key(self.peer.as_ref())
    }
}

impl Console {
    pub fn new(door: Door, operator: Operator, config: &ConsoleConfig) -> Console {
        Console {
            door,
            operator,
            origins: Origins::new(config.allowed_origins.clone()),
            sessions: Sessions::new(config.session_ttl),
            streams: Arc::new(tokio::sync::Semaphore::new(events::MAX_STREAMS)),
            stream_shares: Shares::new(events::STREAMS_PER_AGENT),
            connections: Shares::new(CONNECTIONS_PER_PEER),
            logins: PeerRate::new(LOGINS_PER_SECOND),
            warnings: Throttle::new(1),
        }
    }

    /// A place among the connections of `peer`'s share ([`listen::connection_share`]).
    fn connection_share(&self, peer: &Peer) -> Option<listen::shares::Share> {
        listen::connection_share(&self.connections, &peer.key(), &self.warnings, "console")
    }

    async fn handle(&self, peer: &Peer, request: http::Request<Incoming>, stop: &CancellationToken) -> Response<Body> {
        let mut response = match self.route(peer, request, stop).await {
            Ok(response) => response,
            Err(error) => self.refusal(error),
        };
        guard::protect(response.headers_mut());
        response
    }

    async fn route(&self, peer: &Peer, request: http::Request<Incoming>, stop: &CancellationToken) -> Result<Response<Body>, ConsoleError> {
        let (parts, body) = request.into_parts();
        guard::check(&parts.method, &parts.headers, &self.origins)?;
        let path = parts.uri.path();
        if let Some(asset) = path.strip_prefix("/static/") {
            return asset_response(asset).ok_or(ConsoleError::NotFound);
        }
        let known = guard::session_cookie(&parts.headers).and_then(|id| self.sessions.get(id));
        let (session, fresh) = match known {
            Some(session) => (session, false),
            None => (self.sessions.create(None).ok_or(ConsoleError::ShuttingDown)?, true),
        };
        let mut response = match self.dispatch(peer, &parts, body, &session, stop).await {
            Ok(response) => response,
            // Refused callers get the sign-in page, with a session whose form works.
            Err(ConsoleError::NotAdmitted(refusal)) => {
                let who = self.admit(peer, None).ok().map(|caller| caller.agent.name.to_string());
                html_response(StatusCode::UNAUTHORIZED, login::view(&session.csrf, who.as_deref(), Some(&refusal.to_string())))
            }
            Err(error) => self.refusal(error),
        };
        if fresh && !response.headers().contains_key(header::SET_COOKIE) {
            let max_age = self.sessions.ttl().as_secs();
            if let Some(cookie) = guard::set_cookie(&session.id, max_age) {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
        }
        Ok(response)
    }

    async fn dispatch(
        &self,
        peer: &Peer,
        parts: &http::request::Parts,
        body: Incoming,
        session: &Session,
        stop: &CancellationToken,
    ) -> Result<Response<Body>, ConsoleError> {
        let path = parts.uri.path();
        let query = parts.uri.query().unwrap_or_default();
        if parts.method == Method::POST {
            // Every POST (an action, a sign-in, a sign-out) is a form of this session's pages.
            let form = read_form(parts, body).await?;
            if !guard::csrf_matches(&session.csrf, form.get("csrf")) {
                return Err(ConsoleError::Csrf);
            }
            return match path {
                "/login" => self.login(peer, session, &form),
                "/logout" => {
                    self.sessions.remove(&session.id);
                    let mut response = redirect("/login");
                    response.headers_mut().insert(header::SET_COOKIE, guard::clear_cookie());
                    Ok(response)
                }
                _ => {
                    let caller = self.admit(peer, session.token.clone()).map_err(ConsoleError::NotAdmitted)?;
                    let (flash, back) = self.act(&caller, path, &form).await?;
                    self.sessions.flash(&session.id, flash);
                    Ok(redirect(back))
                }
            };
        }
        if parts.method != Method::GET {
            return Err(ConsoleError::NotFound);
        }
        match path {
            "/" => return Ok(redirect("/servers")),
            "/login" => {
                let who = self.admit(peer, session.token.clone()).ok().map(|caller| caller.agent.name.to_string());
                return Ok(html_response(StatusCode::OK, login::view(&session.csrf, who.as_deref(), None)));
            }
            _ => {}
        }
        let caller = self.admit(peer, session.token.clone()).map_err(ConsoleError::NotAdmitted)?;
        let snapshot = self.door.snapshot();
        let fragment = parts.headers.get("x-console-fragment").is_some();
        let poll_ms = (path == "/server").then_some(2000);
        let ctx = Ctx {
            caller: &caller,
            csrf: &session.csrf,
            signed_in: session.token.is_some(),
            fragment,
            revision: snapshot.revision(),
            poll_ms,
        };
        let params = Form::parse(query.as_bytes());
        let flash = if fragment { None } else { self.sessions.take_flash(&session.id) };
        let admin = || caller.require_admin().map_err(DoorError::from);
        let page = match path {
            "/servers" => servers::view(&ctx, &snapshot, self.door.degraded().map(|why| why.to_string()), flash.as_deref()),
            "/server" => servers::server(&ctx, &snapshot, &params.text("name", 200), flash.as_deref()).ok_or(ConsoleError::NotFound)?,
            "/catalog" => {
                let query =
                    catalog::Query { q: params.text("q", 200), server: params.text("server", 200), state: params.text("state", 20) };
                catalog::view(&ctx, &self.door, &query).await?
            }
            "/tool" => catalog::tool(&ctx, &self.door, &params.text("server", 200), &params.text("name", 1000)).await?,
            "/review" => review::view(&ctx, &self.operator, flash.as_deref()).await?,
            "/audit" => {
                admin()?;
                let query = trail::Query {
                    agent: params.text("agent", 200),
                    tool: params.text("tool", 200),
                    outcome: params.text("outcome", 100),
                    window: params.text("window", 8),
                };
                trail::view(&ctx, &self.operator, &query, now_ms()).await?
            }
            "/tasks" => {
                let query =
                    tasks::Query { agent: params.text("agent", 200), state: params.text("state", 20), tool: params.text("tool", 200) };
                tasks::view(&ctx, &self.door, &query, now_ms(), flash.as_deref()).await?
            }
            "/approvals" => {
                admin()?;
                approvals::view(&ctx, &self.door, flash.as_deref()).await?
            }
            "/limits" => limits::view(&ctx, &self.door, now_ms()).await?,
            "/events" => {
                let slot = events::slot(&self.streams, &self.stream_shares, &caller.agent.name).ok_or(ConsoleError::Busy)?;
                return Ok(events::stream(&self.door, caller.identity, stop.clone(), slot));
            }
            _ => return Err(ConsoleError::NotFound),
        };
        let mut response = html_response(StatusCode::OK, page);
        if let Ok(revision) = HeaderValue::from_str(&snapshot.revision().to_string()) {
            response.headers_mut().insert("x-catalog-revision", revision);
        }
        Ok(response)
    }

    /// An action; what it did (for the next page) and where to go back to. Cancelling one's own
    /// task is anyone's; everything else is an operator's.
    async fn act(&self, caller: &Caller, path: &str, form: &Form) -> Result<(String, &'static str), ConsoleError> {
        let server = form.text("server", 200);
        if path == "/tasks/cancel" {
            let id = form.text("id", 200);
            let task = match caller.agent.admin {
                true => self.door.cancel_task_as_operator(caller, &id).await?,
                false => self.door.cancel_task(caller, &id).await?,
            };
            return Ok((format!("Cancelled task {} ({}).", task.id, task.qualified_name), "/tasks"));
        }
        caller.require_admin().map_err(DoorError::from)?;
        match path {
            "/servers/refresh" => {
                self.operator.operate(caller, &server, ServerAction::Refresh)?;
                Ok((format!("Asked {server} for its tools again."), "/servers"))
            }
            "/servers/restart" => {
                self.operator.operate(caller, &server, ServerAction::Restart)?;
                Ok((format!("Restarting {server}."), "/servers"))
            }
            "/approvals/decide" => {
                let said =
                    approvals::decide(&self.door, caller, &form.text("id", 200), &form.text("decision", 20), &form.text("reason", 1000))
                        .await?;
                Ok((said, "/approvals"))
            }
            "/review/approve" => {
                let (tool, hash) = (form.text("tool", 1000), form.text("hash", 100));
                if hash.is_empty() {
                    return Err(ConsoleError::BadRequest("an approval names the exact hash it approves".into()));
                }
                let approved =
                    self.operator.approve(caller, Via::Console, &server, std::slice::from_ref(&tool), false, Some(&hash)).await?;
                let hashes: Vec<String> = approved.iter().map(|(name, hash)| format!("{name} {}", html::short_hash(hash))).collect();
                Ok((format!("Approved {server}/{}: callable now.", hashes.join(", ")), "/review"))
            }
            _ => Err(ConsoleError::NotFound),
        }
    }

    /// A sign-in (its form's CSRF token already checked).
    fn login(&self, peer: &Peer, session: &Session, form: &Form) -> Result<Response<Body>, ConsoleError> {
        if !self.logins.admit(&peer.key()) {
            return Err(ConsoleError::LoginLimited);
        }
        let token = form.get("token").unwrap_or_default().trim().as_bytes().to_vec();
        let refused = |problem: &str| Ok(html_response(StatusCode::UNAUTHORIZED, login::view(&session.csrf, None, Some(problem))));
        if token.is_empty() {
            return refused("Enter a token.");
        }
        // A token must name an agent entry by itself: the kernel's word cannot stand in for it.
        // Once signed in, the session's caller is judged as on every door (the peer and the token).
        match self.door.admit(Identity::tcp(Some(token.clone()))) {
            Ok(_) => {
                // A new session (new id, new CSRF token): one fixed before sign-in is useless after.
                self.sessions.remove(&session.id);
                let signed = self.sessions.create(Some(token)).ok_or(ConsoleError::ShuttingDown)?;
                let mut response = redirect("/servers");
                if let Some(cookie) = guard::set_cookie(&signed.id, self.sessions.ttl().as_secs()) {
                    response.headers_mut().insert(header::SET_COOKIE, cookie);
                }
                Ok(response)
            }
            _ => refused("That token is not accepted."),
        }
    }

    /// The caller on `peer` with the session's `token`.
    fn admit(&self, peer: &Peer, token: Option<Vec<u8>>) -> Result<Caller, Refusal> {
        let identity = match peer.unix {
            true => Identity::unix_with_token(peer.peer.clone(), token),
            false => Identity::loopback(peer.peer.clone(), token),
        };
        self.door.admit(identity)
    }

    /// The page of a refusal or a failure (an internal one was logged where the door made it).
    fn refusal(&self, error: ConsoleError) -> Response<Body> {
        let status = error.status();
        let title = status.canonical_reason().unwrap_or("Refused");
        // Refused as no operator: signing in with an operator's token is the way on.
        let sign_in = matches!(&error, ConsoleError::Door(refused) if refused.reason == "ADMIN_REQUIRED");
        html_response(status, html::message_page(title, &error.to_string(), sign_in))
    }
}

/// A form or query string, its values by name (the first of each).
struct Form(Vec<(String, String)>);

impl Form {
    fn parse(bytes: &[u8]) -> Form {
        Form(form_urlencoded::parse(bytes).into_owned().take(64).collect())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    /// A value cut to `max` characters (empty when absent).
    fn text(&self, name: &str, max: usize) -> String {
        self.get(name).unwrap_or_default().chars().take(max).collect()
    }
}

async fn read_form(parts: &http::request::Parts, body: Incoming) -> Result<Form, ConsoleError> {
    let form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return Err(ConsoleError::BadRequest("actions are forms (application/x-www-form-urlencoded)".into()));
    }
    match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_FORM_BYTES).collect()).await {
        Ok(Ok(body)) => Ok(Form::parse(&body.to_bytes())),
        Ok(Err(_)) => Err(ConsoleError::BadRequest("the form is too large, or was cut off".into())),
        Err(_) => Err(ConsoleError::BadRequest("the form did not arrive in time".into())),
    }
}

fn html_response(status: StatusCode, page: Markup) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::from(page.into_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

fn redirect(location: &'static str) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::new())));
    *response.status_mut() = StatusCode::SEE_OTHER;
    response.headers_mut().insert(header::LOCATION, HeaderValue::from_static(location));
    response
}

fn asset_response(name: &str) -> Option<Response<Body>> {
    let (text, kind) = match name {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return None,
    };
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::from_static(text.as_bytes()))));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(response)
}

/// The console's listeners, bound before the daemon says it is ready.
pub struct BoundListeners(Vec<Bound>);

impl BoundListeners {
    /// Each listener on its own, in the order bound (each can then be closed on its own).
    pub fn each(self) -> impl Iterator<Item = BoundListeners> {
        self.0.into_iter().map(|bound| BoundListeners(vec![bound]))
    }
}

/// Binds every `[console]` listener, so that a bad address fails the start.
///
/// # Errors
/// [`BindError`] naming the address.
pub async fn bind(listeners: &[Listener]) -> Result<(Vec<BoundAddr>, BoundListeners), BindError> {
    let (addrs, bound) = listen::bind_all(listeners).await?;
    Ok((addrs, BoundListeners(bound)))
}

/// Serves the console on every listener until `cancel`; every task goes into `tracker`.
pub fn serve(listeners: BoundListeners, console: Arc<Console>, tracker: &TaskTracker, cancel: &CancellationToken) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    for listener in listeners.0 {
        let (console, connections, cancel, slots) = (console.clone(), tracker.clone(), cancel.clone(), slots.clone());
        tracker.spawn(async move {
            let socket = match &listener {
                Bound::Unix(_, file) => Some(file.clone()),
                Bound::Tcp(_) => None,
            };
            accept(listener, console, connections, cancel, slots).await;
            if let Some(file) = socket {
                file.remove();
            }
        });
    }
}

/// A connection just accepted.
enum Accepted {
    Tcp(tokio::net::TcpStream, std::net::SocketAddr),
    Unix(tokio::net::UnixStream),
}

async fn accept_one(listener: &Bound) -> std::io::Result<Accepted> {
    match listener {
        Bound::Tcp(tcp) => tcp.accept().await.map(|(stream, remote)| Accepted::Tcp(stream, remote)),
        Bound::Unix(unix, _) => unix.accept().await.map(|(stream, _)| Accepted::Unix(stream)),
    }
}

/// Accepts connections until `cancel`, each served on its own task while a slot is free.
async fn accept(
    listener: Bound,
    console: Arc<Console>,
    tracker: TaskTracker,
    cancel: CancellationToken,
    slots: Arc<tokio::sync::Semaphore>,
) {
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = accept_one(&listener) => accepted,
        };
        let accepted = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                listen::accept_failed(&error, "console").await;
                continue;
            }
        };
        let Some(slot) = listen::connection_slot(&slots, &console.warnings, "console", MAX_CONNECTIONS) else { continue };
        let (console, cancel) = (console.clone(), cancel.clone());
        tracker.spawn(async move {
            match accepted {
                Accepted::Tcp(stream, remote) => {
                    // The socket table is read on the blocking pool, never on the accept loop.
                    let local = stream.local_addr().ok();
                    let lookup = tokio::task::spawn_blocking(move || local.and_then(|local| UnixPeer::of_loopback(local, remote)));
                    let peer = Peer { unix: false, peer: lookup.await.ok().flatten() };
                    let Some(_share) = console.connection_share(&peer) else { return };
                    serve_connection(stream, peer, console, &cancel).await;
                }
                Accepted::Unix(stream) => {
                    let peer = Peer { unix: true, peer: UnixPeer::of(&stream) };
                    let Some(_share) = console.connection_share(&peer) else { return };
                    serve_connection(stream, peer, console, &cancel).await;
                }
            }
            drop(slot);
        });
    }
}

async fn serve_connection<S>(stream: S, peer: Peer, console: Arc<Console>, cancel: &CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = Arc::new(peer);
    let stop = cancel.clone();
    let service = hyper::service::service_fn(move |request| {
        let (console, peer, stop) = (console.clone(), peer.clone(), stop.clone());
        async move { Ok::<_, Infallible>(console.handle(&peer, request, &stop).await) }
    });
    listen::http::serve_connection(stream, service, HEADER_TIMEOUT, cancel).await;
}
