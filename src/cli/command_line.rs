//! The `toolhost` command line: the daemon (`serve`) and the operator's client commands.
//! Parses arguments, sets up logging and the runtime, and maps failures to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use super::{ClientCommand, ClientOptions, EXIT_CONFIG};
use crate::config::Config;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "toolhost", version, about = "One trustworthy view of the tools a host's MCP servers offer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon.
    Serve {
        /// A TOML file, or a JSON file with an `mcpServers` object.
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Check a configuration file and exit.
    CheckConfig {
        #[arg(long, short)]
        config: PathBuf,
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
        /// Also start each server once, as the daemon would (in its sandbox), list its tools and
        /// stop it: says whether it works, or why not. Exit 1 when one does not.
        #[arg(long)]
        probe: bool,
    },
    #[command(flatten)]
    Client(ClientCommand),
    /// Create or upgrade the fleet store's schema (needs [fleet] in the configuration). Run it
    /// once, when every host runs a toolhost that knows the new schema.
    FleetMigrate {
        #[arg(long, env = "TOOLHOST_CONFIG")]
        config: PathBuf,
    },
    /// Authorize toolhost to an OAuth server once (the authorization code grant): prints the
    /// authorization URL, waits for the browser on the redirect address, stores the tokens in
    /// the server's token file, and asks the daemon to reconnect the server. The daemon
    /// refreshes the tokens from then on.
    Login {
        server: String,
        #[arg(long, short, env = "TOOLHOST_CONFIG")]
        config: PathBuf,
        /// Ask for these scopes (space-separated) instead of what the server suggests.
        #[arg(long)]
        scope: Option<String>,
        /// The browser runs elsewhere: paste the URL it ends on instead of listening for it.
        #[arg(long)]
        paste: bool,
        /// The daemon to tell: unix:PATH or host:port (default: from --config).
        #[arg(long)]
        addr: Option<String>,
        /// A bearer token for the daemon's TCP listener.
        #[arg(long, env = "TOOLHOST_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Forget an OAuth server's authorization: revoke its tokens at the authorization server
    /// (where it offers revocation), delete its token file, and have the daemon reconnect it
    /// (it is then `auth_required` until the next `toolhost login`).
    Logout {
        server: String,
        #[arg(long, short, env = "TOOLHOST_CONFIG")]
        config: PathBuf,
        /// The daemon to tell: unix:PATH or host:port (default: from --config).
        #[arg(long)]
        addr: Option<String>,
        /// A bearer token for the daemon's TCP listener.
        #[arg(long, env = "TOOLHOST_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Serve MCP on stdin and stdout, bridged to the daemon's MCP socket: the command a desktop
    /// client's `mcpServers` entry runs (`{"command": "toolhost", "args": ["mcp"]}`).
    Mcp {
        /// The daemon's MCP socket (default: the first unix: address in --config's [mcp] listen,
        /// else /run/toolhost/mcp.sock).
        #[arg(long, env = "TOOLHOST_MCP_SOCKET")]
        socket: Option<PathBuf>,
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Serve only this profile of [mcp.profiles].
        #[arg(long)]
        profile: Option<String>,
    },
    /// Internal: the orphan guard that `serve` starts (kills server process groups it outlives).
    #[command(name = "__reap", hide = true)]
    Reap,
    /// Internal: an upstream session driven by the MCP conformance suite.
    #[command(name = "__conformance-client", hide = true)]
    ConformanceClient { url: String },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match cli.command {
        Command::Serve { config, log_format } => return serve(&config, log_format),
        Command::CheckConfig { config, json, probe } => return check_config(&config, json, probe),
        Command::Reap => {
            crate::upstream::reaper::run_helper();
            return ExitCode::SUCCESS;
        }
        Command::ConformanceClient { url } => {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => return fail(&format!("cannot start the async runtime: {error}"), 1),
            };
            return match runtime.block_on(crate::cli::conformance::run(&url)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => fail(&error.to_string(), 1),
            };
        }
        Command::Mcp { socket, config, profile } => return bridge(socket, config.as_deref(), profile.as_deref()),
        Command::Client(ClientCommand::Audit { action: Some(action), .. }) => return super::audit::run(*action),
        Command::Client(command) => command,
        Command::FleetMigrate { config } => return fleet_migrate(&config),
        Command::Login { server, config, scope, paste, addr, token } => {
            let here = crate::cli::login::run(&config, &server, scope.clone(), paste);
            let options = ClientOptions { addr, config: Some(config.clone()), json: false, token };
            return through_daemon(ClientCommand::Login { server: server.clone(), scope, paste, options }, "logging in", here);
        }
        Command::Logout { server, config, addr, token } => {
            let here = crate::cli::login::logout(&config, &server);
            let options = ClientOptions { addr, config: Some(config.clone()), json: false, token };
            return through_daemon(ClientCommand::Logout { server: server.clone(), options }, "logging out", here);
        }
    };
    let json = command.json();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the async runtime: {error}"), 1),
    };
    match runtime.block_on(crate::cli::run(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(crate::cli::ClientError::ToolError) => ExitCode::from(crate::cli::EXIT_TOOL_ERROR),
        Err(error) => {
            if json {
                use std::io::Write;
                let _ = writeln!(std::io::stdout(), "{}", error.json());
            }
            fail(&error.to_string(), error.exit_code())
        }
    }
}

fn serve(config_path: &std::path::Path, log_format: LogFormat) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(config) => config,
        Err(error) => return fail(&format!("invalid configuration: {error}"), EXIT_CONFIG),
    };
    crate::sandbox::protect_daemon();
    let format = match log_format {
        LogFormat::Text => crate::telemetry::LogFormat::Text,
        LogFormat::Json => crate::telemetry::LogFormat::Json,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the async runtime: {error}"), 1),
    };
    let options =
        crate::app::RuntimeOptions { reaper_program: std::env::current_exe().ok(), notifier: crate::systemd::Notifier::from_env() };
    // The OTLP exporters are built inside the runtime (tonic needs one) and flushed after it.
    let telemetry = match runtime.block_on(async { crate::telemetry::init(&config.telemetry, format) }) {
        Ok(telemetry) => telemetry,
        Err(error) => return fail(&error.to_string(), 1),
    };
    let result = runtime.block_on(crate::app::run(config_path, config, options));
    if let Err(error) = &result {
        tracing::error!(%error, "toolhost could not start");
    }
    telemetry.shutdown();
    drop(runtime);
    if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// A login or logout through the daemon; without a reachable daemon, `here` does it in this
/// process (`doing` says which, for the operator).
fn through_daemon(
    command: ClientCommand,
    doing: &str,
    here: impl std::future::Future<Output = Result<String, crate::cli::login::LoginError>>,
) -> ExitCode {
    use std::io::Write;
    match with_runtime(crate::cli::run(command)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(error @ crate::cli::ClientError::Connect { .. })) => {
            let _ = writeln!(std::io::stderr(), "{error}: {doing} from here; the daemon was not told, it acts on this when it starts");
            match with_runtime(here) {
                Ok(Ok(done)) => {
                    let _ = writeln!(std::io::stdout(), "{done}");
                    ExitCode::SUCCESS
                }
                Ok(Err(error)) => fail(&error.to_string(), 1),
                Err(error) => fail(&error.to_string(), 1),
            }
        }
        Ok(Err(error)) => fail(&error.to_string(), error.exit_code()),
        Err(error) => fail(&error.to_string(), 1),
    }
}

fn bridge(socket: Option<PathBuf>, config: Option<&std::path::Path>, profile: Option<&str>) -> ExitCode {
    let socket = match crate::cli::bridge::socket_path(socket, config) {
        Ok(socket) => socket,
        Err(error) => return fail(&error.to_string(), EXIT_CONFIG),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the async runtime: {error}"), 1),
    };
    match runtime.block_on(crate::cli::bridge::run(&socket, profile)) {
        Ok(()) => ExitCode::SUCCESS,
        // The daemon could not be reached or went away: the same code as any client command's.
        Err(error) => fail(&error.to_string(), crate::cli::EXIT_RPC_ERROR),
    }
}

fn check_config(config: &std::path::Path, json: bool, probe: bool) -> ExitCode {
    use std::io::Write;
    let report = match with_runtime(crate::cli::check::check(config, probe)) {
        Ok(Ok(report)) => report,
        Ok(Err(error)) if json => return fail_json(&format!("invalid configuration: {error}"), "config", EXIT_CONFIG),
        Ok(Err(error)) => return fail(&format!("invalid configuration: {error}"), EXIT_CONFIG),
        Err(error) => return fail(&error.to_string(), 1),
    };
    let _ = match json {
        true => writeln!(std::io::stdout(), "{}", report.json()),
        false => write!(std::io::stdout(), "{}", crate::cli::output::printable(&report.text())),
    };
    match (report.ok, report.probe_failed) {
        (false, _) => ExitCode::from(EXIT_CONFIG),
        (true, true) => ExitCode::from(1),
        (true, false) => ExitCode::SUCCESS,
    }
}

fn fleet_migrate(config: &std::path::Path) -> ExitCode {
    use std::io::Write;
    let config = match Config::load(config) {
        Ok(config) => config,
        Err(error) => return fail(&format!("invalid configuration: {error}"), EXIT_CONFIG),
    };
    let Some(fleet) = config.fleet else { return fail("no [fleet] section in the configuration", EXIT_CONFIG) };
    let migrated = with_runtime(async {
        let pool = crate::fleet::schema::connect(&fleet).await?;
        if let crate::fleet::schema::Schema::Newer { applied, known } = crate::fleet::schema::check(&pool).await? {
            return Err(crate::fleet::FleetError::SchemaNewer { applied, known });
        }
        crate::fleet::schema::migrate(&pool).await?;
        let schema = crate::fleet::schema::check(&pool).await?;
        pool.close().await;
        Ok(schema)
    });
    match migrated {
        Ok(Ok(schema)) => {
            let _ = writeln!(std::io::stdout(), "fleet store: schema {}", crate::cli::check::schema_text(&schema));
            ExitCode::SUCCESS
        }
        Ok(Err(error)) => fail(&format!("fleet store: {error}"), EXIT_CONFIG),
        Err(error) => fail(&error.to_string(), 1),
    }
}

/// The async runtime could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the async runtime: {0}")]
struct RuntimeError(std::io::Error);

/// Runs `work` on a single-threaded runtime (the offline commands that talk to PostgreSQL).
fn with_runtime<T>(work: impl std::future::Future<Output = T>) -> Result<T, RuntimeError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(RuntimeError)?;
    Ok(runtime.block_on(work))
}

/// [`fail`], and the same as JSON on stdout for a `--json` caller's script.
fn fail_json(message: &str, kind: &str, code: u8) -> ExitCode {
    use std::io::Write;
    let error = serde_json::json!({"error": {"kind": kind, "message": message, "exit_code": code}});
    let _ = writeln!(std::io::stdout(), "{error}");
    fail(message, code)
}

fn fail(message: &str, code: u8) -> ExitCode {
    use std::io::Write;
    // A daemon's message may quote a server (its error, a tool's name): never raw to a terminal.
    let _ = writeln!(std::io::stderr(), "toolhost: {}", crate::cli::output::printable(message));
    ExitCode::from(code)
}
