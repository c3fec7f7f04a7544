//! The configuration file as written: serde shapes for the TOML file and the desktop-client
//! `mcpServers` JSON file. Nothing here is validated; `config::validate` does that.

use std::collections::BTreeMap;

use serde::Deserialize;

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

/// `[audit]`: where the audit trail is sent as it is written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAudit {
    #[serde(default)]
    pub(crate) export: Vec<RawExport>,
    /// Sign the chain's head after this many records…
    pub(crate) checkpoint_records: Option<u32>,
    /// …or this long after the last checkpoint when there are new ones.
    pub(crate) checkpoint_every: Option<String>,
    /// The signing key's file, instead of `audit.key` beside the store.
    pub(crate) key: Option<String>,
}

/// One `[audit] export` sink: `{ file = "/var/log/toolhost/audit.jsonl" }` or `{ unix = "/run/siem.sock" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExport {
    pub(crate) file: Option<String>,
    pub(crate) unix: Option<String>,
    /// `host:port` of a syslog receiver (RFC 5424 over TCP, RFC 6587 octet counting).
    pub(crate) syslog: Option<String>,
    /// Syslog over TLS (RFC 5425): `true`, checked against the usual roots or `ca`.
    pub(crate) tls: Option<bool>,
    /// A PEM file of the certificate authorities a TLS syslog receiver is checked against.
    pub(crate) ca: Option<String>,
    /// `http://host:port` of an OpenTelemetry collector's OTLP/gRPC endpoint: records as logs.
    pub(crate) otlp: Option<String>,
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

/// `[access]`: who may see and call what.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccess {
    pub(crate) default: Option<String>,
    #[serde(default)]
    pub(crate) agents: Vec<RawAgent>,
    /// How long audit records are kept, and how many at most.
    pub(crate) audit_retention: Option<String>,
    pub(crate) audit_max_records: Option<u64>,
}

/// One `[[access.agents]]` entry.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) uids: Vec<u32>,
    #[serde(default)]
    pub(crate) gids: Vec<u32>,
    #[serde(default)]
    pub(crate) users: Vec<String>,
    #[serde(default)]
    pub(crate) groups: Vec<String>,
    #[serde(default)]
    pub(crate) units: Vec<String>,
    #[serde(default)]
    pub(crate) tokens: Vec<String>,
    /// Client certificate subjects (RFC 4514, globs), for TLS listeners with a client CA.
    #[serde(default)]
    pub(crate) subjects: Vec<String>,
    #[serde(default)]
    pub(crate) allow: Vec<String>,
    #[serde(default)]
    pub(crate) deny: Vec<String>,
    #[serde(default)]
    pub(crate) admin: bool,
    /// Calls in flight at once across every server (default 1024).
    pub(crate) concurrency: Option<u32>,
    /// `{ calls = 10, per = "1s", burst = 20 }`.
    pub(crate) rate: Option<RawRate>,
    /// `{ tools = ["billing__*"], calls = 10, per = "1d" }`, or a list of them.
    pub(crate) quota: Option<RawQuotas>,
    /// Globs over qualified names whose calls wait for a person's approval.
    #[serde(default)]
    pub(crate) approve: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawQuotas {
    One(RawQuota),
    Many(Vec<RawQuota>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuota {
    pub(crate) tools: Vec<String>,
    pub(crate) calls: u32,
    pub(crate) per: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRate {
    pub(crate) calls: u32,
    pub(crate) per: String,
    pub(crate) burst: Option<u32>,
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

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(RawListen),
    Many(Vec<RawListen>),
}

/// A listener: an address, or a table with an address and, for a Unix socket, its access.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawListen {
    Address(String),
    Table(RawListenTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListenTable {
    pub(crate) address: String,
    /// Octal permission bits of the socket file, e.g. "0660".
    pub(crate) mode: Option<String>,
    /// The group that owns the socket file: a name or a numeric id.
    pub(crate) group: Option<String>,
    /// TLS for a TCP listener.
    pub(crate) tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    /// PEM certificate chain and private key of the listener.
    pub(crate) cert: String,
    pub(crate) key: String,
    /// PEM certificates of the CA that signs client certificates; a client that presents one
    /// is identified by its certificate's subject.
    pub(crate) client_ca: Option<String>,
}

/// One `[servers.NAME]` table: the `mcpServers` keys plus toolhost's own settings.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    // --- the keys desktop MCP clients use ---
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
    // --- toolhost's settings ---
    /// Variables of the daemon's environment a stdio server also gets (beyond the base set).
    #[serde(default)]
    pub(crate) inherit_env: Vec<String>,
    /// What the audit trail keeps of a call's arguments: "none", "hash" or "full".
    pub(crate) audit_arguments: Option<String>,
    /// "accept" or "hold": a changed definition.
    pub(crate) changes: Option<String>,
    /// "accept" or "hold": a tool never approved.
    pub(crate) new_tools: Option<String>,
    /// TOOL = "sha256:…".
    #[serde(default)]
    pub(crate) pins: BTreeMap<String, String>,
    pub(crate) ca_file: Option<String>,
    /// How toolhost authorizes itself to an HTTP server.
    pub(crate) auth: Option<super::auth::RawAuth>,
    pub(crate) protocol: Option<String>,
    /// What makes this server the same server on every host of a fleet (default: its URL, or
    /// its command and arguments).
    pub(crate) fleet_identity: Option<String>,
    pub(crate) enabled: Option<bool>,
    pub(crate) request_timeout: Option<String>,
    pub(crate) enumeration_timeout: Option<String>,
    pub(crate) max_pages: Option<u32>,
    pub(crate) max_tools: Option<u32>,
    pub(crate) max_listing_bytes: Option<u64>,
    pub(crate) max_message_bytes: Option<u64>,
    pub(crate) shutdown_grace: Option<String>,
    pub(crate) max_concurrent_calls: Option<u32>,
    #[serde(default)]
    pub(crate) restart: RawRestart,
    /// A stdio server's sandbox: "on" (the default) or "off".
    pub(crate) sandbox: Option<String>,
    #[serde(default)]
    pub(crate) read: Vec<String>,
    #[serde(default)]
    pub(crate) write: Vec<String>,
    /// "none" (the default), "loopback", "all", or `{ allow = ["host[:port]", …] }`.
    pub(crate) network: Option<super::sandbox::RawNetwork>,
    /// A package launcher's registry besides its `network` (true, the default) or not (false).
    pub(crate) registry: Option<super::sandbox::RawRegistry>,
    pub(crate) limits: Option<super::sandbox::RawLimits>,
    /// Globs over this server's tool names whose calls wait for a person's approval, whoever calls.
    #[serde(default)]
    pub(crate) approve: Vec<String>,
    /// A stdio server's own data directory, kept across restarts and package updates: `true`
    /// (beside the homes) or an absolute path; `${data}` in its `env` names it.
    pub(crate) data: Option<super::sandbox::RawData>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRestart {
    pub(crate) initial_backoff: Option<String>,
    pub(crate) max_backoff: Option<String>,
    pub(crate) stable_after: Option<String>,
    pub(crate) crash_loop_after: Option<u32>,
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
