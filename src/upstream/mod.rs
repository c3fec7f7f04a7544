//! Upstream MCP sessions: spawning a server, the legacy handshake, and a handle to talk to it.
//!
//! `upstream` knows nothing about SQLite or the catalog. The supervisor owns each
//! [`Connection`]; everything else holds a [`SessionHandle`].

mod lines;
pub mod reaper;
pub mod session;
mod stdio;

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ServerSpec, Transport};
use crate::mcp::jsonrpc::RpcError;
use crate::mcp::lifecycle::{self, HandshakeError, ServerHello};
pub use session::SessionHandle;

/// Everything that can go wrong talking to an upstream server.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot start {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("the session is closed")]
    Closed,
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
    #[error("{0} upstreams are not supported yet")]
    UnsupportedTransport(&'static str),
}

impl UpstreamError {
    /// A JSON-RPC error that means "this tool or method does not exist here".
    pub fn is_unknown_tool(&self) -> bool {
        use crate::mcp::jsonrpc::code::{INVALID_PARAMS, METHOD_NOT_FOUND};
        matches!(self, UpstreamError::Rpc(error) if error.code == METHOD_NOT_FOUND || error.code == INVALID_PARAMS)
    }
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
}

/// An initialized session that the supervisor owns: the handle plus the process and tasks behind it.
pub struct Connection {
    handle: SessionHandle,
    hello: ServerHello,
    tasks: session::SessionTasks,
    process: stdio::ChildProcess,
    shutdown_grace: Duration,
}

/// Starts the server and runs the legacy handshake: `initialize`, version check,
/// `notifications/initialized`.
///
/// # Errors
/// A spawn failure, a timeout, or a handshake the server failed; the process is stopped first.
pub async fn connect(server: &Arc<str>, spec: &ServerSpec, settings: &SessionSettings) -> Result<Connection, UpstreamError> {
    let stdio_spec = match &spec.transport {
        Transport::Stdio(stdio_spec) => stdio_spec,
        Transport::Http(_) => return Err(UpstreamError::UnsupportedTransport("Streamable HTTP")),
    };
    let (process, stdout, stdin) = stdio::spawn(server, stdio_spec, settings.reaper.clone())?;
    let (handle, tasks) = session::start(server.clone(), stdout, stdin, settings.max_message_bytes);
    let params =
        serde_json::value::RawValue::from_string(lifecycle::initialize_params()).map_err(|err| UpstreamError::Protocol(err.to_string()))?;
    // `initialize` must not be cancelled (lifecycle spec), so a timeout just ends the session.
    let handshake = async {
        let result = handle.request(lifecycle::METHOD_INITIALIZE, Some(&params), settings.request_timeout, false).await?;
        let hello = lifecycle::check_initialize_result(&result)?;
        handle.notify(lifecycle::METHOD_INITIALIZED, None)?;
        Ok::<_, UpstreamError>(hello)
    };
    let hello = match handshake.await {
        Ok(hello) => hello,
        Err(error) => {
            tasks.close_input();
            let _ = process.shutdown(settings.shutdown_grace).await;
            tasks.join(settings.shutdown_grace).await;
            return Err(error);
        }
    };
    Ok(Connection { handle, hello, tasks, process, shutdown_grace: settings.shutdown_grace })
}

// === impl Connection ===

impl Connection {
    pub fn handle(&self) -> &SessionHandle {
        &self.handle
    }

    pub fn hello(&self) -> &ServerHello {
        &self.hello
    }

    /// Runs the stdio shutdown sequence and reaps the child. Returns its exit status.
    pub async fn shutdown(self) -> Option<ExitStatus> {
        self.tasks.close_input();
        let status = self.process.shutdown(self.shutdown_grace).await;
        self.tasks.join(self.shutdown_grace).await;
        status
    }
}
