//! What a call can end in besides a result: the typed errors, the kinds of stale-tool race,
//! and `CallError::explain`, the one table of reasons and facts every front door maps to its
//! protocol's codes.

use std::time::Duration;

use super::ContinuationError;
use crate::catalog::integrity::Hold;
use crate::registry::ServerState;

/// The kinds of stale-tool race.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RaceKind {
    /// The tool is not in its server's current generation.
    RemovedBeforeCall,
    /// The caller's definition hash or revision is older than the current definition.
    ChangedSinceListed,
    /// The server said it does not know a tool toolhost listed.
    UpstreamUnknownTool,
}

/// A stale-tool race, with what the caller needs to recover.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StaleTool {
    pub kind: RaceKind,
    pub server: String,
    pub tool: String,
    pub current_generation: u64,
    pub removed_in_generation: Option<u64>,
    pub current_hash: Option<String>,
    pub detail: String,
}

/// Serializable: a task that failed keeps the error its call came to, and each door shows it as
/// it would have shown the call's.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum CallError {
    #[error("the arguments are not a JSON object: {0}")]
    InvalidArguments(String),
    #[error("no tool {tool:?}{}", server.as_deref().map(|s| format!(" on server {s:?}")).unwrap_or_default())]
    UnknownTool { server: Option<String>, tool: String },
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("server {server:?} is not available ({state:?}){}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Unavailable { server: String, tool: String, state: ServerState, reason: Option<String> },
    #[error("stale tool {}/{}: {}", .0.server, .0.tool, .0.detail)]
    Stale(Box<StaleTool>),
    #[error("catalog revision {0} is no longer kept; send the definition hash instead")]
    RevisionNotKept(u64),
    #[error("{server}/{tool} did not answer within {after:?}")]
    DeadlineExceeded { server: String, tool: String, generation: u64, after: Duration },
    #[error("the session with {server:?} ended, or its exchange broke, after the call was sent; its outcome is unknown and it was not retried{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    SessionLost { server: String, tool: String, generation: u64, detail: Option<String> },
    #[error("{server:?} is not reading its input; try again later")]
    Overloaded { server: String, tool: String },
    #[error("agent {agent:?} has {limit} calls in flight, its share: try again when some have ended")]
    CallerBusy { agent: String, limit: usize },
    #[error("agent {agent:?} may start {calls} calls per {per:?} and has: try again in {retry_after:?}")]
    RateLimited { agent: String, calls: u32, per: Duration, retry_after: Duration },
    #[error("agent {agent:?} may call {tool:?} {calls} times per {per:?} and has: the quota renews in {retry_after:?}")]
    QuotaExhausted { agent: String, tool: String, calls: u32, per: Duration, retry_after: Duration },
    #[error("{server}/{tool} rejected the arguments: {message}")]
    UpstreamInvalidParams { server: String, tool: String, generation: u64, message: String },
    #[error("{server}/{tool} failed with JSON-RPC error {code}: {message}")]
    Upstream { server: String, tool: String, generation: u64, code: i64, message: String },
    #[error("{server}/{tool} answered with an invalid result: {message}")]
    InvalidResult { server: String, tool: String, generation: u64, message: String },
    #[error("{server}/{tool} is held ({}): its definition {offered_hash} is not the approved one{}; an operator must review and approve it", hold.as_str(), approved_hash.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    DefinitionHeld { server: String, tool: String, hold: Hold, approved_hash: Option<String>, offered_hash: String },
    #[error("{server}/{tool} can only run as an MCP task (execution.taskSupport = required), which toolhost does not offer")]
    TaskRequired { server: String, tool: String },
    #[error("catalog store: {0}")]
    Store(String),
    #[error(transparent)]
    Continuation(#[from] ContinuationError),
    /// An operator asked for a tool its own allow and deny lists exclude (anyone else is told
    /// the tool does not exist).
    #[error("agent {agent:?} may not use {tool:?} (its allow and deny lists)")]
    NotAllowed { agent: String, tool: String },
    #[error(transparent)]
    Approval(#[from] ApprovalError),
}

/// Why a call that needs a person's approval did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ApprovalError {
    #[error(
        "the call waits for an operator's approval: request {id}, which expires at {} (in {} s). To approve it: `{}`. {}",
        expires_text(*expires_at_ms), seconds_left(*expires_at_ms), approve_command(id),
        task.as_deref().map_or_else(|| "Then ask again with the same arguments: that call runs.".to_owned(), |task| format!("Task {task} runs it once approved: `{}` prints the result (or ask again with the same arguments).", result_command(task)))
    )]
    Pending { id: String, expires_at_ms: i64, task: Option<String> },
    #[error("an operator denied the call (request {id}, by {by}){}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Denied { id: String, by: String, reason: Option<String> },
    #[error("the approval request {id} expired before it was decided or used; the call did not run")]
    Expired { id: String },
    #[error("the approval {id} no longer holds: {what} changed since it was asked for; the call did not run")]
    Stale { id: String, what: String },
    #[error("{whose} has {limit} calls waiting for approval, all it may: wait for some to be decided")]
    TooMany { whose: String, limit: u32 },
}

impl ApprovalError {
    fn kind(&self) -> &'static str {
        match self {
            ApprovalError::Pending { .. } => "approval_pending",
            ApprovalError::Denied { .. } => "approval_denied",
            ApprovalError::Expired { .. } => "approval_expired",
            ApprovalError::Stale { .. } => "approval_stale",
            ApprovalError::TooMany { .. } => "approvals_exhausted",
        }
    }

    fn explain(&self) -> (&'static str, Vec<(&'static str, String)>) {
        match self {
            ApprovalError::Pending { id, expires_at_ms, task } => {
                let mut details = vec![
                    ("approval_id", id.clone()),
                    ("expires_at_unix_ms", expires_at_ms.to_string()),
                    ("expires_at", expires_text(*expires_at_ms)),
                    ("expires_in_seconds", seconds_left(*expires_at_ms).to_string()),
                    ("approve_command", approve_command(id)),
                ];
                if let Some(task) = task {
                    details.push(("task_id", task.clone()));
                    details.push(("result_command", result_command(task)));
                }
                ("APPROVAL_PENDING", details)
            }
            ApprovalError::Denied { id, by, reason } => (
                "APPROVAL_DENIED",
                vec![("approval_id", id.clone()), ("decided_by", by.clone()), ("reason", reason.clone().unwrap_or_default())],
            ),
            ApprovalError::Expired { id } => ("APPROVAL_EXPIRED", vec![("approval_id", id.clone())]),
            ApprovalError::Stale { id, what } => ("APPROVAL_STALE", vec![("approval_id", id.clone()), ("changed", what.clone())]),
            ApprovalError::TooMany { whose, limit } => {
                ("APPROVALS_EXHAUSTED", vec![("whose", whose.clone()), ("limit", limit.to_string())])
            }
        }
    }
}

/// The command an operator runs to approve request `id`.
fn approve_command(id: &str) -> String {
    format!("toolhost approvals approve {id}")
}

/// The command that waits for task `task` and prints its result.
fn result_command(task: &str) -> String {
    format!("toolhost task {task} --wait")
}

/// `at_ms` as RFC 3339 (UTC, seconds).
fn expires_text(at_ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Whole seconds from now until `at_ms` (0 once past).
fn seconds_left(at_ms: i64) -> u64 {
    u64::try_from(at_ms.saturating_sub(crate::catalog::record::now_ms())).unwrap_or(0) / 1000
}

// === impl RaceKind ===

impl RaceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RaceKind::RemovedBeforeCall => "removed_before_call",
            RaceKind::ChangedSinceListed => "changed_since_listed",
            RaceKind::UpstreamUnknownTool => "upstream_unknown_tool",
        }
    }
}

// === impl CallError ===

impl CallError {
    /// A short, stable name for `error.type` on spans and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::InvalidArguments(_) => "invalid_arguments",
            CallError::UnknownTool { .. } => "unknown_tool",
            CallError::UnknownServer(_) => "unknown_server",
            CallError::Unavailable { .. } => "unavailable",
            CallError::Stale(_) => "stale_tool",
            CallError::RevisionNotKept(_) => "revision_not_kept",
            CallError::DeadlineExceeded { .. } => "timeout",
            CallError::SessionLost { .. } => "session_lost",
            CallError::Overloaded { .. } => "overloaded",
            CallError::CallerBusy { .. } => "concurrency_limited",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::QuotaExhausted { .. } => "quota_exhausted",
            CallError::UpstreamInvalidParams { .. } => "invalid_params",
            CallError::Upstream { .. } => "upstream_error",
            CallError::InvalidResult { .. } => "invalid_result",
            CallError::TaskRequired { .. } => "task_required",
            CallError::DefinitionHeld { .. } => "definition_held",
            CallError::Store(_) => "internal",
            CallError::Continuation(_) => "continuation",
            CallError::NotAllowed { .. } => "denied",
            CallError::Approval(approval) => approval.kind(),
        }
    }

    /// The server and tool (its upstream name) of a call that was resolved to a real tool
    /// before it failed; `None` for a refusal or a name nothing answers to.
    pub fn resolved_tool(&self) -> Option<(&str, &str)> {
        match self {
            CallError::Unavailable { server, tool, .. }
            | CallError::DeadlineExceeded { server, tool, .. }
            | CallError::SessionLost { server, tool, .. }
            | CallError::Overloaded { server, tool }
            | CallError::UpstreamInvalidParams { server, tool, .. }
            | CallError::Upstream { server, tool, .. }
            | CallError::InvalidResult { server, tool, .. }
            | CallError::TaskRequired { server, tool }
            | CallError::DefinitionHeld { server, tool, .. } => Some((server, tool)),
            _ => None,
        }
    }

    /// The server the error concerns, when it is known.
    pub fn server(&self) -> Option<&str> {
        match self {
            CallError::Unavailable { server, .. }
            | CallError::DeadlineExceeded { server, .. }
            | CallError::SessionLost { server, .. }
            | CallError::Overloaded { server, .. }
            | CallError::UpstreamInvalidParams { server, .. }
            | CallError::Upstream { server, .. }
            | CallError::InvalidResult { server, .. }
            | CallError::TaskRequired { server, .. }
            | CallError::DefinitionHeld { server, .. } => Some(server),
            CallError::Stale(stale) => Some(&stale.server),
            CallError::UnknownTool { server, .. } => server.as_deref(),
            CallError::UnknownServer(server) => Some(server),
            CallError::Continuation(ContinuationError::OtherTool { server, .. }) => Some(server),
            CallError::InvalidArguments(_)
            | CallError::RevisionNotKept(_)
            | CallError::Store(_)
            | CallError::NotAllowed { .. }
            | CallError::CallerBusy { .. }
            | CallError::RateLimited { .. }
            | CallError::QuotaExhausted { .. }
            | CallError::Approval(_)
            | CallError::Continuation(_) => None,
        }
    }
}

/// What a front door tells a caller about a failed call, whatever its protocol: a stable reason
/// (gRPC `ErrorInfo.reason`, MCP `error.data.reason`) and the facts that help it recover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    pub reason: &'static str,
    pub details: Vec<(&'static str, String)>,
}

impl CallError {
    /// The reason and facts for this error; the one table every front door uses.
    pub fn explain(&self) -> Explained {
        let at = |server: &str, tool: &str, generation: u64| {
            vec![("server", server.to_owned()), ("tool", tool.to_owned()), ("generation", generation.to_string())]
        };
        let (reason, details) = match self {
            CallError::InvalidArguments(_) => ("ARGUMENTS_NOT_AN_OBJECT", vec![]),
            CallError::UnknownTool { server, tool } => {
                ("UNKNOWN_TOOL", vec![("server", server.clone().unwrap_or_default()), ("tool", tool.clone())])
            }
            CallError::UnknownServer(server) => ("UNKNOWN_SERVER", vec![("server", server.clone())]),
            CallError::Unavailable { server, tool, state, reason } => (
                "SERVER_UNAVAILABLE",
                vec![
                    ("server", server.clone()),
                    ("tool", tool.clone()),
                    ("state", format!("{state:?}")),
                    ("last_error", reason.clone().unwrap_or_default()),
                ],
            ),
            CallError::Stale(stale) => {
                let reason = match stale.kind {
                    RaceKind::RemovedBeforeCall => "STALE_TOOL_REMOVED",
                    RaceKind::ChangedSinceListed => "STALE_TOOL_CHANGED",
                    RaceKind::UpstreamUnknownTool => "STALE_TOOL_UPSTREAM_UNKNOWN",
                };
                let mut details = vec![
                    ("server", stale.server.clone()),
                    ("tool", stale.tool.clone()),
                    ("current_generation", stale.current_generation.to_string()),
                ];
                if let Some(removed) = stale.removed_in_generation {
                    details.push(("removed_in_generation", removed.to_string()));
                }
                if let Some(hash) = &stale.current_hash {
                    details.push(("current_definition_hash", hash.clone()));
                }
                (reason, details)
            }
            CallError::RevisionNotKept(revision) => ("REVISION_NOT_KEPT", vec![("catalog_revision", revision.to_string())]),
            CallError::TaskRequired { server, tool } => ("TASK_REQUIRED", vec![("server", server.clone()), ("tool", tool.clone())]),
            CallError::DefinitionHeld { server, tool, hold, approved_hash, offered_hash } => (
                "DEFINITION_HELD",
                vec![
                    ("server", server.clone()),
                    ("tool", tool.clone()),
                    ("hold", hold.as_str().to_owned()),
                    ("approved_hash", approved_hash.clone().unwrap_or_default()),
                    ("offered_hash", offered_hash.clone()),
                ],
            ),
            CallError::DeadlineExceeded { server, tool, generation, after } => {
                let mut details = at(server, tool, *generation);
                details.push(("timeout_ms", after.as_millis().to_string()));
                ("UPSTREAM_DEADLINE", details)
            }
            CallError::SessionLost { server, tool, generation, .. } => ("OUTCOME_UNKNOWN", at(server, tool, *generation)),
            CallError::Overloaded { server, tool } => ("SERVER_OVERLOADED", vec![("server", server.clone()), ("tool", tool.clone())]),
            CallError::CallerBusy { agent, limit } => ("CONCURRENCY_LIMITED", vec![("agent", agent.clone()), ("limit", limit.to_string())]),
            CallError::QuotaExhausted { agent, tool, calls, per, retry_after } => {
                let mut details = over_limit(agent, *calls, *per, *retry_after);
                details.insert(1, ("tool", tool.clone()));
                ("QUOTA_EXHAUSTED", details)
            }
            CallError::RateLimited { agent, calls, per, retry_after } => ("RATE_LIMITED", over_limit(agent, *calls, *per, *retry_after)),
            CallError::UpstreamInvalidParams { server, tool, generation, .. } => ("UPSTREAM_INVALID_PARAMS", at(server, tool, *generation)),
            CallError::Upstream { server, tool, generation, code, .. } => {
                let mut details = at(server, tool, *generation);
                details.push(("jsonrpc_code", code.to_string()));
                ("UPSTREAM_ERROR", details)
            }
            CallError::InvalidResult { server, tool, generation, .. } => ("UPSTREAM_INVALID_RESULT", at(server, tool, *generation)),
            CallError::Store(_) => ("INTERNAL", vec![]),
            CallError::Continuation(problem) => match problem {
                ContinuationError::Unknown => ("CONTINUATION_UNKNOWN", vec![]),
                ContinuationError::OtherTool { server, tool } => {
                    ("CONTINUATION_OTHER_TOOL", vec![("server", server.clone()), ("tool", tool.clone())])
                }
                ContinuationError::InvalidResponses(_) | ContinuationError::Incomplete => ("INPUT_RESPONSES_INVALID", vec![]),
                ContinuationError::TooMany => ("CONTINUATIONS_EXHAUSTED", vec![]),
            },
            CallError::NotAllowed { agent, tool } => ("TOOL_NOT_ALLOWED", vec![("agent", agent.clone()), ("tool", tool.clone())]),
            CallError::Approval(approval) => approval.explain(),
        };
        Explained { reason, details }
    }
}

/// What a refusal at an agent's rate or quota tells: whose, the limit, and when to retry.
fn over_limit(agent: &str, calls: u32, per: Duration, retry_after: Duration) -> Vec<(&'static str, String)> {
    vec![
        ("agent", agent.to_owned()),
        ("limit", format!("{calls} per {}", humantime::format_duration(per))),
        ("retry_after_ms", retry_after.as_millis().max(1).to_string()),
    ]
}
