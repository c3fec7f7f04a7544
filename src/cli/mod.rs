//! The operator's command line, a gRPC client of the daemon's own API.
//!
//! Exit codes: 0 success, 1 the tool reported an error (`isError`) or a login failed, 2 a usage error, 3 an RPC
//! error (the status is printed), 64 a bad configuration file.

mod approvals;
pub mod audit;
pub mod bridge;
pub mod check;
pub mod command_line;
pub mod conformance;
mod detail;
pub mod login;
mod output;
mod problem;
mod tasks;

pub use problem::{ClientError, EXIT_CONFIG, EXIT_RPC_ERROR, EXIT_TOOL_ERROR, EXIT_USAGE};
use problem::{closest, hint};

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use crate::api::pb;
use crate::api::pb::tool_host_client::ToolHostClient;
use crate::config::{Config, ListenAddr};

/// The operator's client commands: each a gRPC request (or a few) to the daemon. clap reads
/// them straight from the command line (`command_line` flattens them into its commands).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClientCommand {
    /// List the servers with their state and generation, or show one whole: its last error
    /// (exit, stderr, hint), its history, its last listing, what its sandbox holds.
    Servers {
        /// This server alone, in detail.
        name: Option<String>,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// List the tools of all servers or some.
    Tools {
        /// Only this server (repeatable).
        #[arg(long = "server", value_name = "SERVER")]
        servers: Vec<String>,
        /// Only tools whose name contains this text.
        #[arg(long = "filter", value_name = "TEXT")]
        name_contains: Option<String>,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Call a tool by qualified name (or SERVER/TOOL).
    Call {
        name: String,
        /// The arguments, a JSON object.
        #[arg(long)]
        args: Option<String>,
        /// Refuse the call if the tool's definition hash is no longer this one.
        #[arg(long)]
        hash: Option<String>,
        /// The call's deadline in milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Answer a server's input requests: the continuation token the first call printed...
        #[arg(long, requires = "responses")]
        continuation: Option<String>,
        /// ...and the answers, a JSON object keyed like the input requests.
        #[arg(long, requires = "continuation")]
        responses: Option<String>,
        /// Run it as a task: print the task's id at once; `toolhost task ID --wait` gets the result.
        #[arg(long, conflicts_with_all = ["continuation", "timeout_ms"])]
        task: bool,
        /// How long the task is kept, and may run (e.g. 30m, 2h; default: [tasks] default_ttl).
        #[arg(long, requires = "task")]
        ttl: Option<String>,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// List your tasks, newest first.
    Tasks {
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Show one of your tasks; with --wait, wait for its end and print its result.
    Task {
        id: String,
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Cancel one of your working tasks (its server is told).
    Cancel {
        id: String,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Calls waiting for a person's approval (operators): list them, or show, approve or deny one.
    Approvals {
        #[command(subcommand)]
        action: Option<approvals::ApprovalsAction>,
        /// List only requests in this status: pending, approved, denied, expired, used, stale.
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Print catalog changes as they happen.
    Watch {
        /// Start after this catalog revision (default: from now).
        #[arg(long, default_value_t = 0)]
        from_revision: u64,
        /// Only this server (repeatable).
        #[arg(long = "server", value_name = "SERVER")]
        servers: Vec<String>,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Show a server's generations and recent enumerations.
    History {
        server: String,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Re-enumerate a server now.
    Refresh {
        server: String,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Re-read the daemon's configuration file and apply it (as SIGHUP does): say what changed,
    /// and what the running daemon could not apply and why.
    Reload {
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Restart a server's session.
    Restart {
        server: String,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Search the catalog: tools whose names, titles, descriptions or argument names match.
    Search {
        /// Words to look for.
        query: String,
        /// Only this server (repeatable).
        #[arg(long = "server", value_name = "SERVER")]
        servers: Vec<String>,
        #[arg(long, default_value_t = 10)]
        limit: u32,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Approve the tool definitions a server offers now (operators only): held tools become callable.
    Approve {
        server: String,
        /// The tools' own names (not qualified).
        tools: Vec<String>,
        /// Every tool the server offers now.
        #[arg(long, conflicts_with = "tools")]
        all: bool,
        /// Only this exact definition (sha256:… or hex) of the one named tool.
        #[arg(long)]
        hash: Option<String>,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Show what changed between a tool's approved and offered definitions (operators only).
    Diff {
        server: String,
        tool: String,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Show who the daemon takes you for, the agent entry that admits you, and what you may use.
    Whoami {
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Show the audit trail of tool calls (operators only).
    Audit {
        /// `verify` the chain, or print the checkpoints' public `key`, from the store itself.
        #[command(subcommand)]
        action: Option<Box<audit::AuditAction>>,
        /// Only calls in this last stretch of time, e.g. 1h or 30m.
        #[arg(long)]
        since: Option<String>,
        /// Only this agent's calls.
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Every host's calls, from the fleet store.
        #[arg(long)]
        fleet: bool,
        #[command(flatten)]
        options: ClientOptions,
    },
    /// Show the fleet (operators only): every host sharing the fleet store, its servers, and
    /// every tool whose definition differs between hosts.
    Fleet {
        #[command(flatten)]
        options: ClientOptions,
    },
    /// The daemon's half of `toolhost login` (the command line's own `login` has its options).
    #[command(skip)]
    Login {
        server: String,
        scope: Option<String>,
        /// Read the redirected URL from stdin instead of listening for it.
        paste: bool,
        options: ClientOptions,
    },
    /// The daemon's half of `toolhost logout`.
    #[command(skip)]
    Logout { server: String, options: ClientOptions },
}

impl ClientCommand {
    /// Whether the caller asked for JSON (a failure is then printed as JSON too).
    #[must_use]
    pub fn json(&self) -> bool {
        self.options().json
    }

    /// Where the daemon is and how to print, which every command carries.
    fn options(&self) -> &ClientOptions {
        match self {
            ClientCommand::Approvals { action: Some(action), .. } => action.options(),
            ClientCommand::Servers { options, .. }
            | ClientCommand::Approvals { options, .. }
            | ClientCommand::Tools { options, .. }
            | ClientCommand::Call { options, .. }
            | ClientCommand::Tasks { options }
            | ClientCommand::Task { options, .. }
            | ClientCommand::Cancel { options, .. }
            | ClientCommand::Watch { options, .. }
            | ClientCommand::History { options, .. }
            | ClientCommand::Refresh { options, .. }
            | ClientCommand::Restart { options, .. }
            | ClientCommand::Reload { options }
            | ClientCommand::Search { options, .. }
            | ClientCommand::Approve { options, .. }
            | ClientCommand::Diff { options, .. }
            | ClientCommand::Whoami { options }
            | ClientCommand::Audit { options, .. }
            | ClientCommand::Fleet { options }
            | ClientCommand::Login { options, .. }
            | ClientCommand::Logout { options, .. } => options,
        }
    }
}

/// Where the daemon is and how to print.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientOptions {
    /// The daemon: unix:PATH or host:port (default: a unix: address of --config, else
    /// $TOOLHOST_ADDR, else the socket in the runtime directory: $XDG_RUNTIME_DIR/toolhost, or
    /// /run/toolhost for a system service).
    #[arg(long)]
    pub addr: Option<String>,
    /// Read the daemon's address from this configuration file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A bearer token for a TCP listener (prefer the environment variable: a command line is
    /// visible to other users).
    #[arg(long, env = "TOOLHOST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Runs one client command against the daemon.
///
/// # Errors
/// [`ClientError`], whose [`ClientError::exit_code`] tells the kinds apart.
pub async fn run(command: ClientCommand) -> Result<(), ClientError> {
    let options = command.options().clone();
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

/// A call of the tool `name` (qualified, or SERVER/TOOL) with `args` (checked to be a JSON
/// object) and the definition hash it must still have.
fn tool_call(name: String, args: Option<String>, hash: Option<String>) -> Result<pb::CallToolRequest, ClientError> {
    if let Some(args) = &args {
        match serde_json::from_str::<serde_json::Value>(args) {
            Ok(value) if value.is_object() => {}
            Ok(_) => return Err(ClientError::Usage("--args must be a JSON object, like '{\"path\": \"/tmp\"}'".to_owned())),
            Err(error) => return Err(ClientError::Usage(format!("--args is not JSON: {error}"))),
        }
    }
    let (qualified_name, server, tool) = match name.split_once('/') {
        Some((server, tool)) => (String::new(), server.to_owned(), tool.to_owned()),
        None => (name, String::new(), String::new()),
    };
    Ok(pb::CallToolRequest {
        qualified_name,
        server,
        name: tool,
        arguments_json: args.unwrap_or_default(),
        expected_definition_hash: hash.unwrap_or_default(),
        ..Default::default()
    })
}

/// The daemon's API as the command line holds it.
type Client = ToolHostClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

/// Adds the caller's bearer token, if it gave one, to every request.
#[derive(Clone)]
struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("authorization", token.clone());
        }
        Ok(request)
    }
}

/// A client of the daemon at `addr`, carrying the caller's token if it gave one.
async fn client(options: &ClientOptions, addr: &ListenAddr) -> Result<Client, ClientError> {
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
    Ok(ToolHostClient::with_interceptor(connect(addr).await?, Bearer(token)))
}

/// `toolhost audit verify --daemon`: the daemon's verdict on its own audit chain.
///
/// # Errors
/// [`ClientError`] when the daemon cannot be reached or refuses.
pub async fn verify_audit(options: &ClientOptions, span: crate::store::audit_chain::Span) -> Result<pb::VerifyAuditResponse, ClientError> {
    let addr = resolve_addr(options)?;
    let mut client = client(options, &addr).await?;
    let request = pb::VerifyAuditRequest { from_unix_ms: span.from_ms.unwrap_or(0), to_unix_ms: span.to_ms.unwrap_or(0) };
    Ok(client.verify_audit(request).await?.into_inner())
}

async fn execute(command: ClientCommand, options: &ClientOptions, addr: &ListenAddr) -> Result<(), ClientError> {
    let mut client = client(options, addr).await?;
    let mut out = output::Printer::new(options.json);
    match command {
        ClientCommand::Servers { name: None, .. } => {
            let response = client.list_servers(pb::ListServersRequest::default()).await?.into_inner();
            out.servers(&response.servers, response.store.as_ref())?;
        }
        ClientCommand::Servers { name: Some(name), .. } => {
            let response = client.list_servers(pb::ListServersRequest { name }).await?.into_inner();
            for server in &response.servers {
                detail::server(&mut out, server)?;
            }
        }
        ClientCommand::Tools { servers, name_contains, .. } => {
            let request = pb::ListToolsRequest {
                servers,
                name_contains: name_contains.unwrap_or_default(),
                with_definitions: options.json,
                ..Default::default()
            };
            out.tools(&all_tools(&mut client, request).await?)?;
        }
        ClientCommand::Call { name, args, hash, task: true, ttl, .. } => {
            tasks::start(&mut client, &mut out, &name, args, hash, ttl.as_deref()).await?;
        }
        ClientCommand::Tasks { .. } => tasks::list(&mut client, &mut out).await?,
        ClientCommand::Approvals { action, status, .. } => approvals::run(&mut client, &mut out, action, status).await?,
        ClientCommand::Task { id, wait, .. } => tasks::show(&mut client, &mut out, &id, wait).await?,
        ClientCommand::Cancel { id, .. } => tasks::cancel(&mut client, &mut out, &id).await?,
        ClientCommand::Call { name, args, hash, timeout_ms, continuation, responses, .. } => {
            let wanted = name.clone();
            let request = pb::CallToolRequest {
                continuation_token: continuation.unwrap_or_default(),
                input_responses_json: responses.unwrap_or_default(),
                ..tool_call(name, args, hash)?
            };
            call(&mut client, &mut out, &wanted, request, timeout_ms).await?;
        }
        ClientCommand::Watch { from_revision, servers, .. } => watch(&mut client, &mut out, from_revision, servers).await?,
        ClientCommand::History { server, limit, .. } => {
            let response = client.history(pb::HistoryRequest { server, limit }).await?.into_inner();
            out.history(&response)?;
        }
        ClientCommand::Refresh { server, .. } => {
            client.refresh_server(pb::RefreshServerRequest { server: server.clone() }).await?;
            out.done(&format!("refresh of {server} requested"))?;
        }
        ClientCommand::Reload { .. } => {
            let report = client.reload(pb::ReloadRequest {}).await?.into_inner();
            reloaded(&mut out, &report)?;
        }
        ClientCommand::Restart { server, .. } => {
            client.restart_server(pb::RestartServerRequest { server: server.clone() }).await?;
            out.done(&format!("restart of {server} requested"))?;
        }
        ClientCommand::Logout { server, .. } => {
            let done = client.logout(pb::LogoutRequest { server: server.clone() }).await?.into_inner();
            out.done(&format!("logged out of {server}: {}; {} deleted", done.outcome, done.token_file))?;
        }
        ClientCommand::Login { server, scope, paste, .. } => login(&mut client, &mut out, server, scope, paste).await?,
        ClientCommand::Approve { server, tools, all, hash, .. } => {
            let request = pb::ApproveToolsRequest { server: server.clone(), tools, all, hash: hash.unwrap_or_default() };
            let response = client.approve_tools(request).await?.into_inner();
            out.approved(&server, &response.approved)?;
        }
        ClientCommand::Diff { server, tool, .. } => {
            let response = client.diff_tool(pb::DiffToolRequest { server: server.clone(), name: tool.clone() }).await?.into_inner();
            out.diff(&server, &tool, &response)?;
        }
        ClientCommand::Search { query, servers, limit, .. } => {
            let response = client.search_tools(pb::SearchToolsRequest { query: query.clone(), servers, limit }).await?.into_inner();
            out.search(&query, &response.results)?;
        }
        ClientCommand::Whoami { .. } => {
            let response = client.who_am_i(pb::WhoAmIRequest {}).await?.into_inner();
            out.whoami(&response)?;
        }
        ClientCommand::Fleet { .. } => {
            let response = client.fleet_status(pb::FleetStatusRequest {}).await?.into_inner();
            out.fleet(&response)?;
        }
        ClientCommand::Audit { since, agent, limit, fleet, .. } => {
            let request =
                pb::QueryAuditRequest { since_unix_ms: since_unix_ms(since.as_deref())?, agent: agent.unwrap_or_default(), limit, fleet };
            let response = client.query_audit(request).await?.into_inner();
            out.audit(&response.records)?;
        }
    }
    Ok(())
}

/// Every page of the tools `request` asks for.
async fn all_tools(client: &mut Client, mut request: pb::ListToolsRequest) -> Result<Vec<pb::Tool>, ClientError> {
    let mut tools = Vec::new();
    loop {
        let response = client.list_tools(request.clone()).await?.into_inner();
        tools.extend(response.tools);
        if response.next_page_token.is_empty() {
            return Ok(tools);
        }
        request.page_token = response.next_page_token;
    }
}

/// `toolhost call`: the result, a call waiting for a person followed, or "did you mean".
async fn call(
    client: &mut Client,
    out: &mut output::Printer,
    wanted: &str,
    request: pb::CallToolRequest,
    timeout_ms: Option<u64>,
) -> Result<(), ClientError> {
    let mut request = tonic::Request::new(request);
    if let Some(ms) = timeout_ms {
        request.set_timeout(std::time::Duration::from_millis(ms));
    }
    let result = match client.call_tool(request).await {
        Ok(result) => result.into_inner(),
        // Waiting for a person: said at once, then the result once approved (within
        // --timeout-ms, if given: past it, the answer that names the request).
        Err(status) if status.code() == tonic::Code::FailedPrecondition => {
            let Some(task) = approvals::waiting_task(&status) else { return Err(status.into()) };
            let follow = tasks::show(client, out, &task, true);
            return match timeout_ms {
                Some(ms) => tokio::time::timeout(std::time::Duration::from_millis(ms), follow).await.unwrap_or(Err(status.into())),
                None => follow.await,
            };
        }
        Err(status) if status.code() == tonic::Code::NotFound => return Err(did_you_mean(client, wanted, status).await),
        Err(status) => return Err(status.into()),
    };
    out.call(&result)?;
    if result.is_error {
        return Err(ClientError::ToolError);
    }
    Ok(())
}

/// A tool not found, with the names this caller may see that are closest to the one asked for.
async fn did_you_mean(client: &mut Client, wanted: &str, status: tonic::Status) -> ClientError {
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
    match near.is_empty() {
        true => ClientError::Rpc(status),
        false => ClientError::Hinted { status: Box::new(status), hint: format!("did you mean {}?", near.join(", ")) },
    }
}

/// `toolhost watch`: how things stand first (unless a revision is given), then every change
/// after exactly that revision.
async fn watch(client: &mut Client, out: &mut output::Printer, mut from_revision: u64, servers: Vec<String>) -> Result<(), ClientError> {
    if from_revision == 0 {
        let now = client.list_servers(pb::ListServersRequest::default()).await?.into_inner();
        let shown: Vec<pb::Server> =
            now.servers.into_iter().filter(|server| servers.is_empty() || servers.contains(&server.name)).collect();
        out.current(now.catalog_revision, &shown)?;
        from_revision = now.catalog_revision;
    }
    let mut stream = client.watch_catalog(pb::WatchCatalogRequest { from_revision, servers }).await?.into_inner();
    while let Some(event) = stream.message().await? {
        out.event(&event)?;
    }
    Ok(())
}

/// `toolhost login` through the daemon: it keeps the tokens, this side catches the redirect.
async fn login(
    client: &mut Client,
    out: &mut output::Printer,
    server: String,
    scope: Option<String>,
    paste: bool,
) -> Result<(), ClientError> {
    let redirect = login::Redirect::prepare(paste).await;
    let redirect_port = redirect.port().map_or(0, u32::from);
    let request = pb::BeginLoginRequest { server: server.clone(), scope: scope.unwrap_or_default(), redirect_port };
    let started = client.begin_login(request).await?.into_inner();
    let redirect_query = redirect.wait(&started.authorization_url).await.map_err(ClientError::Login)?;
    let request = pb::CompleteLoginRequest { server: server.clone(), login_id: started.login_id, redirect_query };
    let done = client.complete_login(request).await?.into_inner();
    out.done(&format!("logged in: the daemon keeps {server}'s tokens in {} and reconnects it", done.token_file))?;
    Ok(())
}

/// `--since 1h` as the Unix time in milliseconds it names; none is 0 (everything).
fn since_unix_ms(since: Option<&str>) -> Result<i64, ClientError> {
    let Some(text) = since else { return Ok(0) };
    let window = crate::config::parse_duration(text, std::time::Duration::from_secs(3650 * 24 * 3600))
        .map_err(|problem| ClientError::Usage(format!("--since: {problem}")))?;
    Ok(crate::catalog::record::now_ms().saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX)))
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

/// What a reload did, a line each; what it could not apply last, with why.
fn reloaded(out: &mut output::Printer, report: &pb::ReloadResponse) -> std::io::Result<()> {
    if out.is_json() {
        let kept: Vec<serde_json::Value> =
            report.not_applied.iter().map(|kept| serde_json::json!({"setting": kept.setting, "why": kept.why})).collect();
        return out.json_line(&serde_json::json!({
            "servers": {"added": report.servers_added, "removed": report.servers_removed, "changed": report.servers_changed, "unchanged": report.servers_unchanged},
            "applied": report.applied,
            "not_applied": kept,
        }));
    }
    let names = |names: &[String]| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.iter().map(|name| output::printable(name).into_owned()).collect::<Vec<_>>().join(", ")
        }
    };
    out.line(&format!(
        "reloaded: servers added {}; removed {}; restarted {}; {} unchanged",
        names(&report.servers_added),
        names(&report.servers_removed),
        names(&report.servers_changed),
        report.servers_unchanged
    ))?;
    for applied in &report.applied {
        out.line(&format!("applied: {}", output::printable(applied)))?;
    }
    for kept in &report.not_applied {
        out.line(&format!("not applied: {}: {}", output::printable(&kept.setting), output::printable(&kept.why)))?;
    }
    Ok(())
}
