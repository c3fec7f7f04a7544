//! A sandboxed server's only way out under `network = { allow = [...] }`: an HTTP proxy (CONNECT
//! tunnels, and plain `http://` requests forwarded one per connection) the daemon serves on a listener in the sandbox's own network namespace (its init made it and
//! handed it over, `sandbox::EGRESS_FD`). Each tunnel is to a host and port the entry allows,
//! resolved and connected from the daemon's side; everything else is refused (403), counted
//! and named (the last refused host, in `toolhost servers`, the console and the log, escaped:
//! the name is the server's text). A host name that resolves to this machine (any of its
//! addresses: `listen::machine`) or its link (link-local, broadcast) is refused too unless the
//! entry names that address itself: an allowed name is never a way back into the daemon. And
//! where an entry does name one, the daemon's doors still know the tunnel for the server's (a
//! `machine::Tunnel` holds its port): a server is never a caller, even through its proxy.
//! A refusal that looks like a package fetch (a registry's host, or a public host name a package
//! launcher asks for) names its fix: `registry = false` to remove, or the host to allow; the
//! host is the server's choice, so an address or a private name is never advised.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::config::sandbox::HostPattern;
use crate::listen::machine::{self, Tunnel};
use crate::telemetry::throttle::Throttle;

/// The request head a client sends the proxy, at most.
const MAX_HEAD: usize = 8 << 10;
/// Headers in that head, at most (hyper's own bound).
const MAX_HEADERS: usize = 100;
/// Tunnels open at once per server, at most.
const MAX_TUNNELS: usize = 64;
/// How long a client may take to send its request, the name to resolve and the host to answer.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// A refused target as the log and `toolhost servers` show it, at most (bytes, escapes included).
const MAX_SHOWN: usize = 260;

/// Where a sandboxed server's network leads: its mode and the hosts its proxy reaches, each
/// with why, as `confinement::egress` (the one rule) decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub network: crate::sandbox::Network,
    pub reach: Vec<Reach>,
    /// The package launcher the entry runs, if it is one that fetches.
    pub launcher: Option<Launcher>,
}

/// One host a server's proxy reaches, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    pub host: HostPattern,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The entry's `network.allow` names it.
    Allowed,
    /// The registry of the package launcher the entry runs (the words it was called by, "npx").
    Registry(String),
}

/// A package launcher: the words it was called by ("uv tool"), the registries its settings
/// name, and whether its entry refused them (`registry = false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    pub said: String,
    pub registries: Vec<HostPattern>,
    pub refused: bool,
}

impl Reach {
    /// Why, as `check-config` and `toolhost servers` say it.
    #[must_use]
    pub fn why(&self) -> String {
        match &self.why {
            Why::Allowed => "network.allow".to_owned(),
            Why::Registry(launcher) => format!("{launcher}'s registry; registry = false to refuse"),
        }
    }
}

impl Route {
    /// The hosts its proxy reaches.
    #[must_use]
    pub fn hosts(&self) -> Vec<HostPattern> {
        self.reach.iter().map(|reach| reach.host.clone()).collect()
    }

    /// What would let a refused `host:port` (shown as `target`) through, where the refusal
    /// looks like a package fetch: the launcher's own registry that `registry = false` refuses,
    /// a public host name a launcher asks for, or a public registry's host. The host is the
    /// server's choice: a fix names it only when it is the registry the launcher's settings name
    /// or a public host name (`launchers::is_public_name`), never an address, loopback, a private
    /// name or this machine's; for any other host a launcher asks for, it says the launcher does
    /// not need it and advises nothing. `None` for any other refusal.
    #[must_use]
    pub fn fix(&self, target: &str, host: &str, port: u16) -> Option<String> {
        let public = super::launchers::is_public_name(host);
        match &self.launcher {
            Some(launcher) if launcher.refused && launcher.registries.iter().any(|registry| registry.matches(host, port)) => Some(format!(
                "{target} is {}'s registry, which this entry's `registry = false` refuses: remove `registry = false` (or {})",
                launcher.said,
                self.allow(target)
            )),
            Some(launcher) if public => Some(format!(
                "{} fetches packages and {target} is not its registry: if it needs that host, {}",
                launcher.said,
                self.allow(target)
            )),
            Some(launcher) => Some(format!(
                "{} asked for a host that is neither its registry nor a public host name, which a package launcher does not need: \
                 nothing to allow",
                launcher.said
            )),
            None if public && super::launchers::is_public_registry(host) => {
                Some(format!("{target} is a package registry: if the server fetches packages, {}", self.allow(target)))
            }
            None => None,
        }
    }

    /// How `target` is allowed, in the words of the entry's own network setting: its
    /// `network.allow`, or the allow-list it does not have yet.
    fn allow(&self, target: &str) -> String {
        match self.has_allow_list() {
            true => format!("add {target} to network.allow"),
            false => format!("give the entry network = {{ allow = [\"{target}\"] }} (its registry is reached besides)"),
        }
    }

    /// Whether the entry names hosts of its own (`network = { allow = [...] }`).
    fn has_allow_list(&self) -> bool {
        self.reach.iter().any(|reach| reach.why == Why::Allowed)
    }

    /// Why a host not reached is refused, in the words of the entry's network setting.
    fn refused(&self) -> &'static str {
        match self.has_allow_list() {
            true => "is not in this server's network.allow",
            false => "is not a host this server may reach (its entry allows no hosts of its own)",
        }
    }
}

/// What a server's proxy let through and refused; shared by its sessions and shown with it.
#[derive(Debug, Default)]
pub struct EgressStats {
    pub tunnels: AtomicU64,
    pub denied: AtomicU64,
    /// The last target refused, and what would let it through where that is known.
    last_denied: Mutex<Option<(String, Option<String>)>>,
}

impl EgressStats {
    /// The last `host:port` refused, if any.
    #[must_use]
    pub fn last_denied(&self) -> Option<String> {
        self.last_denied.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|(target, _)| target.clone())
    }

    /// What would let the last refused host through, where its refusal looked like a package
    /// fetch ([`Route::fix`]).
    #[must_use]
    pub fn last_fix(&self) -> Option<String> {
        self.last_denied.lock().unwrap_or_else(PoisonError::into_inner).as_ref().and_then(|(_, fix)| fix.clone())
    }

    /// The last refusal with its fix, if one was made since the count stood at `before` (the
    /// start of a session) and a fix is known: what its failure then says.
    #[must_use]
    pub fn refusal_since(&self, before: u64) -> Option<String> {
        if self.denied.load(Ordering::Relaxed) <= before {
            return None;
        }
        let fix = self.last_fix()?;
        Some(format!("its way out refused {}: {fix}", self.last_denied().unwrap_or_default()))
    }

    fn deny(&self, target: &str, fix: Option<String>) {
        self.denied.fetch_add(1, Ordering::Relaxed);
        *self.last_denied.lock().unwrap_or_else(PoisonError::into_inner) = Some((shown(target), fix));
    }
}

/// Receives the listener the sandbox's init hands over on `channel`, then serves the proxy on
/// it until the task is aborted (the server's process is stopped).
pub(crate) async fn run(server: Arc<str>, channel: std::os::unix::net::UnixStream, route: Arc<Route>, stats: Arc<EgressStats>) {
    let listener = match receive_listener(channel).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::debug!(server = %server, %error, "no proxy listener from the sandbox (it did not start)");
            return;
        }
    };
    // What the server asks for is the server's to pace: a line a second at most.
    let refusals = Arc::new(Throttle::new(1));
    let mut tunnels = JoinSet::new();
    loop {
        // Finished tunnels are collected as they end; a server holds at most MAX_TUNNELS.
        while tunnels.try_join_next().is_some() {}
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, most likely: give the tunnels a moment to end.
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if tunnels.len() >= MAX_TUNNELS {
            drop(stream);
            continue;
        }
        let (route, stats, server, refusals) = (route.clone(), stats.clone(), server.clone(), refusals.clone());
        tunnels.spawn(async move {
            if let Err(refused) = tunnel(stream, &route, &stats).await
                && let Some(suppressed) = refusals.admit()
            {
                tracing::warn!(server = %server, %refused, suppressed, "the server's way out refused a connection");
            }
        });
    }
}

/// The listener, as the init sent it (see `sandbox::report::receive_listener`).
async fn receive_listener(channel: std::os::unix::net::UnixStream) -> std::io::Result<TcpListener> {
    let listener =
        tokio::task::spawn_blocking(move || crate::sandbox::report::receive_listener(&channel)).await.map_err(std::io::Error::other)??;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// What a client asked the proxy for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// `CONNECT host:port`: a tunnel (HTTPS, or anything else over TCP).
    Tunnel { host: String, port: u16 },
    /// `GET http://host[:port]/path`: one plain HTTP request, sent on as `head` (origin-form,
    /// `Connection: close`, no proxy headers).
    Forward { host: String, port: u16, head: String },
}

/// Why a client connection was refused or ended, as the log says it (`target` is already
/// [`shown`]: the server wrote the name).
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("no request in time")]
    NoRequestInTime,
    #[error(transparent)]
    Head(#[from] HeadError),
    #[error("a request this proxy does not take (CONNECT host:port, or a plain http:// URL)")]
    NotTaken,
    #[error("{target} {why}")]
    NotAllowed { target: String, why: String },
    #[error("{target}: the name did not resolve in time")]
    ResolveTimeout { target: String },
    #[error("{target}: {source}")]
    Resolve { target: String, source: std::io::Error },
    #[error("{target} resolves to this machine or its link only")]
    Internal { target: String },
    #[error("{target} did not answer")]
    NoAnswer { target: String },
    #[error("{0}")]
    Relay(std::io::Error),
}

/// Why no request head was read.
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error("the request head is too long")]
    TooLong,
    #[error("the client closed before its request ended")]
    Closed,
    #[error("{0}")]
    Read(std::io::Error),
    #[error("the request head is not text")]
    NotText,
}

/// One client connection: its request checked, the host reached, the bytes relayed.
async fn tunnel(mut client: TcpStream, route: &Route, stats: &EgressStats) -> Result<(), Refused> {
    let head = tokio::time::timeout(STEP_TIMEOUT, read_head(&mut client)).await.map_err(|_| Refused::NoRequestInTime)??;
    let Some(ask) = ask_of(&head) else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        return Err(Refused::NotTaken);
    };
    let (host, port) = match &ask {
        Ask::Tunnel { host, port } | Ask::Forward { host, port, .. } => (host.clone(), *port),
    };
    // The server wrote the name: from here on it is shown escaped and bounded, wherever it goes.
    let target = shown(&format!("{host}:{port}"));
    let Some(entry) = route.reach.iter().map(|reach| &reach.host).find(|entry| entry.matches(&host, port)) else {
        let fix = route.fix(&target, &host, port);
        let why = match &fix {
            Some(fix) => format!("{}: {fix}", route.refused()),
            None => route.refused().to_owned(),
        };
        stats.deny(&target, fix);
        let _ = client.write_all(refusal(&target, &why).as_bytes()).await;
        return Err(Refused::NotAllowed { target, why });
    };
    let addresses: Vec<SocketAddr> = tokio::time::timeout(STEP_TIMEOUT, tokio::net::lookup_host((host.trim_matches(['[', ']']), port)))
        .await
        .map_err(|_| Refused::ResolveTimeout { target: target.clone() })?
        .map_err(|source| Refused::Resolve { target: target.clone(), source })?
        .filter(|address| entry.is_address() || !internal(address.ip()))
        .collect();
    if addresses.is_empty() {
        stats.deny(&target, None);
        let why = "leads to this machine or its link, which network.allow reaches only by an address it names";
        let _ = client.write_all(refusal(&target, why).as_bytes()).await;
        return Err(Refused::Internal { target });
    }
    let mut upstream = None;
    for address in addresses {
        if let Ok(Ok(connected)) = tokio::time::timeout(STEP_TIMEOUT, connect(address)).await {
            upstream = Some(connected);
            break;
        }
    }
    // The tunnel's port is held until the tunnel ends: the doors refuse it as the server's.
    let Some((mut upstream, _tunnel)) = upstream else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        return Err(Refused::NoAnswer { target });
    };
    stats.tunnels.fetch_add(1, Ordering::Relaxed);
    match ask {
        Ask::Tunnel { .. } => client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await,
        Ask::Forward { head, .. } => upstream.write_all(head.as_bytes()).await,
    }
    .map_err(Refused::Relay)?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

/// What a request head asks for: a tunnel, a plain HTTP request to forward, or nothing this
/// proxy takes (another scheme, a malformed head: httparse's word, HTTP/1.x only).
fn ask_of(head: &str) -> Option<Ask> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if !request.parse(head.as_bytes()).ok()?.is_complete() {
        return None;
    }
    let (method, uri, version) = (request.method?, request.path?, request.version?);
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(uri, None)?;
        return Some(Ask::Tunnel { host, port });
    }
    if !method.bytes().all(|byte| byte.is_ascii_uppercase()) {
        return None;
    }
    let after_scheme = uri.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("http://")).map(|_| &uri[7..])?;
    let (authority_part, path) = match after_scheme.find(['/', '?']) {
        Some(at) => (&after_scheme[..at], &after_scheme[at..]),
        None => (after_scheme, "/"),
    };
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
    let (host, port) = authority(authority_part, Some(80))?;
    // The headers as sent, less the proxy's own and the connection's: one request, then close.
    let mut forwarded = format!("{method} {path} HTTP/1.{version}\r\n");
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if !matches!(name.as_str(), "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive") {
            forwarded.push_str(&format!("{}: {}\r\n", header.name, std::str::from_utf8(header.value).ok()?));
        }
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    Some(Ask::Forward { host, port, head: forwarded })
}

/// `host:port` (or `host`, with `default_port`) → the host and port; no user info.
fn authority(text: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if text.is_empty() || text.contains('@') {
        return None;
    }
    let bracketed_end = text.rfind(']');
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if bracketed_end.is_none_or(|end| end < host.len()) => (host, port.parse().ok()?),
        _ => (text, default_port?),
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// A connection to `address` from a port held as a [`Tunnel`] before the connection exists, so
/// that no door can accept it before it is known for the server's.
async fn connect(address: SocketAddr) -> std::io::Result<(TcpStream, Tunnel)> {
    let (socket, any) = match address {
        SocketAddr::V4(_) => (tokio::net::TcpSocket::new_v4()?, IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
        SocketAddr::V6(_) => (tokio::net::TcpSocket::new_v6()?, IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)),
    };
    socket.bind(SocketAddr::new(any, 0))?;
    let tunnel = Tunnel::hold(socket.local_addr()?);
    Ok((socket.connect(address).await?, tunnel))
}

/// The refusal a client reads (curl and npm print the status line), with why.
fn refusal(target: &str, why: &str) -> String {
    let body = format!("toolhost: {target} {why}\n");
    format!("HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
}

/// Reads up to the blank line that ends the request head (no further: the tunnel's bytes follow).
async fn read_head(client: &mut TcpStream) -> Result<String, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && !head.ends_with(b"\n\n") {
        if head.len() >= MAX_HEAD {
            return Err(HeadError::TooLong);
        }
        match client.read(&mut byte).await {
            Ok(0) => return Err(HeadError::Closed),
            Ok(_) => head.push(byte[0]),
            Err(error) => return Err(HeadError::Read(error)),
        }
    }
    String::from_utf8(head).map_err(|_| HeadError::NotText)
}

/// Addresses an allowed name must not lead to: any of this machine's and the link itself.
fn internal(address: IpAddr) -> bool {
    let address = address.to_canonical();
    machine::is_this_machine(address)
        || match address {
            IpAddr::V4(v4) => v4.is_link_local() || v4.is_broadcast(),
            IpAddr::V6(v6) => v6.is_unicast_link_local(),
        }
}

/// Text a server chose (a host name), as the log and `toolhost servers` show it: every control
/// character (ESC, CR, DEL, C1) and invisible or bidirectional one written as its escape
/// (`\u{1b}`), so that it can neither forge a log line nor steer a terminal; at most
/// [`MAX_SHOWN`] bytes, an ellipsis saying it was cut.
fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_SHOWN));
    for c in text.chars() {
        let start = out.len();
        if super::exit::unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
        if out.len() > MAX_SHOWN {
            out.truncate(start);
            out.push('…');
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Pieces of proxy request heads, glued at random (FUZZING.md).
    const HEAD_FRAGMENTS: &[&str] = &[
        "CONNECT ",
        "GET ",
        "get ",
        "POST ",
        " ",
        "http://",
        "HTTP://",
        "https://",
        "registry.npmjs.org",
        "[::1]",
        "[",
        "]",
        ":",
        ":443",
        ":99999",
        "@",
        "/",
        "?",
        "#",
        " HTTP/1.1",
        " HTTP/1.0",
        " HTTP/2",
        "\r\n",
        "\n",
        "\r",
        "Host: x",
        "Proxy-Authorization: Basic a",
        "proxy-connection: keep-alive",
        "Connection: upgrade",
        "Keep-Alive: 5",
        "X: a\rHost: evil",
        "é",
        "\u{0}",
        "\u{1b}",
    ];

    fn head() -> impl Strategy<Value = String> {
        crate::mcp::fuzzing::glued_or_any(HEAD_FRAGMENTS, 40)
    }

    proptest! {
        #![proptest_config(crate::mcp::fuzzing::campaign())]

        /// Whatever a server's client writes, the proxy reads a tunnel, one request to forward
        /// or nothing; never a target with user info or without a host, and a forwarded head
        /// never carries the proxy's or the connection's own headers.
        #[test]
        fn proxy_request_heads_are_read_without_panicking(head in head()) {
            match ask_of(&head) {
                Some(Ask::Tunnel { host, .. }) => prop_assert!(!host.is_empty() && !host.contains('@')),
                Some(Ask::Forward { host, head: forwarded, .. }) => {
                    prop_assert!(!host.is_empty() && !host.contains('@'));
                    prop_assert!(forwarded.ends_with("Connection: close\r\n\r\n"));
                    let body = &forwarded[..forwarded.len() - "Connection: close\r\n\r\n".len()];
                    for line in body.split("\r\n").skip(1) {
                        let name = line.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
                        prop_assert!(!matches!(name.as_str(), "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"), "{line}");
                    }
                }
                None => {}
            }
        }
    }

    #[test]
    fn a_tunnel_or_a_plain_http_request_names_its_target_and_nothing_else_does() {
        let tunnel = |host: &str, port: u16| Some(Ask::Tunnel { host: host.into(), port });
        assert_eq!(ask_of("CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: x\r\n\r\n"), tunnel("registry.npmjs.org", 443));
        assert_eq!(ask_of("CONNECT [::1]:8080 HTTP/1.1\r\n\r\n"), tunnel("[::1]", 8080));
        let forwarded = ask_of(
            "GET http://Example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        );
        assert_eq!(
            forwarded,
            Some(Ask::Forward {
                host: "Example.com".into(),
                port: 80,
                head: "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n".into()
            })
        );
        let Some(Ask::Forward { host, port, head }) = ask_of("POST http://[::1]:8081?q HTTP/1.0\r\n\r\n") else { panic!() };
        assert_eq!((host.as_str(), port, head.as_str()), ("[::1]", 8081, "POST /?q HTTP/1.0\r\nConnection: close\r\n\r\n"));
        for head in [
            "GET https://x.com/ HTTP/1.1\r\n\r\n",
            "GET /relative HTTP/1.1\r\n\r\n",
            "GET http://user:pw@x.com/ HTTP/1.1\r\n\r\n",
            "get http://x.com/ HTTP/1.1\r\n\r\n",
            "CONNECT x.com HTTP/1.1\r\n\r\n",
            "CONNECT x.com:99999 HTTP/1.1\r\n\r\n",
            "CONNECT :443 HTTP/1.1\r\n\r\n",
            "CONNECT x.com:443\r\n\r\n",
            "CONNECT x.com:443 HTTP/2 extra\r\n\r\n",
            // A bare `\r` inside a header would reach the host as a line break of its own.
            "GET http://x.com/ HTTP/1.1\r\nX: a\rHost: evil\r\n\r\n",
            "GET  http://x.com/ HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(ask_of(head), None, "{head}");
        }
    }

    #[test]
    fn an_allowed_name_never_leads_back_into_the_machine() {
        for address in ["127.0.0.1", "127.1.2.3", "0.0.0.0", "169.254.169.254", "::1", "::", "fe80::1", "::ffff:127.0.0.1"] {
            assert!(internal(address.parse().unwrap()), "{address}");
        }
        // Every interface's address, in either form: a name for the machine's own address
        // reaches every service listening on `0.0.0.0`.
        for interface in nix::ifaddrs::getifaddrs().unwrap() {
            let address = interface.address.as_ref();
            if let Some(v4) = address.and_then(|address| address.as_sockaddr_in()) {
                assert!(internal(IpAddr::V4(v4.ip())) && internal(IpAddr::V6(v4.ip().to_ipv6_mapped())), "{}", v4.ip());
            }
            if let Some(v6) = address.and_then(|address| address.as_sockaddr_in6()) {
                assert!(internal(IpAddr::V6(v6.ip())), "{}", v6.ip());
            }
        }
        for address in ["104.16.0.35", "203.0.113.5", "2606:4700::6810:1", "::ffff:104.16.0.35"] {
            assert!(!internal(address.parse().unwrap()), "{address}");
        }
    }

    #[test]
    fn a_name_a_server_wrote_is_shown_escaped_and_bounded() {
        assert_eq!(shown("registry.npmjs.org:443"), "registry.npmjs.org:443");
        assert_eq!(shown("a\u{1b}[2Jb\rc\u{202e}d:443"), "a\\u{1b}[2Jb\\u{d}c\\u{202e}d:443");
        let long = shown(&"\u{1b}".repeat(1000));
        assert!(long.len() <= MAX_SHOWN + '…'.len_utf8() && long.ends_with('…') && !long.contains('\u{1b}'), "{long}");
        let stats = EgressStats::default();
        stats.deny(&"x\r".repeat(500), None);
        assert!(stats.last_denied().is_some_and(|shown| !shown.contains('\r') && shown.len() <= MAX_SHOWN + 3));
    }
}
