//! The configuration file as written: the TOML file's top level (each section's shape lives
//! beside its conversion, in that section's file) and the desktop-client `mcpServers` JSON
//! file. Nothing here is validated; `config::validate` does that.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::access::RawAccess;
use super::approvals::RawApprovals;
use super::audit::RawAudit;
use super::console::RawConsole;
use super::daemon::{RawDaemon, RawGrpc, RawStore, RawTelemetry};
use super::fleet::RawFleet;
use super::mcp::RawMcp;
use super::server::RawServer;
use super::tasks::RawTasks;

/// The TOML file.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub(crate) store: RawStore,
    #[serde(default)]
    pub(crate) grpc: RawGrpc,
    #[serde(default)]
    pub(crate) mcp: RawMcp,
    #[serde(default)]
    pub(crate) daemon: RawDaemon,
    #[serde(default)]
    pub(crate) telemetry: RawTelemetry,
    #[serde(default)]
    pub(crate) servers: BTreeMap<String, RawServer>,
    pub(crate) access: Option<RawAccess>,
    pub(crate) fleet: Option<RawFleet>,
    #[serde(default)]
    pub(crate) tasks: RawTasks,
    #[serde(default)]
    pub(crate) console: RawConsole,
    #[serde(default)]
    pub(crate) approvals: RawApprovals,
    #[serde(default)]
    pub(crate) audit: RawAudit,
}

/// A desktop client's JSON file: `{"mcpServers": {...}}`. Unknown keys are what those clients
/// write for their own purposes, so they are accepted here.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawDesktopFile {
    pub(crate) mcp_servers: BTreeMap<String, RawDesktopServer>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawDesktopServer {
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<String>,
    pub(crate) url: Option<String>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) disabled: bool,
}

impl From<RawDesktopServer> for RawServer {
    fn from(server: RawDesktopServer) -> Self {
        RawServer {
            command: server.command,
            args: server.args,
            env: server.env,
            cwd: server.cwd,
            url: server.url,
            headers: server.headers,
            kind: server.kind,
            enabled: Some(!server.disabled),
            ..RawServer::default()
        }
    }
}
