//! The operator's command line, a gRPC client of the daemon's own API.
//!
//! Exit codes: 0 success, 1 the tool reported an error (`isError`) or a login failed, 2 a usage error, 3 an RPC
//! error (the status is printed), 64 a bad configuration file.

pub mod bridge;
pub mod check;
pub mod conformance;
pub mod login;
mod output;

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use crate::api::pb;
use crate::api::pb::tool_host_client::ToolHostClient;
use crate::config::{Config, ListenAddr};

pub const EXIT_TOOL_ERROR: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_RPC_ERROR: u8 = 3;
pub const EXIT_CONFIG: u8 = 64;

/// What a client command should do.
#[derive(Debug, Clone)]
pub enum ClientCommand {
    Servers,
    Tools {
        servers: Vec<String>,
        name_contains: Option<String>,
    },
    Call {
        name: String,
        args: Option<String>,
        hash: Option<String>,
        timeout_ms: Option<u64>,
        /// Answering an input_required outcome: its continuation token and the responses (JSON).
        continuation: Option<String>,
        responses: Option<String>,
    },
    Watch {
        from_revision: u64,
        servers: Vec<String>,
    },
    History {
        server: String,
        limit: u32,
    },
    Refresh {
        server: String,
    },
    Restart {
        server: String,
    },
    /// An OAuth logout done by the daemon.
    Logout {
        server: String,
    },
    /// An OAuth login done by the daemon, with this process on the browser's side.
    Login {
        server: String,
        scope: Option<String>,
        /// Read the redirected URL from stdin instead of listening for it.
        paste: bool,
    },
    Whoami,
    Audit {
        since: Option<String>,
        agent: Option<String>,
        limit: u32,
        fleet: bool,
    },
    Fleet,
    Search {
        query: String,
        servers: Vec<String>,
        limit: u32,
    },
    Approve {
        server: String,
        tools: Vec<String>,
        all: bool,
        hash: Option<String>,
    },
    Diff {
        server: String,
        tool: String,
    },
}

/// Where the daemon is and how to print.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// `unix:PATH` or `host:port`; when absent, see [`run`]'s address order.
    pub addr: Option<String>,
    pub config: Option<PathBuf>,
    pub json: bool,
    /// A bearer token, sent as `authorization: Bearer …`.
    pub token: Option<String>,
}

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot reach toolhost at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("{}", describe_status(.0))]
    Rpc(#[from] tonic::Status),
    /// An RPC error and what to do about it.
    #[error("{}\n{hint}", describe_status(status))]
    Hinted { status: Box<tonic::Status>, hint: String },
    #[error("the tool reported an error")]
    ToolError,
    #[error("{0}")]
    Login(String),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Usage(_) => EXIT_USAGE,
            ClientError::Config(_) => EXIT_CONFIG,
            ClientError::Connect { .. } | ClientError::Rpc(_) | ClientError::Hinted { .. } | ClientError::Output(_) => EXIT_RPC_ERROR,
            ClientError::ToolError | ClientError::Login(_) => EXIT_TOOL_ERROR,
        }
    }

    /// The error as a `--json` caller's script reads it (on stdout, beside the message on stderr).
    pub fn json(&self) -> serde_json::Value {
        use tonic_types::StatusExt;
        let kind = match self {
            ClientError::Usage(_) => "usage",
            ClientError::Config(_) => "config",
            ClientError::Connect { .. } => "connect",
            ClientError::Rpc(_) | ClientError::Hinted { .. } => "rpc",
            ClientError::ToolError => "tool_error",
            ClientError::Login(_) => "login",
            ClientError::Output(_) => "output",
        };
        let mut error = serde_json::json!({"kind": kind, "message": self.to_string(), "exit_code": self.exit_code()});
        let status = match self {
            ClientError::Rpc(status) => Some(status),
            ClientError::Hinted { status, hint } => {
                error["hint"] = hint.clone().into();
                Some(&**status)
            }
            _ => None,
        };
        if let Some(status) = status {
            error["code"] = code_name(status.code()).into();
            error["message"] = status.message().into();
            if let Some(info) = status.get_details_error_info() {
                error["reason"] = info.reason.into();
                error["details"] = serde_json::json!(info.metadata);
            }
        }
        serde_json::json!({ "error": error })
    }
}

/// Runs one client command against the daemon.
///
/// # Errors
/// [`ClientError`], whose [`ClientError::exit_code`] tells the kinds apart.
pub async fn run(command: ClientCommand, options: ClientOptions) -> Result<(), ClientError> {
    let addr = resolve_addr(&options)?;
    let error = match execute(command, &options, &addr).await {
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    // A gRPC exchange that broke on a Unix socket may have met the MCP endpoint instead.
    let transport_failed = match &error {
        ClientError::Connect { .. } => true,
        ClientError::Rpc(status) => matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal),
        _ => false,
    };
    if let ListenAddr::Unix(path) = &addr
        && transport_failed
        && speaks_mcp(path).await
    {
        return Err(ClientError::Connect {
            addr: format!("unix:{}", path.display()),
            reason: "that is toolhost's MCP endpoint, not the gRPC API: point --addr at an address of [grpc] listen (or use --config)"
                .to_owned(),
        });
    }
    Err(match error {
        ClientError::Rpc(status) => match hint(&status, &addr) {
            Some(hint) => ClientError::Hinted { status: Box::new(status), hint },
            None => ClientError::Rpc(status),
        },
        other => other,
    })
}

/// Whether the socket at `path` answers a JSON-RPC `ping` line: toolhost's MCP endpoint.
async fn speaks_mcp(path: &Path) -> bool {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = UnixStream::connect(path).await.ok()?;
        stream.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n").await.ok()?;
        let mut line = String::new();
        tokio::io::BufReader::new(AsyncReadExt::take(stream, 64 * 1024)).read_line(&mut line).await.ok()?;
        let answer: serde_json::Value = serde_json::from_str(&line).ok()?;
        Some(answer.get("jsonrpc").is_some())
    };
    tokio::time::timeout(std::time::Duration::from_secs(2), probe).await.ok().flatten().unwrap_or(false)
}

async fn execute(command: ClientCommand, options: &ClientOptions, addr: &ListenAddr) -> Result<(), ClientError> {
    let token = match &options.token {
        Some(token) => {
            let mut value: tonic::metadata::MetadataValue<tonic::metadata::Ascii> = format!("Bearer {}", token.trim())
                .parse()
                .map_err(|_| ClientError::Usage("the token has characters a header cannot carry".to_owned()))?;
            value.set_sensitive(true);
            Some(value)
        }
        None => None,
    };
    let mut client = ToolHostClient::with_interceptor(connect(addr).await?, move |mut request: tonic::Request<()>| {
        if let Some(token) = &token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        Ok(request)
    });
    let mut out = output::Printer::new(options.json);
    match command {
        ClientCommand::Servers => {
            let response = client.list_servers(pb::ListServersRequest {}).await?.into_inner();
            out.servers(&response.servers, response.store.as_ref())?;
        }
        ClientCommand::Tools { servers, name_contains } => {
            let mut request = pb::ListToolsRequest {
                servers,
                name_contains: name_contains.unwrap_or_default(),
                with_definitions: options.json,
                ..Default::default()
            };
            let mut tools = Vec::new();
            loop {
                let response = client.list_tools(request.clone()).await?.into_inner();
                tools.extend(response.tools);
                if response.next_page_token.is_empty() {
                    break;
                }
                request.page_token = response.next_page_token;
            }
            out.tools(&tools)?;
        }
        ClientCommand::Call { name, args, hash, timeout_ms, continuation, responses } => {
            if let Some(args) = &args {
                match serde_json::from_str::<serde_json::Value>(args) {
                    Ok(value) if value.is_object() => {}
                    Ok(_) => return Err(ClientError::Usage("--args must be a JSON object, like '{\"path\": \"/tmp\"}'".to_owned())),
                    Err(error) => return Err(ClientError::Usage(format!("--args is not JSON: {error}"))),
                }
            }
            let wanted = name.clone();
            let (qualified_name, server, tool) = match name.split_once('/') {
                Some((server, tool)) => (String::new(), server.to_owned(), tool.to_owned()),
                None => (name, String::new(), String::new()),
            };
            let mut request = tonic::Request::new(pb::CallToolRequest {
                qualified_name,
                server,
                name: tool,
                arguments_json: args.unwrap_or_default(),
                expected_definition_hash: hash.unwrap_or_default(),
                expected_catalog_revision: 0,
                client_capabilities_json: String::new(),
                continuation_token: continuation.unwrap_or_default(),
                input_responses_json: responses.unwrap_or_default(),
            });
            if let Some(ms) = timeout_ms {
                request.set_timeout(std::time::Duration::from_millis(ms));
            }
            let result = match client.call_tool(request).await {
                Ok(result) => result.into_inner(),
                Err(status) if status.code() == tonic::Code::NotFound => {
                    // Did you mean: the names this caller may see that are closest to the one asked for.
                    let mut names = Vec::new();
                    let mut request = pb::ListToolsRequest { page_size: 5000, ..Default::default() };
                    while let Ok(page) = client.list_tools(request.clone()).await.map(tonic::Response::into_inner) {
                        names.extend(page.tools.into_iter().map(|tool| tool.qualified_name));
                        if page.next_page_token.is_empty() {
                            break;
                        }
                        request.page_token = page.next_page_token;
                    }
                    let near = closest(&wanted.replace('/', "__"), names.iter().map(String::as_str));
                    return Err(match near.is_empty() {
                        true => ClientError::Rpc(status),
                        false => ClientError::Hinted { status: Box::new(status), hint: format!("did you mean {}?", near.join(", ")) },
                    });
                }
                Err(status) => return Err(status.into()),
            };
            out.call(&result)?;
            if result.is_error {
                return Err(ClientError::ToolError);
            }
        }
        ClientCommand::Watch { mut from_revision, servers } => {
            if from_revision == 0 {
                // How things stand first, then every change after exactly that revision.
                let now = client.list_servers(pb::ListServersRequest {}).await?.into_inner();
                let shown: Vec<pb::Server> =
                    now.servers.into_iter().filter(|server| servers.is_empty() || servers.contains(&server.name)).collect();
                out.current(now.catalog_revision, &shown)?;
                from_revision = now.catalog_revision;
            }
            let mut stream = client.watch_catalog(pb::WatchCatalogRequest { from_revision, servers }).await?.into_inner();
            while let Some(event) = stream.message().await? {
                out.event(&event)?;
            }
        }
        ClientCommand::History { server, limit } => {
            let response = client.history(pb::HistoryRequest { server, limit }).await?.into_inner();
            out.history(&response)?;
        }
        ClientCommand::Refresh { server } => {
            client.refresh_server(pb::RefreshServerRequest { server: server.clone() }).await?;
            out.done(&format!("refresh of {server} requested"))?;
        }
        ClientCommand::Restart { server } => {
            client.restart_server(pb::RestartServerRequest { server: server.clone() }).await?;
            out.done(&format!("restart of {server} requested"))?;
        }
        ClientCommand::Logout { server } => {
            let done = client.logout(pb::LogoutRequest { server: server.clone() }).await?.into_inner();
            out.done(&format!("logged out of {server}: {}; {} deleted", done.outcome, done.token_file))?;
        }
        ClientCommand::Login { server, scope, paste } => {
            let request = pb::BeginLoginRequest { server: server.clone(), scope: scope.unwrap_or_default() };
            let started = client.begin_login(request).await?.into_inner();
            let redirect_query = login::browser(&started.authorization_url, paste).await.map_err(ClientError::Login)?;
            let request = pb::CompleteLoginRequest { server: server.clone(), login_id: started.login_id, redirect_query };
            let done = client.complete_login(request).await?.into_inner();
            out.done(&format!("logged in: the daemon keeps {server}'s tokens in {} and reconnects it", done.token_file))?;
        }
        ClientCommand::Approve { server, tools, all, hash } => {
            let request = pb::ApproveToolsRequest { server: server.clone(), tools, all, hash: hash.unwrap_or_default() };
            let response = client.approve_tools(request).await?.into_inner();
            out.approved(&server, &response.approved)?;
        }
        ClientCommand::Diff { server, tool } => {
            let response = client.diff_tool(pb::DiffToolRequest { server: server.clone(), name: tool.clone() }).await?.into_inner();
            out.diff(&server, &tool, &response)?;
        }
        ClientCommand::Search { query, servers, limit } => {
            let response = client.search_tools(pb::SearchToolsRequest { query: query.clone(), servers, limit }).await?.into_inner();
            out.search(&query, &response.results)?;
        }
        ClientCommand::Whoami => {
            let response = client.who_am_i(pb::WhoAmIRequest {}).await?.into_inner();
            out.whoami(&response)?;
        }
        ClientCommand::Fleet => {
            let response = client.fleet_status(pb::FleetStatusRequest {}).await?.into_inner();
            out.fleet(&response)?;
        }
        ClientCommand::Audit { since, agent, limit, fleet } => {
            let since_unix_ms = match since {
                Some(text) => {
                    let window = crate::config::parse_duration(&text, std::time::Duration::from_secs(3650 * 24 * 3600))
                        .map_err(|problem| ClientError::Usage(format!("--since: {problem}")))?;
                    crate::catalog::record::now_ms().saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
                }
                None => 0,
            };
            let request = pb::QueryAuditRequest { since_unix_ms, agent: agent.unwrap_or_default(), limit, fleet };
            let response = client.query_audit(request).await?.into_inner();
            out.audit(&response.records)?;
        }
    }
    Ok(())
}

/// `--addr`, else the configuration's gRPC address (a Unix socket, which identifies this user,
/// rather than TCP), else `$TOOLHOST_ADDR`, else the socket a daemon without listeners binds.
fn resolve_addr(options: &ClientOptions) -> Result<ListenAddr, ClientError> {
    if let Some(addr) = &options.addr {
        return parse_addr(addr);
    }
    if let Some(path) = &options.config {
        let config = Config::load(path)?;
        let unix = config.grpc.listen.iter().find(|listener| matches!(listener.addr, ListenAddr::Unix(_)));
        if let Some(listener) = unix.or_else(|| config.grpc.listen.first()) {
            return Ok(listener.addr.clone());
        }
    }
    if let Some(addr) = std::env::var("TOOLHOST_ADDR").ok().filter(|addr| !addr.trim().is_empty()) {
        return parse_addr(&addr);
    }
    Ok(ListenAddr::Unix(crate::config::places::default_grpc_socket()))
}

fn parse_addr(addr: &str) -> Result<ListenAddr, ClientError> {
    if let Some(path) = addr.strip_prefix("unix:") {
        return Ok(ListenAddr::Unix(Path::new(path).to_path_buf()));
    }
    addr.parse().map(ListenAddr::Tcp).map_err(|_| ClientError::Usage(format!("--addr {addr:?} is neither unix:PATH nor host:port")))
}

/// A channel to the daemon over TCP or a Unix socket.
///
/// # Errors
/// [`ClientError::Connect`] when the daemon cannot be reached.
pub async fn connect(addr: &ListenAddr) -> Result<Channel, ClientError> {
    match addr {
        ListenAddr::Tcp(socket) => {
            let endpoint =
                Endpoint::from_shared(format!("http://{socket}")).map_err(|source| connect_error(socket.to_string(), &source))?;
            endpoint.connect().await.map_err(|source| connect_error(socket.to_string(), &source))
        }
        ListenAddr::Unix(path) => {
            let path = path.clone();
            let display = format!("unix:{}", path.display());
            // The URI is required by the API but unused: the connector below dials the socket.
            let endpoint = Endpoint::from_static("http://localhost");
            endpoint
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move { UnixStream::connect(path).await.map(TokioIo::new) }
                }))
                .await
                .map_err(|source| connect_error(display, &source))
        }
    }
}

/// Says what went wrong in words an operator can act on: the OS error behind tonic's
/// "transport error", and what to do about the usual ones.
fn connect_error(addr: String, error: &(dyn std::error::Error + 'static)) -> ClientError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut io = None;
    while let Some(cause) = source {
        if let Some(found) = cause.downcast_ref::<std::io::Error>() {
            io = Some(found);
        }
        source = cause.source();
    }
    let is_unix = addr.starts_with("unix:");
    let reason = match io.map(std::io::Error::kind) {
        Some(std::io::ErrorKind::NotFound) if is_unix => "no such socket (is toolhost running, and is this its listen address?)".to_owned(),
        Some(std::io::ErrorKind::PermissionDenied) => {
            "permission denied (the socket admits its owner and its group: add this user to that group, e.g. toolhost)".to_owned()
        }
        Some(std::io::ErrorKind::ConnectionRefused) => "connection refused (nothing listens there; is toolhost running?)".to_owned(),
        _ => io.map_or_else(|| error.to_string(), ToString::to_string),
    };
    ClientError::Connect { addr, reason }
}

/// `NOT_FOUND (UNKNOWN_TOOL): no tool "x" [server=a tool=x]`: the code, toolhost's reason
/// (unless it is the code again) and the details (if any), so that scripts can match on the
/// first two words.
fn describe_status(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    let code = code_name(status.code());
    let Some(info) = status.get_details_error_info() else { return format!("{code}: {}", status.message()) };
    let reason = if info.reason == code || info.reason.is_empty() { String::new() } else { format!(" ({})", info.reason) };
    let mut metadata: Vec<String> = info.metadata.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={v}")).collect();
    metadata.sort();
    let details = if metadata.is_empty() { String::new() } else { format!(" [{}]", metadata.join(" ")) };
    format!("{code}{reason}: {}{details}", status.message())
}

/// `NotFound` as `NOT_FOUND`.
fn code_name(code: tonic::Code) -> String {
    format!("{code:?}").chars().fold(String::new(), |mut acc, c| {
        if c.is_uppercase() && !acc.is_empty() {
            acc.push('_');
        }
        acc.push(c.to_ascii_uppercase());
        acc
    })
}

/// What an operator can do about `status`, when toolhost knows: the commands that review and
/// approve a held tool, the socket for a caller refused over TCP.
fn hint(status: &tonic::Status, addr: &ListenAddr) -> Option<String> {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info();
    let reason = info.as_ref().map_or("", |info| info.reason.as_str());
    let fact = |key: &str| info.as_ref().and_then(|info| info.metadata.get(key).cloned()).unwrap_or_default();
    match reason {
        "DEFINITION_HELD" => {
            let (server, tool) = (fact("server"), fact("tool"));
            let offered = fact("offered_hash");
            let short = offered.get(..12).unwrap_or(&offered);
            Some(format!(
                "an operator reviews it with `toolhost diff {server} {tool}` and approves exactly that definition with `toolhost approve {server} {tool} --hash {short}`"
            ))
        }
        "UNAUTHENTICATED" if matches!(addr, ListenAddr::Tcp(_)) => Some(
            "over TCP a caller presents a token (TOOLHOST_TOKEN); on this host, the daemon's Unix socket identifies you without one (--addr unix:PATH, or --config)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// The tool names closest to `wanted`, for "did you mean": at most three, each a likely typo of
/// it (edit distance) or containing it. Only names the caller may see are ever offered, so a
/// suggestion says nothing about tools it may not use.
fn closest<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let contains = |name: &str| wanted.len() >= 4 && name.contains(wanted);
    let mut scored: Vec<(f64, &str)> = names
        .map(|name| (strsim::normalized_damerau_levenshtein(wanted, name), name))
        .filter(|(score, name)| *score >= 0.75 || contains(name))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, name)| name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_says_its_code_once_and_no_empty_details() {
        use tonic_types::{ErrorDetails, StatusExt};
        let status = |reason: &str, metadata: Vec<(&str, &str)>| {
            let metadata: std::collections::HashMap<String, String> =
                metadata.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
            tonic::Status::with_error_details(
                tonic::Code::Unauthenticated,
                "no token",
                ErrorDetails::with_error_info(reason, "toolhost", metadata),
            )
        };
        assert_eq!(describe_status(&status("UNAUTHENTICATED", vec![])), "UNAUTHENTICATED: no token");
        assert_eq!(
            describe_status(&status("OTHER", vec![("b", "2"), ("a", "1"), ("c", "")])),
            "UNAUTHENTICATED (OTHER): no token [a=1 b=2]"
        );
        assert_eq!(describe_status(&tonic::Status::not_found("gone")), "NOT_FOUND: gone");
    }

    #[test]
    fn did_you_mean_finds_typos_and_parts() {
        let names = ["files__read_file", "files__write_file", "github__create_issue"];
        assert_eq!(closest("files__read_fle", names.into_iter()), ["files__read_file"]);
        assert_eq!(closest("create_issue", names.into_iter()), ["github__create_issue"]);
        assert!(closest("zzz", names.into_iter()).is_empty());
    }
}
