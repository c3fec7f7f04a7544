//! The daemon's configuration: one typed tree, loaded from a TOML file or a desktop client's
//! `mcpServers` JSON file, validated before anything starts.
//!
//! Relative paths (the store, a server's `cwd`, a `command` containing a `/`) are resolved
//! against the configuration file's directory, never against the current directory.

mod access;
mod approvals;
mod audit;
pub mod auth;
mod console;
mod daemon;
mod fleet;
mod listeners;
mod mcp;
pub mod places;
mod raw;
pub mod registry;
pub mod sandbox;
mod server;
mod tasks;
mod value;
pub use approvals::ApprovalsConfig;
pub use audit::{AuditConfig, AuditExport, KeyPlace, SyslogTls};
pub use console::ConsoleConfig;
pub use daemon::{DaemonConfig, GrpcConfig, StoreConfig, TelemetryConfig};
pub use fleet::FleetConfig;
pub use listeners::{ListenAddr, Listener, SocketAccess, SocketGroup, TlsFiles};
pub use mcp::{McpConfig, ProfileConfig};
pub use tasks::TasksConfig;
pub use value::ValueError;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use listeners::{OneOrMany, RawListen};
use raw::{RawConfig, RawDesktopFile};
use server::{RawServer, ServerEntry};

use crate::secrets::Resolved;

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
    pub store: StoreConfig,
    pub grpc: GrpcConfig,
    pub mcp: McpConfig,
    pub daemon: DaemonConfig,
    pub tasks: TasksConfig,
    pub approvals: ApprovalsConfig,
    pub audit: AuditConfig,
    pub console: ConsoleConfig,
    pub telemetry: TelemetryConfig,
    /// Servers by name, in name order.
    pub servers: BTreeMap<String, ServerSpec>,
    pub access: AccessConfig,
    pub fleet: Option<FleetConfig>,
    /// The daemon's private places (its directories, the store, the sockets, this file, every
    /// secret file it names): no sandboxed server sees them.
    pub private: Vec<PathBuf>,
}

/// Who may see and call what (`[access]`); see `access` for how it is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessConfig {
    /// `[access]` was written. Without it the Unix socket admits its owner's uid and root as
    /// operators, and TCP admits nobody.
    pub configured: bool,
    /// What a caller that matches no agent entry gets: everything (`"allow"`), or nothing.
    pub default_allow: bool,
    pub agents: Vec<AgentConfig>,
    /// Audit records older than this are dropped.
    pub audit_retention: Duration,
    /// At most this many audit records are kept.
    pub audit_max_records: u64,
    /// Globs whose calls wait for approval whoever calls: each server's `approve`, over that
    /// server's own tool names.
    pub approve_everyone: Vec<ServerGlob>,
}

/// A glob of a server's own list (`[servers.NAME] approve`): over that server's tools only, by
/// the names it gives them (see `catalog::names::ToolGlob`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGlob {
    pub server: String,
    pub pattern: String,
}

/// One `[[access.agents]]` entry. A caller matches it by any of its kernel identities (uid, gid,
/// systemd unit) or by a bearer token.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub name: String,
    /// `uids` and `users`, resolved.
    pub uids: Vec<u32>,
    /// `gids` and `groups`, resolved; a caller's primary and supplementary groups count.
    pub gids: Vec<u32>,
    /// Globs over the caller's systemd unit (`research-bot.service`).
    pub units: Vec<String>,
    pub tokens: Vec<Resolved>,
    /// Globs over a TLS client certificate's subject (RFC 4514, e.g. `CN=bot,O=Example`).
    pub subjects: Vec<String>,
    /// Globs over qualified tool names; empty allows nothing. `deny` wins.
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// May use the operator RPCs (refresh, restart, audit) and gets real errors for tools it
    /// may not use, instead of "unknown tool".
    pub admin: bool,
    /// Calls in flight at once, across both doors and every server.
    pub concurrency: u32,
    /// Calls started per period, with a burst; `None`: no rate limit.
    pub rate: Option<RateLimit>,
    /// Calls per fixed window to the tools some globs match, counted in the store.
    pub quotas: Vec<Quota>,
    /// Globs over qualified names whose calls wait for a person's approval.
    pub approve: Vec<String>,
}

/// `quota = { tools = ["billing__*"], calls = 10, per = "1d" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    pub tools: Vec<String>,
    pub calls: u32,
    pub per: Duration,
}

/// A server's integrity policy, from its configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntegrityPolicy {
    /// `changes = "hold"`: a definition that differs from the approved one is held.
    pub hold_changes: bool,
    /// `new_tools = "hold"`: a tool never approved is held (under both, first sight of a server
    /// holds everything until approved).
    pub hold_new: bool,
    /// `pins = { TOOL = "sha256:…" }`: the only definition of that tool that may be called.
    pub pins: std::collections::BTreeMap<String, String>,
}

/// `rate = { calls = 10, per = "1s", burst = 20 }`: on average `calls` per `per`, at most
/// `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub calls: u32,
    pub per: Duration,
    pub burst: u32,
}

/// An agent entry's calls in flight when it sets no `concurrency`.
pub const DEFAULT_CONCURRENCY: u32 = 1024;

/// What the audit trail keeps of a call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditArguments {
    None,
    /// Their SHA-256.
    Hash,
    /// The arguments themselves (secrets scrubbed).
    Full,
}

/// One MCP server and toolhost's settings for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub transport: Transport,
    pub enabled: bool,
    /// Timeout of each request (initialize, each tools/list page, tools/call by default).
    pub request_timeout: Duration,
    /// Wall-clock bound on one complete enumeration.
    pub enumeration_timeout: Duration,
    pub limits: EnumerationLimits,
    /// Longest single JSON-RPC message accepted from the server.
    pub max_message_bytes: usize,
    /// How long each step of the stdio shutdown sequence may take.
    pub shutdown_grace: Duration,
    /// Calls in flight to this server at once; more wait in a queue.
    pub max_concurrent_calls: u32,
    pub restart: RestartPolicy,
    /// Which MCP era to speak: detect it (`auto`), or only one.
    pub protocol: ProtocolChoice,
    pub audit_arguments: AuditArguments,
    /// `changes`, `new_tools` and `pins`: which definitions may be called.
    pub integrity: IntegrityPolicy,
    /// Globs over this server's tool names whose calls wait for a person's approval.
    pub approve: Vec<String>,
    /// `fleet_identity`, when the operator names it.
    pub fleet_identity: Option<String>,
}

impl ServerSpec {
    /// What makes this server the same server on every host of a fleet: `fleet_identity` if
    /// set, else its URL (without user information or query), else its command and arguments
    /// (a package's version is in them, as configured).
    pub fn fleet_identity(&self) -> String {
        if let Some(identity) = &self.fleet_identity {
            return identity.clone();
        }
        match &self.transport {
            Transport::Http(http) => {
                let url = http.url.split(['?', '#']).next().unwrap_or_default();
                let url = match url.split_once("://") {
                    Some((scheme, rest)) => {
                        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
                        let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
                        format!("{scheme}://{host}/{path}")
                    }
                    None => url.to_owned(),
                };
                format!("url:{url}")
            }
            Transport::Stdio(stdio) => {
                let mut identity = format!("stdio:{}", stdio.command.display());
                for arg in &stdio.args {
                    identity.push(' ');
                    identity.push_str(arg);
                }
                identity
            }
        }
    }

    /// What identifies the credential toolhost presents to this server, as a SHA-256 (never the
    /// secret): the URL, headers and `auth` of an HTTP server, the command, arguments and environment
    /// of a stdio one. A listing the server marked private belongs to it.
    pub fn credential_fingerprint(&self, server: &str) -> String {
        let mut material = format!("toolhost credential\0{server}\0");
        match &self.transport {
            Transport::Http(http) => {
                material.push_str(&http.url);
                for (name, value) in &http.headers {
                    material.push_str(&format!("\0{}\0{}", name.to_ascii_lowercase(), value.expose()));
                }
                // OAuth: the client toolhost is, and the login it holds (its token file).
                match &http.auth {
                    Some(auth::AuthSpec::Bearer(token)) => material.push_str(&format!("\0bearer\0{}", token.expose())),
                    Some(auth::AuthSpec::OAuth(oauth)) => {
                        let secret = oauth.client_secret.as_ref().or(oauth.private_key.as_ref()).map(Resolved::expose);
                        material.push_str(&format!(
                            "\0oauth\0{:?}\0{}\0{}\0{}\0{}\0{}",
                            oauth.grant,
                            oauth.client_id.as_deref().unwrap_or_default(),
                            secret.unwrap_or_default(),
                            oauth.client_metadata_url.as_deref().unwrap_or_default(),
                            oauth.scopes.as_deref().unwrap_or_default(),
                            oauth.token_file.display()
                        ));
                    }
                    None => {}
                }
            }
            Transport::Stdio(stdio) => {
                material.push_str(&stdio.command.display().to_string());
                for arg in &stdio.args {
                    material.push_str(&format!("\0{arg}"));
                }
                for (name, value) in &stdio.env {
                    material.push_str(&format!("\0{name}\0{}", value.expose()));
                }
            }
        }
        crate::digest::sha256_hex(material.as_bytes())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolChoice {
    /// Probe with `server/discover`, fall back to `initialize`; remember what was found.
    Auto,
    Legacy,
    Modern,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio(StdioSpec),
    Http(HttpSpec),
}

impl Transport {
    /// `"stdio"` or `"http"`, as ListServers and the spans name it.
    pub fn label(&self) -> &'static str {
        match self {
            Transport::Stdio(_) => "stdio",
            Transport::Http(_) => "http",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct StdioSpec {
    pub command: PathBuf,
    pub args: Vec<String>,
    /// The server's whole environment is [`BASE_ENV`] and `inherit_env` taken from toolhost's,
    /// plus these (whose `${…}` references are resolved, and secret).
    pub env: BTreeMap<String, Resolved>,
    pub inherit_env: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub sandbox: sandbox::SandboxSpec,
}

/// What every stdio server inherits from toolhost's environment: enough to find programs, speak
/// the locale and trust what the host trusts (a private CA, as behind a TLS-inspecting proxy,
/// through the variables each runtime reads: OpenSSL, Node.js, Python's requests and pip, curl),
/// nothing that could be another server's credential.
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "TERM",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
];

/// Where package launchers (`npx`, `uvx`, `pip`) fetch from and through, as the operator's own
/// clients are set: inherited only when the value carries no credentials (a URL with a
/// `user:password@`), since a server is untrusted code; one that does is inherited only by
/// name in `inherit_env`.
pub const LAUNCHER_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "NPM_CONFIG_REGISTRY",
    "npm_config_registry",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
];

/// Whether an environment value may carry a credential: a URL's `user:password@` part.
pub fn carries_credentials(value: &str) -> bool {
    value
        .split([',', ' '])
        .any(|part| part.split_once("://").is_some_and(|(_, rest)| rest.split('/').next().is_some_and(|authority| authority.contains('@'))))
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    pub url: String,
    /// `${…}` references resolved at load; secret values never print (see [`crate::secrets`]).
    pub headers: BTreeMap<String, Resolved>,
    /// PEM certificates to trust instead of the public roots (a private CA, a self-signed server).
    pub ca_file: Option<PathBuf>,
    /// `auth`: a bearer token, or an OAuth grant toolhost runs itself.
    pub auth: Option<auth::AuthSpec>,
}

/// Bounds on one enumeration; exceeding any fails it (it is never committed as complete).
#[derive(Debug, Clone, PartialEq)]
pub struct EnumerationLimits {
    pub max_pages: u32,
    pub max_tools: u32,
    pub max_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// A session that lived this long resets the backoff.
    pub stable_after: Duration,
    /// Consecutive failed starts after which the server is shown as crash-looping.
    pub crash_loop_after: u32,
}

/// A configuration problem: which file, which key, what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}{problem}", file.display(), key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default())]
pub struct ConfigError {
    pub file: PathBuf,
    pub key: Option<String>,
    pub problem: String,
}

/// Server names become part of agent-facing tool names, so they are kept short and plain.
pub const MAX_SERVER_NAME_LEN: usize = 32;

// === impl Config ===

impl Config {
    /// Where each sandboxed stdio server's home is kept: `servers/NAME/` beside the store (in
    /// the state directory unless `[store] path` puts the store elsewhere).
    pub fn homes(&self) -> PathBuf {
        self.store.path.parent().unwrap_or(Path::new(".")).join("servers")
    }

    /// Reads and validates a configuration file: TOML, or JSON with an `mcpServers` object.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, the key and the problem.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text = std::fs::read_to_string(&absolute).map_err(|err| ConfigError {
            file: absolute.clone(),
            key: None,
            problem: format!("cannot read the file: {err}"),
        })?;
        Config::parse(&absolute, &text)
    }

    /// Parses configuration text as if it had been read from `file`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, the key and the problem.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        // An empty file (or one of comments only) is what a truncated write or a wrong path
        // leaves behind; taking it as "no servers" would stop every server on a reload.
        let has_content = text.lines().map(str::trim).any(|line| !line.is_empty() && !line.starts_with('#'));
        if !has_content {
            return Err(ConfigError {
                file: file.to_path_buf(),
                key: None,
                problem: "the file is empty; refusing it rather than stopping every server".to_owned(),
            });
        }
        let is_json = file.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("json")) || text.trim_start().starts_with('{');
        let raw = if is_json { parse_json(file, text)? } else { parse_toml(file, text)? };
        let mut config = validate(file, raw)?;
        config.private = sandbox::private_places(&config, text);
        let homes = config.homes();
        let writable = config.servers.values().filter_map(|server| match &server.transport {
            Transport::Stdio(stdio) if stdio.sandbox.enabled => Some(
                stdio.sandbox.write.iter().chain(stdio.sandbox.data.as_ref().map(|data| &data.path)).map(|path| sandbox::lexical(path)),
            ),
            _ => None,
        });
        let writable = sandbox::ServerWritable(writable.flatten().chain([sandbox::lexical(&homes)]).collect());
        sandbox::check_data_places(&config).map_err(|(key, problem)| ConfigError { file: file.to_path_buf(), key: Some(key), problem })?;
        for (name, server) in &mut config.servers {
            if let Transport::Stdio(stdio) = &mut server.transport {
                stdio.sandbox.hidden.clone_from(&config.private);
                stdio.sandbox.home = Some(homes.join(name));
                stdio.sandbox.server_writable = writable.clone();
            }
        }
        Ok(config)
    }
}

fn parse_toml(file: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    let table: toml::Table = toml::from_str(text).map_err(|err| {
        let (line, column) = err.span().map_or((0, 0), |span| line_column(text, span.start));
        ConfigError { file: file.to_path_buf(), key: None, problem: format!("line {line}, column {column}: {}", err.message()) }
    })?;
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|err| path_error(file, &err))
}

fn parse_json(file: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let desktop: RawDesktopFile = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| path_error(file, &err))?;
    let servers = desktop.mcp_servers.into_iter().map(|(name, server)| (name, RawServer::from(server))).collect();
    Ok(RawConfig { servers, ..RawConfig::default() })
}

fn path_error<E: std::fmt::Display>(file: &Path, err: &serde_path_to_error::Error<E>) -> ConfigError {
    let path = err.path().to_string();
    ConfigError {
        file: file.to_path_buf(),
        key: (path != ".").then_some(path),
        // Some deserializers append "in `path`" on further lines; the key already says it.
        problem: err.inner().to_string().lines().next().unwrap_or_default().to_owned(),
    }
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// Turns the raw shapes into the typed tree, or names the first problem found.
fn validate(file: &Path, raw: RawConfig) -> Result<Config, ConfigError> {
    let base = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    let error = |key: String, problem: String| ConfigError { file: file.to_path_buf(), key: Some(key), problem };
    let section = |name: &'static str| move |(key, problem): KeyProblem| error(format!("{name}.{key}"), problem);

    let store = StoreConfig::try_from((base.as_path(), &raw.store)).map_err(section("store"))?;
    // Nothing said about listeners: the MCP endpoint too listens where its user can reach it.
    let no_listeners = raw.grpc.listen.is_none() && raw.mcp.listen.is_none();
    let grpc = GrpcConfig::try_from((base.as_path(), raw.grpc)).map_err(section("grpc"))?;
    let daemon = DaemonConfig::try_from(&raw.daemon).map_err(section("daemon"))?;
    let telemetry = TelemetryConfig::try_from(raw.telemetry).map_err(section("telemetry"))?;

    let mut servers = BTreeMap::new();
    for (name, server) in raw.servers {
        server::check_name(&name).map_err(|problem| error(format!("servers.{name}"), problem.to_string()))?;
        let state_dir = store.path.parent().unwrap_or(Path::new("/"));
        let entry = ServerEntry { base: &base, state_dir, name: &name, raw: server };
        let spec = ServerSpec::try_from(entry).map_err(|(key, problem)| error(format!("servers.{name}.{key}"), problem))?;
        servers.insert(name, spec);
    }

    let access = AccessConfig::try_from((raw.access, &servers)).map_err(section("access"))?;
    let fleet = raw.fleet.map(FleetConfig::try_from).transpose().map_err(section("fleet"))?;
    let mut raw_mcp = raw.mcp;
    if no_listeners {
        raw_mcp.listen = Some(OneOrMany::One(default_socket(places::MCP_SOCKET)));
    }
    let mcp = McpConfig::try_from((base.as_path(), raw_mcp, &servers))
        .map_err(|(key, problem)| error(format!("mcp.{key}").trim_end_matches('.').to_owned(), problem))?;
    // Port 0 picks a fresh port for each listener: no clash.
    let fixed = |addr: &ListenAddr| !matches!(addr, ListenAddr::Tcp(socket) if socket.port() == 0);
    if let Some(shared) =
        mcp.listen.iter().find(|listener| fixed(&listener.addr) && grpc.listen.iter().any(|grpc| grpc.addr == listener.addr))
    {
        return Err(error(
            "mcp.listen".into(),
            format!("{:?} is also a [grpc] listener; give the MCP endpoint its own address", shared.addr),
        ));
    }
    let console = ConsoleConfig::try_from((base.as_path(), raw.console)).map_err(section("console"))?;
    if let Some(shared) = console.listen.iter().find(|listener| {
        fixed(&listener.addr)
            && (grpc.listen.iter().any(|grpc| grpc.addr == listener.addr) || mcp.listen.iter().any(|mcp| mcp.addr == listener.addr))
    }) {
        return Err(error(
            "console.listen".into(),
            format!("{:?} is also a [grpc] or [mcp] listener; give the console its own address", shared.addr),
        ));
    }
    Ok(Config {
        source: file.to_path_buf(),
        store,
        grpc,
        mcp,
        daemon,
        console,
        tasks: TasksConfig::try_from(&raw.tasks).map_err(section("tasks"))?,
        approvals: ApprovalsConfig::try_from(&raw.approvals).map_err(section("approvals"))?,
        audit: AuditConfig::try_from(&raw.audit).map_err(section("audit"))?,
        telemetry,
        servers,
        access,
        fleet,
        private: Vec::new(),
    })
}

/// Where a listener goes when the file names none: a Unix socket in the runtime directory.
fn default_socket(name: &str) -> RawListen {
    RawListen::Address(format!("unix:{}", places::runtime_dir().join(name).display()))
}

type KeyProblem = (String, String);

fn positive<T: PartialEq + From<u8> + Copy>(value: Option<T>, default: T) -> Result<T, ValueError> {
    match value {
        Some(v) if v == T::from(0) => Err(ValueError::Zero),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn optional_duration(text: Option<&str>, default: Duration, max: Duration) -> Result<Duration, DurationError> {
    match text {
        None => Ok(default),
        Some(text) => parse_duration(text, max),
    }
}

/// Parses a positive duration such as `250ms`, `30s`, `5m`, `1h` or `1h 30m` (humantime's
/// syntax), no longer than `max`: every duration toolhost adds to a clock is bounded here.
///
/// # Errors
/// A message saying what is accepted, or the limit that was exceeded.
pub fn parse_duration(text: &str, max: Duration) -> Result<Duration, DurationError> {
    let text = text.trim();
    let duration = humantime::parse_duration(text).map_err(|source| DurationError::NotADuration { text: text.to_owned(), source })?;
    if duration.is_zero() {
        return Err(DurationError::Zero);
    }
    if duration > max {
        return Err(DurationError::TooLong { text: text.to_owned(), max });
    }
    Ok(duration)
}

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} is not a duration like \"250ms\", \"30s\", \"5m\" or \"1h\" ({source})")]
    NotADuration { text: String, source: humantime::DurationError },
    #[error("must be greater than 0")]
    Zero,
    #[error("{text:?} is longer than the limit of {}", humantime::format_duration(*max))]
    TooLong { text: String, max: Duration },
}
