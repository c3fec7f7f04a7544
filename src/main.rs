//! The `toolhost` command: parse arguments, load the configuration, set up logging, run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use toolhost::config::Config;

/// Exit code for a bad configuration (`EX_USAGE` in sysexits.h).
const EXIT_CONFIG: u8 = 64;

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
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { config } => match Config::load(&config) {
            Ok(config) => {
                let _ = writeln_stdout(&format!("{}: ok, {} servers", config.source.display(), config.servers.len()));
                ExitCode::SUCCESS
            }
            Err(error) => config_failure(&error),
        },
        Command::Serve { config, log_format } => {
            let config = match Config::load(&config) {
                Ok(config) => config,
                Err(error) => return config_failure(&error),
            };
            init_logging(log_format);
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "cannot start the async runtime");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(toolhost::app::run(config, shutdown_signal())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "toolhost could not start");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn config_failure(error: &toolhost::config::ConfigError) -> ExitCode {
    #[allow(clippy::print_stderr)]
    {
        eprintln!("toolhost: invalid configuration: {error}");
    }
    ExitCode::from(EXIT_CONFIG)
}

fn writeln_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stdout(), "{text}")
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        // Colour codes only on a terminal: journald stores them verbatim otherwise.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(terminate) => terminate,
        Err(error) => {
            tracing::error!(%error, "cannot listen for SIGTERM; only SIGINT will stop toolhost");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = terminate.recv() => tracing::info!("received SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("received SIGINT"),
    }
}
