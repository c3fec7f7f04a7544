//! `toolhost mcp`: a stdio MCP server for desktop clients (`"command": "toolhost", "args":
//! ["mcp"]`) that carries its stdin and stdout to the daemon's MCP Unix socket, byte for byte.
//! The daemon identifies the client by the bridge's uid, as for any local caller.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::config::{Config, ListenAddr};
use crate::endpoint::PROFILE_NOTIFICATION;

/// Why the bridge could not start or ended badly (for stderr: stdout belongs to the client).
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("invalid configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{} has no unix: address in [mcp] listen", .0.display())]
    NoSocket(PathBuf),
    #[error("cannot connect to {}: {source} {hint}", socket.display())]
    Connect { socket: PathBuf, source: std::io::Error, hint: &'static str },
    #[error("cannot write to the daemon: {0}")]
    Write(std::io::Error),
    #[error("the connection to the daemon failed: {0}")]
    Daemon(std::io::Error),
    #[error("cannot forward stdin: {0}")]
    Stdin(std::io::Error),
}

/// The socket to use: the one given, else the first `unix:` address in `[mcp] listen` of the
/// configuration file (which a file without listeners has by default), else the socket a daemon
/// without listeners binds (this user's runtime directory, else a system service's).
///
/// # Errors
/// The configuration file cannot be read, or lists no Unix socket for MCP.
pub fn socket_path(socket: Option<PathBuf>, config: Option<&Path>) -> Result<PathBuf, BridgeError> {
    if let Some(socket) = socket {
        return Ok(socket);
    }
    let Some(config) = config else { return Ok(crate::config::places::default_mcp_socket()) };
    let config = Config::load(config)?;
    config
        .mcp
        .listen
        .iter()
        .find_map(|listener| match &listener.addr {
            ListenAddr::Unix(path) => Some(path.clone()),
            ListenAddr::Tcp(_) => None,
        })
        .ok_or_else(|| BridgeError::NoSocket(config.source.clone()))
}

/// Bridges stdio to the socket until either side ends.
///
/// # Errors
/// A message for stderr (stdout belongs to the MCP client).
pub async fn run(socket: &Path, profile: Option<&str>) -> Result<(), BridgeError> {
    let stream = UnixStream::connect(socket).await.map_err(|source| {
        let hint = match source.kind() {
            std::io::ErrorKind::NotFound => "is the daemon running with this socket in [mcp] listen?",
            std::io::ErrorKind::PermissionDenied => "the socket's mode and group decide who may connect",
            std::io::ErrorKind::ConnectionRefused => "nothing is listening on it (a socket left by a stopped daemon?)",
            _ => "",
        };
        BridgeError::Connect { socket: socket.to_path_buf(), source, hint }
    })?;
    let (mut from_daemon, mut to_daemon) = stream.into_split();
    if let Some(profile) = profile {
        let params = serde_json::json!({ "name": profile });
        let line = format!(r#"{{"jsonrpc":"2.0","method":"{PROFILE_NOTIFICATION}","params":{params}}}"#) + "\n";
        to_daemon.write_all(line.as_bytes()).await.map_err(BridgeError::Write)?;
    }
    let upstream = async {
        let mut stdin = tokio::io::stdin();
        let copied = tokio::io::copy(&mut stdin, &mut to_daemon).await;
        // The client closed stdin: the daemon hears that nothing more is coming, answers what
        // it was asked, and then closes its side, which ends the bridge.
        let _ = to_daemon.shutdown().await;
        copied
    };
    let downstream = async {
        let mut stdout = tokio::io::stdout();
        let copied = tokio::io::copy(&mut from_daemon, &mut stdout).await;
        let _ = stdout.flush().await;
        copied
    };
    tokio::pin!(downstream);
    // The daemon going away ends the bridge at once; stdin ending ends it once the answers are out.
    tokio::select! {
        result = &mut downstream => result.map(drop).map_err(BridgeError::Daemon),
        result = upstream => {
            result.map_err(BridgeError::Stdin)?;
            downstream.await.map(drop).map_err(BridgeError::Daemon)
        }
    }
}
