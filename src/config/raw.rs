//! The configuration file as written: serde shapes for the TOML file and the desktop-client
//! `mcpServers` JSON file. Nothing here is validated; `config::validate` does that.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::access::RawAccess;
use super::audit::RawAudit;
use super::listeners::OneOrMany;
use super::server::RawServer;

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

/// `[approvals]`: calls a person approves before they run.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApprovals {
    pub(crate) ttl: Option<String>,
    /// How long a plain call waits for a decision before it answers with the request.
    pub(crate) answer_after: Option<String>,
    pub(crate) separate_approver: Option<bool>,
    pub(crate) max_pending_per_agent: Option<u32>,
    pub(crate) max_pending: Option<u32>,
}

/// `[console]`: the operator console in the browser.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConsole {
    pub(crate) listen: Option<OneOrMany>,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) session_ttl: Option<String>,
}

/// `[tasks]`: tool calls run as tasks, and what they may hold.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTasks {
    pub(crate) max_open_per_agent: Option<u32>,
    pub(crate) max_open: Option<u32>,
    pub(crate) max_result_bytes: Option<u64>,
    pub(crate) max_stored_bytes_per_agent: Option<u64>,
    pub(crate) max_stored_bytes: Option<u64>,
    pub(crate) default_ttl: Option<String>,
    pub(crate) max_ttl: Option<String>,
    pub(crate) answer_within: Option<String>,
}

/// `[fleet]`: a PostgreSQL store shared by several hosts.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFleet {
    pub(crate) url: String,
    pub(crate) host_id: Option<String>,
    /// What to share: "approvals", "audit", "drift" (all by default).
    pub(crate) share: Option<Vec<String>>,
    pub(crate) connect_timeout: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub(crate) path: Option<String>,
    pub(crate) history_generations: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrpc {
    pub(crate) listen: Option<OneOrMany>,
    pub(crate) watch_backlog: Option<u32>,
}

/// `[mcp]`: the MCP endpoint agents connect to.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcp {
    pub(crate) listen: Option<OneOrMany>,
    pub(crate) page_size: Option<u32>,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    #[serde(default)]
    pub(crate) profiles: BTreeMap<String, RawProfile>,
}

/// `[mcp.profiles.NAME]`: a subset of the catalog served at `/mcp/NAME`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    pub(crate) names: Option<String>,
    /// Lazy exposure: the model sees `tools` plus `find_tools` and `call_tool`.
    pub(crate) lazy: Option<bool>,
    /// What `find_tools` and `call_tool` reach (globs over qualified names; default everything).
    pub(crate) find: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDaemon {
    pub(crate) shutdown_timeout: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetry {
    pub(crate) otlp_endpoint: Option<String>,
    pub(crate) service_name: Option<String>,
    pub(crate) traces: Option<bool>,
    pub(crate) metrics: Option<bool>,
    pub(crate) metrics_interval: Option<String>,
    pub(crate) export_timeout: Option<String>,
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
