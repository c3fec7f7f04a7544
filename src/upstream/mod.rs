//! Upstream MCP sessions: spawning a server, the legacy handshake, and a handle to talk to it.
//!
//! `upstream` knows nothing about SQLite or the catalog. The supervisor owns each
//! [`Connection`]; everything else holds a [`SessionHandle`].

mod confinement;
pub mod egress;
mod exit;
pub mod grant_hint;
pub(crate) mod http;
mod launchers;
pub mod oauth;
pub mod queue;
pub mod reaper;
pub mod session;
mod stdio;
pub(crate) mod web;

pub use confinement::{PlanError, SandboxError};
pub use exit::printable;

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ProtocolChoice, ServerSpec, Transport};
use crate::mcp::jsonrpc::RpcError;
use crate::mcp::lifecycle::Era;
use crate::mcp::lifecycle::{self, HandshakeError, ServerHello};
use crate::mcp::modern;
use crate::telemetry::mcp::Wire;
pub use session::SessionHandle;
use tracing::Instrument;

/// Everything that can go wrong talking to an upstream server.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot start {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("the session is closed")]
    Closed,
    /// The request never reached the server: nothing ran.
    #[error("the request never reached the server: {0}")]
    NotSent(String),
    /// The request was sent and its exchange broke: the server may have run it.
    #[error("the exchange broke after the request was sent, so its outcome is unknown: {0}")]
    Lost(String),
    #[error("{method} got no answer within {after:?}")]
    Timeout { method: String, after: Duration },
    #[error("the server answered with error {}: {}", .0.code, .0.message)]
    Rpc(RpcError),
    #[error("the server is not reading its input (queue full)")]
    Overloaded,
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("{0}")]
    UnsupportedTransport(&'static str),
    #[error("the server refused the credentials (HTTP {0}); check the configured headers")]
    AuthFailed(u16),
    /// OAuth needs an operator: a login, or client credentials that work.
    #[error("authorization required: {0}")]
    AuthRequired(String),
    /// The server's sandbox could not be planned or built, or stopped it at a limit.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A stdio server went away before it answered: how, and what it said (`exit`).
    #[error("the server {0}")]
    Exited(String),
    /// Another failure of a stdio server, with what it said on stderr meanwhile.
    #[error("{error}; {said}")]
    Explained { error: Box<UpstreamError>, said: String },
}

impl UpstreamError {
    /// The failure itself, without what a server said about it.
    pub fn root(&self) -> &UpstreamError {
        match self {
            UpstreamError::Explained { error, .. } => error.root(),
            other => other,
        }
    }

    /// A low-cardinality name for the failure (`error.type` in telemetry).
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Closed | UpstreamError::Lost(_) => "session_lost",
            UpstreamError::NotSent(_) => "not_sent",
            UpstreamError::Overloaded => "overloaded",
            UpstreamError::Rpc(_) => "rpc_error",
            UpstreamError::Spawn { .. } => "spawn_failed",
            UpstreamError::Handshake(_) => "handshake_failed",
            UpstreamError::Protocol(_) | UpstreamError::UnsupportedTransport(_) => "protocol_error",
            UpstreamError::AuthFailed(_) | UpstreamError::AuthRequired(_) => "auth_failed",
            UpstreamError::Sandbox(_) => "sandbox",
            UpstreamError::Exited(_) => "server_exited",
            UpstreamError::Explained { error, .. } => error.kind(),
        }
    }
}

/// Why a stdio server would not start, as `check-config` says it.
#[derive(Debug, thiserror::Error)]
pub enum WouldNotStart {
    #[error("this kernel cannot sandbox it ({0}): it will not start")]
    Kernel(crate::sandbox::KernelGap),
    #[error("sandbox: {0}: it will not start")]
    Plan(PlanError),
    #[error("{0}: it will not start")]
    Data(SandboxError),
}

/// What `check-config` says of a stdio server's sandbox: `Ok` with what it will see, or `Err`
/// with why the server would not start. A server with its sandbox off gets `Ok` with a warning.
///
/// # Errors
/// The kernel cannot build the sandbox, or the plan cannot be made (see `confinement`).
pub fn sandbox_check(spec: &crate::config::StdioSpec) -> Result<String, WouldNotStart> {
    let sandbox = &spec.sandbox;
    if !sandbox.enabled {
        let off = "sandbox = \"off\": this server can reach everything toolhost's user can; its processes are told apart from \
                   callers only while it runs (one it leaves behind after it exits may act as toolhost's user on its sockets)";
        return Ok(data_summary(spec)?.map_or_else(|| off.to_owned(), |data| format!("{off}; {data}")));
    }
    crate::sandbox::kernel_support().map_err(WouldNotStart::Kernel)?;
    let plan = confinement::plan_for(spec).map_err(WouldNotStart::Plan)?;
    let home = sandbox.home.as_ref().map_or_else(String::new, |home| format!("; its home (HOME, XDG directories) is {}", home.display()));
    let home = match data_summary(spec)? {
        Some(data) => format!("{home}; {data}"),
        None => home,
    };
    let route = confinement::egress(spec);
    let network = match route.network {
        crate::sandbox::Network::Proxied => {
            let hosts: Vec<String> = route.reach.iter().map(|reach| reach.host.to_string()).collect();
            format!("only to {} (through toolhost's proxy)", hosts.join(", "))
        }
        other => other.label().to_owned(),
    };
    // What it sees and writes, by name: what an operator checks a grant against.
    let listed = |paths: &[std::path::PathBuf]| {
        let mut shown: Vec<String> = paths.iter().take(8).map(|path| path.display().to_string()).collect();
        if paths.len() > 8 {
            shown.push(format!("{} more", paths.len() - 8));
        }
        shown.join(", ")
    };
    let sees: Vec<std::path::PathBuf> = plan.read.iter().cloned().chain(plan.cwd.clone()).collect();
    let sees = if sees.is_empty() { "nothing beside the system".to_owned() } else { format!("{} beside the system", listed(&sees)) };
    let writes =
        if plan.write.is_empty() { "only its private /tmp".to_owned() } else { format!("{} and its private /tmp", listed(&plan.write)) };
    Ok(format!(
        "sandbox: network {network}, memory {} MiB, {} processes, {} open files, {} s of CPU, {} MiB of /tmp; sees {sees}; writes \
         {writes}{home}; limits {}",
        sandbox.limits.memory_bytes >> 20,
        sandbox.limits.processes,
        sandbox.limits.open_files,
        sandbox.limits.cpu_seconds,
        sandbox.limits.tmp_bytes >> 20,
        crate::sandbox::Enforcement::here().label(),
    ))
}

/// Everything a stdio server's sandbox shows beside the system, read-only (its program and
/// installation, the files its arguments name, its script's directory and project, its `cwd`,
/// its `read` grants), as `check-config` counts them; `None` when no plan can be made.
pub fn sandbox_reads(spec: &crate::config::StdioSpec) -> Option<Vec<std::path::PathBuf>> {
    let plan = confinement::plan_for(spec).ok()?;
    Some(plan.read.into_iter().chain(plan.cwd).collect())
}

/// Of [`sandbox_reads`], what the server's entry itself names (its `cwd`, its arguments' paths,
/// its `read` grants): where a refused write is answered with a `write` grant.
pub fn sandbox_given(spec: &crate::config::StdioSpec) -> Vec<std::path::PathBuf> {
    confinement::given(spec)
}

/// Where a stdio server's data directory (`data`) is on the host and what its start will do
/// there, as `check-config` says it: also with its sandbox off. `None` without one.
///
/// # Errors
/// Why its start would refuse it (the one rule `make_data` follows), ending "it will not start".
pub fn data_summary(spec: &crate::config::StdioSpec) -> Result<Option<String>, WouldNotStart> {
    let Some(data) = spec.sandbox.data.as_ref() else { return Ok(None) };
    let found = confinement::find_data(spec).map_err(WouldNotStart::Data)?;
    let Some((real, found)) = found else { return Ok(None) };
    let made = if data.beside_homes { "data = true, beside its home" } else { "data" };
    let now = match found {
        confinement::DataFound::Missing => "not there yet: made for the server at its start, and kept",
        confinement::DataFound::Own => "there and the server's: kept",
        confinement::DataFound::Empty => "there and empty: given to the server at its start, and kept",
    };
    Ok(Some(format!("its data directory (${{data}} in its env; {made}) is {}, {now}", real.display())))
}

/// The daemon's private files that lie directly in a directory the server may write: masked,
/// but a mask on a file goes when the file is replaced by rename on the host, so a running
/// server would then see the new content (in a read-only directory the sandbox shows a
/// snapshot without them instead). For `check-config` to warn about.
pub fn private_files_in_write_grants(spec: &crate::config::StdioSpec) -> Vec<std::path::PathBuf> {
    let Ok(plan) = confinement::plan_for(spec) else { return Vec::new() };
    plan.hidden
        .into_iter()
        .filter(|path| path.is_file() && path.parent().is_some_and(|dir| plan.write.iter().any(|grant| dir.starts_with(grant))))
        .collect()
}

/// The directories an entry shows whole that hold far more than a server needs: `/`, a
/// top-level directory, a home or a dot-directory straight in one, as its `cwd` or a `read` or
/// `write` grant (the operator asked for them, so they are shown; `check-config` says what
/// they hold). Each with the key that grants it.
pub fn wide_grants(spec: &crate::config::StdioSpec) -> Vec<(&'static str, std::path::PathBuf)> {
    if !spec.sandbox.enabled {
        return Vec::new();
    }
    let cwd = spec.cwd.iter().map(|path| ("cwd", path));
    let read = spec.sandbox.read.iter().map(|path| ("read", path));
    let write = spec.sandbox.write.iter().map(|path| ("write", path));
    cwd.chain(read)
        .chain(write)
        .filter_map(|(key, path)| {
            let shown = std::fs::canonicalize(path).ok()?;
            (!launchers::shareable(&shown)).then_some((key, shown))
        })
        .collect()
}

/// What `check-config` says of a package launcher run without the network it fetches with:
/// a mode that has no way out, or `registry = false` refusing a registry nothing else allows.
pub fn launcher_warning(spec: &crate::config::StdioSpec) -> Option<String> {
    if !spec.sandbox.enabled {
        return None;
    }
    let route = confinement::egress(spec);
    if let Some(launcher) = route.launcher.as_ref().filter(|launcher| launcher.refused)
        && (route.network == crate::sandbox::Network::Proxied || !spec.sandbox.network_given)
    {
        let unreached: Vec<String> = launcher
            .registries
            .iter()
            .filter(|registry| !route.reach.iter().any(|reach| reach.host == **registry))
            .map(ToString::to_string)
            .collect();
        let unset = if spec.sandbox.network_given { "" } else { " (with network unset, that leaves it no network at all)" };
        return (!unreached.is_empty()).then(|| {
            format!(
                "hint: {} fetches its package from {}, which this entry's `registry = false` refuses{unset}: it starts only from \
                 what its home's cache holds; remove `registry = false` to let it fetch",
                launcher.said,
                unreached.join(", ")
            )
        });
    }
    exit::launcher_hint(&spec.command, &spec.args, route.network)
}

/// What a sandboxed server's way out reaches, each host with why (`check-config` prints it):
/// `None` when its network reaches no host through the proxy and refuses no registry.
pub fn reach_summary(spec: &crate::config::StdioSpec) -> Option<String> {
    if !spec.sandbox.enabled {
        return None;
    }
    let route = confinement::egress(spec);
    let reaches: Vec<String> = route.reach.iter().map(|reach| format!("{} ({})", reach.host, reach.why())).collect();
    let refused: Vec<String> = route
        .launcher
        .iter()
        .filter(|launcher| launcher.refused)
        .flat_map(|launcher| {
            launcher
                .registries
                .iter()
                .filter(|registry| !route.reach.iter().any(|reach| reach.host == **registry))
                .map(move |registry| format!("{registry} ({}'s registry, refused by registry = false)", launcher.said))
        })
        .collect();
    let reached = if reaches.is_empty() { "no host".to_owned() } else { reaches.join(", ") };
    match (reaches.is_empty(), refused.is_empty()) {
        (true, true) => None,
        (_, true) => Some(format!("reaches: {reached}")),
        _ => Some(format!("reaches: {reached}; not {}", refused.join(", "))),
    }
}

/// The `write` grants a root daemon's server cannot write: it runs as the sandbox's own id
/// (never root), so a directory only root (or another user) may write refuses every write.
/// Each with what would let it. Empty for an unprivileged daemon (its servers run as itself).
pub fn unwritable_write_grants(spec: &crate::config::StdioSpec) -> Vec<(std::path::PathBuf, String)> {
    use std::os::unix::fs::MetadataExt;
    if !spec.sandbox.enabled || !nix::unistd::geteuid().is_root() {
        return Vec::new();
    }
    let id = crate::sandbox::SANDBOX_ID;
    spec.sandbox
        .write
        .iter()
        .filter_map(|grant| {
            // server-paths: a stat of the configured grant itself, whose parent is the operator's.
            let meta = std::fs::metadata(grant).ok()?;
            let mode = meta.mode();
            let writable = (meta.uid() == id && mode & 0o200 != 0) || (meta.gid() == id && mode & 0o020 != 0) || mode & 0o002 != 0;
            (!writable).then(|| {
                let fix = format!("chown {id} {} (or chgrp {id} and g+w)", grant.display());
                (grant.clone(), fix)
            })
        })
        .collect()
}

/// A stdio server's network as it will run: its mode and the hosts its proxy reaches, with why.
pub fn effective_network(spec: &crate::config::StdioSpec) -> egress::Route {
    confinement::egress(spec)
}

/// Timeouts and limits that apply to one server's sessions.
#[derive(Clone)]
pub struct SessionSettings {
    pub request_timeout: Duration,
    pub max_message_bytes: usize,
    /// How long each step of the shutdown sequence may take.
    pub shutdown_grace: Duration,
    /// Told about every process group, so that none outlives a killed daemon.
    pub reaper: Arc<reaper::Reaper>,
    /// An OAuth server's authorization, shared by all its sessions.
    pub authorizer: Option<Arc<oauth::authorizer::Authorizer>>,
    /// `mcp.client.operation.duration`: where each request's duration goes.
    pub operations: opentelemetry::metrics::Histogram<f64>,
    /// What a proxied stdio server's way out let through and refused.
    pub egress: Arc<egress::EgressStats>,
}

/// The OAuth authorizer of an HTTP server configured with an OAuth grant; `None` otherwise.
///
/// # Errors
/// The server's TLS settings or private key cannot be used.
pub fn authorizer_for(
    server: &Arc<str>,
    spec: &ServerSpec,
    interaction: oauth::authorizer::Interaction,
    metrics: Option<crate::telemetry::metrics::Metrics>,
) -> Result<Option<Arc<oauth::authorizer::Authorizer>>, UpstreamError> {
    let Transport::Http(http_spec) = &spec.transport else { return Ok(None) };
    let Some(crate::config::auth::AuthSpec::OAuth(oauth_spec)) = &http_spec.auth else { return Ok(None) };
    let web = oauth::flow::Web::new(web::client(http_spec, spec.request_timeout)?, spec.request_timeout);
    oauth::authorizer::Authorizer::new(server.clone(), &http_spec.url, oauth_spec, web, interaction, metrics)
        .map(|authorizer| Some(Arc::new(authorizer)))
        .map_err(|error| UpstreamError::AuthRequired(format!("the private key {error}")))
}

/// An initialized session that the supervisor owns: the handle plus the process and tasks behind it.
pub struct Connection {
    handle: SessionHandle,
    hello: ServerHello,
    endpoint: Endpoint,
    shutdown_grace: Duration,
}

/// How a session's server ended.
pub struct Ended {
    /// A stdio child's exit status.
    pub status: Option<ExitStatus>,
    /// What its sandbox reported: the limit that stopped it.
    pub sandbox: Option<crate::sandbox::Report>,
    /// A stdio child's last stderr lines (redacted, bounded).
    pub stderr: Vec<String>,
}

impl Ended {
    /// How it ended and what it said, for an operator: "exited with status 1; its last stderr
    /// lines: «…»; hint: …".
    pub fn explain(&self) -> String {
        exit::joined(exit::status_text(self.status), self.said(None))
    }

    /// What it said on stderr and the hint that points to; `launcher`'s hint (a package
    /// launcher without network, which often says nothing before it is given up on) where its
    /// words point to nothing else. Empty when there is nothing to say.
    fn said(&self, launcher: Option<String>) -> String {
        let said = exit::explain_stderr(&self.stderr);
        match launcher.filter(|_| exit::hint(&self.stderr).is_none()) {
            Some(launcher) => exit::joined(said, launcher),
            None => said,
        }
    }
}

/// What is behind a session.
enum Endpoint {
    Stdio { process: Box<stdio::ChildProcess>, tasks: session::SessionTasks },
    Http(http::HttpLink),
}

/// Starts the server and runs the legacy handshake: `initialize`, version check,
/// `notifications/initialized`.
///
/// # Errors
/// A spawn failure, a timeout, or a handshake the server failed; the process is stopped first.
pub async fn connect(
    server: &Arc<str>,
    spec: &ServerSpec,
    settings: &SessionSettings,
    era_hint: Option<Era>,
) -> Result<Connection, UpstreamError> {
    match &spec.transport {
        Transport::Stdio(stdio_spec) => {
            // Refusals by its way out from here on are this start's (a registry's names its fix).
            let refused_before = settings.egress.denied.load(std::sync::atomic::Ordering::Relaxed);
            let (process, stdout, stdin) = stdio::spawn(server, stdio_spec, settings.reaper.clone(), settings.egress.clone())?;
            let observed = session::Observed { wire: Wire::pipe(), operations: settings.operations.clone() };
            let (handle, tasks) = session::start(server.clone(), observed, stdout, stdin, settings.max_message_bytes);
            let era = probe_for(spec.protocol, era_hint);
            // A legacy server may complain on stderr about the probe: that stays at DEBUG.
            process.quiet_stderr(era == Probe::Optional);
            let hello = match discover(&handle, settings, era).await {
                Ok(Some(hello)) => Ok(hello),
                Ok(None) => match handshake(&handle, settings, |_| {}).await {
                    // A server slow to start (a launcher fetching it) read the probe after it
                    // was given up on and took the 2026-07-28 protocol: ask it again.
                    Err(UpstreamError::Rpc(error)) if error.code == modern::UNSUPPORTED_VERSION && era == Probe::Optional => {
                        tracing::debug!(server = %server, "the server took the 2026-07-28 protocol after the probe's wait; discovering again");
                        discover(&handle, settings, Probe::Required).await.and_then(|hello| {
                            hello.ok_or_else(|| UpstreamError::Protocol("server/discover gave no answer on the second try".into()))
                        })
                    }
                    other => other,
                },
                Err(error) => Err(error),
            };
            process.quiet_stderr(false);
            match hello {
                Ok(hello) => Ok(Connection {
                    handle,
                    hello,
                    endpoint: Endpoint::Stdio { process: Box::new(process), tasks },
                    shutdown_grace: settings.shutdown_grace,
                }),
                Err(error) => {
                    tasks.close_input();
                    let mut ended = process.shutdown(settings.shutdown_grace).await;
                    tasks.join(settings.shutdown_grace).await;
                    // A sandbox that could not be built explains the silence better than the
                    // silence; else the server's own words do.
                    Err(match ended.sandbox.take() {
                        Some(report) => SandboxError::Reported(report).into(),
                        None => {
                            let refusal = settings.egress.refusal_since(refused_before);
                            explained(error, &ended, launcher_warning(stdio_spec), refusal)
                        }
                    })
                }
            }
        }
        Transport::Http(http_spec) => {
            let observed = session::Observed { wire: Wire::of_url(&http_spec.url), operations: settings.operations.clone() };
            let (handle, link) = http::start(
                server,
                observed,
                http_spec,
                settings.max_message_bytes,
                settings.request_timeout,
                settings.authorizer.clone(),
            )?;
            let probe = probe_for(spec.protocol, era_hint);
            if probe != Probe::Skip {
                link.modern(modern::VERSION);
            }
            let hello = match discover(&handle, settings, probe).await {
                Ok(Some(hello)) => Ok(hello),
                Ok(None) => {
                    link.legacy();
                    handshake(&handle, settings, |hello| link.initialized(&hello.protocol_version)).await
                }
                Err(error) => Err(error),
            };
            match hello {
                Ok(hello) => Ok(Connection { handle, hello, endpoint: Endpoint::Http(link), shutdown_grace: settings.shutdown_grace }),
                Err(error) => {
                    let error = match link.failure() {
                        Some(http::Failure::Auth(status)) => UpstreamError::AuthFailed(status),
                        Some(http::Failure::AuthRequired(message)) => UpstreamError::AuthRequired(message),
                        Some(http::Failure::NotStreamableHttp(_)) => UpstreamError::UnsupportedTransport(
                            "not a Streamable HTTP endpoint: the old HTTP+SSE transport (2024-11-05) is not supported",
                        ),
                        _ => error,
                    };
                    link.shutdown(settings.shutdown_grace).await;
                    Err(error)
                }
            }
        }
    }
}

/// A failure to start a stdio server, with how it ended and what it said: a server whose output
/// ended went away by itself, so its exit is the news.
fn explained(error: UpstreamError, ended: &Ended, launcher: Option<String>, refusal: Option<String>) -> UpstreamError {
    // A refusal seen is the cause named: the static hint would only say it again.
    let said = match refusal {
        Some(refusal) => exit::joined(ended.said(None), refusal),
        None => ended.said(launcher),
    };
    match error {
        UpstreamError::Closed => {
            UpstreamError::Exited(exit::joined(format!("{} before it answered", exit::status_text(ended.status)), said))
        }
        error if said.is_empty() => error,
        error => UpstreamError::Explained { error: Box::new(error), said },
    }
}

/// What the configuration and the remembered era say about probing.
fn probe_for(choice: ProtocolChoice, era_hint: Option<Era>) -> Probe {
    match (choice, era_hint) {
        (ProtocolChoice::Legacy, _) | (ProtocolChoice::Auto, Some(Era::Legacy)) => Probe::Skip,
        (ProtocolChoice::Modern, _) => Probe::Required,
        (ProtocolChoice::Auto, _) => Probe::Optional,
    }
}

/// How much a connect relies on `server/discover`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// The server is known (or configured) to be legacy.
    Skip,
    /// Try it; any non-modern error or no answer means legacy.
    Optional,
    /// The server is configured as modern: no fallback.
    Required,
}

/// The probe bound when the era is unknown: a legacy server that ignores unknown methods costs
/// this once, after which its era is remembered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The modern-era start: `server/discover` with the request `_meta`, one retry on -32022 with
/// a version the server lists. `Ok(None)`: fall back to `initialize`.
async fn discover(handle: &SessionHandle, settings: &SessionSettings, probe: Probe) -> Result<Option<ServerHello>, UpstreamError> {
    if probe == Probe::Skip {
        return Ok(None);
    }
    let timeout = if probe == Probe::Required { settings.request_timeout } else { settings.request_timeout.min(PROBE_TIMEOUT) };
    let mut version = modern::VERSION.to_owned();
    for _attempt in 0..2 {
        let params = modern::with_meta(None, &modern::request_meta(&version))
            .ok_or_else(|| UpstreamError::Protocol("cannot build discover params".into()))?;
        let mut operation = handle.operation(modern::METHOD_DISCOVER, None);
        operation.protocol_version(&version);
        let result = handle.request(modern::METHOD_DISCOVER, Some(&params), timeout, true).instrument(operation.span().clone()).await;
        session::judge(&mut operation, &result);
        drop(operation);
        match result {
            Ok(result) => match modern::check_discover_result(&result) {
                Ok(hello) => {
                    handle.agreed_version(&hello.protocol_version);
                    handle.set_request_meta(modern::request_meta(&hello.protocol_version));
                    return Ok(Some(hello));
                }
                // Not a DiscoverResult: a legacy server that answers unknown methods loosely.
                Err(error) if probe == Probe::Optional => {
                    tracing::debug!(%error, "server/discover gave no DiscoverResult; speaking the legacy protocol");
                    return Ok(None);
                }
                Err(error) => return Err(error.into()),
            },
            Err(UpstreamError::Rpc(error)) if error.code == modern::UNSUPPORTED_VERSION => {
                let supported = modern::supported_versions(&error);
                // Retry (once: the loop is bounded) with a listed version toolhost speaks.
                match supported.iter().find(|v| v.as_str() == modern::VERSION) {
                    Some(known) => version = known.clone(),
                    None => return Err(UpstreamError::Handshake(HandshakeError::UnsupportedVersion(supported.join(", ")))),
                }
            }
            Err(UpstreamError::Rpc(error)) if modern::is_modern_error(&error) => {
                return Err(UpstreamError::Protocol(format!("server/discover refused: {} ({})", error.message, error.code)));
            }
            Err(error) if probe == Probe::Required => return Err(error),
            Err(error) => {
                tracing::debug!(%error, "server/discover failed; speaking the legacy protocol");
                return Ok(None);
            }
        }
    }
    Err(UpstreamError::Protocol("server/discover kept refusing the protocol version".into()))
}

/// `initialize`, the version check, then `notifications/initialized`. `on_hello` runs between
/// the last two (HTTP sets its protocol-version header there).
async fn handshake(
    handle: &SessionHandle,
    settings: &SessionSettings,
    on_hello: impl FnOnce(&ServerHello),
) -> Result<ServerHello, UpstreamError> {
    let params =
        serde_json::value::RawValue::from_string(lifecycle::initialize_params()).map_err(|err| UpstreamError::Protocol(err.to_string()))?;
    // `initialize` must not be cancelled (lifecycle spec), so a timeout just ends the session.
    let mut operation = handle.operation(lifecycle::METHOD_INITIALIZE, None);
    let result = handle
        .request(lifecycle::METHOD_INITIALIZE, Some(&params), settings.request_timeout, false)
        .instrument(operation.span().clone())
        .await;
    session::judge(&mut operation, &result);
    let hello = lifecycle::check_initialize_result(&result?);
    if let Ok(hello) = &hello {
        operation.protocol_version(&hello.protocol_version);
        handle.agreed_version(&hello.protocol_version);
    }
    drop(operation);
    let hello = hello?;
    on_hello(&hello);
    handle.notify(lifecycle::METHOD_INITIALIZED, None)?;
    Ok(hello)
}

// === impl Connection ===

impl Connection {
    pub fn handle(&self) -> &SessionHandle {
        &self.handle
    }

    pub fn hello(&self) -> &ServerHello {
        &self.hello
    }

    /// Why the server ended the session, when it said so (HTTP 401/403 or a forgotten session).
    pub fn ended_by_server(&self) -> Option<String> {
        match &self.endpoint {
            Endpoint::Http(link) => link.failure().map(|failure| match failure {
                http::Failure::Auth(status) => format!("the server refused the credentials (HTTP {status})"),
                http::Failure::AuthRequired(message) => format!("authorization required: {message}"),
                http::Failure::SessionExpired => "the server forgot the session (HTTP 404)".to_owned(),
                http::Failure::NotStreamableHttp(status) => format!("not a Streamable HTTP endpoint (HTTP {status} to initialize)"),
            }),
            Endpoint::Stdio { .. } => None,
        }
    }

    /// The server ended the session because toolhost's OAuth authorization needs an operator.
    pub fn needs_authorization(&self) -> bool {
        matches!(&self.endpoint, Endpoint::Http(link) if matches!(link.failure(), Some(http::Failure::AuthRequired(_))))
    }

    /// Ends the session: the stdio shutdown sequence (and reaping the child), or the HTTP
    /// session's DELETE.
    pub async fn shutdown(self) -> Ended {
        match self.endpoint {
            Endpoint::Stdio { process, tasks } => {
                tasks.close_input();
                let ended = process.shutdown(self.shutdown_grace).await;
                tasks.join(self.shutdown_grace).await;
                ended
            }
            Endpoint::Http(link) => {
                link.shutdown(self.shutdown_grace).await;
                Ended { status: None, sandbox: None, stderr: Vec::new() }
            }
        }
    }
}
