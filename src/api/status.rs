//! The one place where errors become gRPC statuses. Each status carries a `google.rpc.ErrorInfo`
//! (domain `toolhost`) whose reason is stable and whose metadata names the server, the tool and
//! the generations involved.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::access::Refusal;
use crate::calls::{CallError, RaceKind};
use crate::catalog::store::StoreError;

const DOMAIN: &str = "toolhost";

/// Errors of the catalog reads, in the API's own terms.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("no tool {tool:?} on server {server:?}")]
    UnknownTool { server: String, tool: String },
    #[error("server {0:?} is disabled")]
    Disabled(String),
    #[error("the page token refers to catalog revision {0}, which is no longer kept; list again")]
    PageExpired(u64),
    #[error("toolhost is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Status {
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            ApiError::InvalidArgument(_) => (Code::InvalidArgument, "INVALID_REQUEST", vec![]),
            ApiError::UnknownServer(server) => (Code::NotFound, "UNKNOWN_SERVER", vec![("server", server)]),
            ApiError::UnknownTool { server, tool } => (Code::NotFound, "UNKNOWN_TOOL", vec![("server", server), ("tool", tool)]),
            ApiError::Disabled(server) => (Code::FailedPrecondition, "SERVER_DISABLED", vec![("server", server)]),
            ApiError::PageExpired(revision) => {
                (Code::FailedPrecondition, "PAGE_TOKEN_EXPIRED", vec![("catalog_revision", revision.to_string())])
            }
            ApiError::ShuttingDown => (Code::Unavailable, "SHUTTING_DOWN", vec![]),
            ApiError::Refused(refusal) => return refusal.into(),
            ApiError::Store(store) => return internal(&store),
        };
        status(code, message, reason, metadata)
    }
}

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Status {
        let message = refusal.to_string();
        let (code, reason, metadata) = match refusal {
            Refusal::Unauthenticated => (Code::Unauthenticated, "UNAUTHENTICATED", vec![]),
            Refusal::NoMatchingAgent { .. } => (Code::PermissionDenied, "NO_MATCHING_AGENT", vec![]),
            Refusal::NotAdmin { agent } => (Code::PermissionDenied, "ADMIN_REQUIRED", vec![("agent", agent)]),
        };
        status(code, message, reason, metadata)
    }
}

impl From<CallError> for Status {
    fn from(error: CallError) -> Status {
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            CallError::InvalidArguments(_) => (Code::InvalidArgument, "ARGUMENTS_NOT_AN_OBJECT", vec![]),
            CallError::UnknownTool { server, tool } => {
                (Code::NotFound, "UNKNOWN_TOOL", vec![("server", server.unwrap_or_default()), ("tool", tool)])
            }
            CallError::UnknownServer(server) => (Code::NotFound, "UNKNOWN_SERVER", vec![("server", server)]),
            CallError::Unavailable { server, tool, state, reason } => (
                Code::Unavailable,
                "SERVER_UNAVAILABLE",
                vec![("server", server), ("tool", tool), ("state", format!("{state:?}")), ("last_error", reason.unwrap_or_default())],
            ),
            CallError::Stale(stale) => {
                let reason = match stale.kind {
                    RaceKind::RemovedBeforeCall => "STALE_TOOL_REMOVED",
                    RaceKind::ChangedSinceListed => "STALE_TOOL_CHANGED",
                    RaceKind::UpstreamUnknownTool => "STALE_TOOL_UPSTREAM_UNKNOWN",
                };
                let mut metadata =
                    vec![("server", stale.server), ("tool", stale.tool), ("current_generation", stale.current_generation.to_string())];
                if let Some(removed) = stale.removed_in_generation {
                    metadata.push(("removed_in_generation", removed.to_string()));
                }
                if let Some(hash) = stale.current_hash {
                    metadata.push(("current_definition_hash", hash));
                }
                (Code::FailedPrecondition, reason, metadata)
            }
            CallError::RevisionNotKept(revision) => {
                (Code::FailedPrecondition, "REVISION_NOT_KEPT", vec![("catalog_revision", revision.to_string())])
            }
            CallError::TaskRequired { server, tool } => {
                (Code::FailedPrecondition, "TASK_REQUIRED", vec![("server", server), ("tool", tool)])
            }
            CallError::DeadlineExceeded { server, tool, generation, after } => (
                Code::DeadlineExceeded,
                "UPSTREAM_DEADLINE",
                vec![
                    ("server", server),
                    ("tool", tool),
                    ("generation", generation.to_string()),
                    ("timeout_ms", after.as_millis().to_string()),
                ],
            ),
            CallError::SessionLost { server, tool, generation } => {
                (Code::Unavailable, "OUTCOME_UNKNOWN", vec![("server", server), ("tool", tool), ("generation", generation.to_string())])
            }
            CallError::Overloaded { server, tool } => {
                (Code::ResourceExhausted, "SERVER_OVERLOADED", vec![("server", server), ("tool", tool)])
            }
            CallError::UpstreamInvalidParams { server, tool, generation, .. } => (
                Code::InvalidArgument,
                "UPSTREAM_INVALID_PARAMS",
                vec![("server", server), ("tool", tool), ("generation", generation.to_string())],
            ),
            CallError::Upstream { server, tool, generation, code, .. } => (
                Code::Unknown,
                "UPSTREAM_ERROR",
                vec![("server", server), ("tool", tool), ("generation", generation.to_string()), ("jsonrpc_code", code.to_string())],
            ),
            CallError::InvalidResult { server, tool, generation, .. } => {
                (Code::Unknown, "UPSTREAM_INVALID_RESULT", vec![("server", server), ("tool", tool), ("generation", generation.to_string())])
            }
            CallError::Store(detail) => return internal(&detail),
            CallError::NotAllowed { agent, tool } => (Code::PermissionDenied, "TOOL_NOT_ALLOWED", vec![("agent", agent), ("tool", tool)]),
        };
        status(code, message, reason, metadata)
    }
}

/// Longest message, and longest metadata value, a status carries: errors echo caller input (a
/// tool name) and upstream text, and a status must stay well inside a client's metadata limit.
const MAX_MESSAGE_BYTES: usize = 1024;
const MAX_METADATA_VALUE_BYTES: usize = 256;

fn status(code: Code, message: String, reason: &str, metadata: Vec<(&str, String)>) -> Status {
    // Scrubbed again at the door: whatever an upstream echoed, no secret leaves in a status.
    let clean = |text: String, max: usize| truncate(crate::secrets::redact_owned(text), max);
    let metadata: HashMap<String, String> = metadata.into_iter().map(|(k, v)| (k.to_owned(), clean(v, MAX_METADATA_VALUE_BYTES))).collect();
    Status::with_error_details(code, clean(message, MAX_MESSAGE_BYTES), ErrorDetails::with_error_info(reason, DOMAIN, metadata))
}

/// `text` cut to at most `max` bytes on a character boundary, marked when it was cut.
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// Internal failures are logged in full here; clients get a generic message.
fn internal(error: &dyn std::fmt::Display) -> Status {
    tracing::error!(%error, "internal error while serving a request");
    status(Code::Internal, "internal error in toolhost (see its log)".to_owned(), "INTERNAL", vec![])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_input_is_cut_to_a_bound() {
        let status = Status::from(CallError::UnknownTool { server: None, tool: "é".repeat(500_000) });
        assert!(status.message().len() <= MAX_MESSAGE_BYTES);
        let (_, metadata) = {
            let info = status.get_details_error_info().unwrap();
            (info.reason, info.metadata)
        };
        assert!(metadata["tool"].len() <= MAX_METADATA_VALUE_BYTES && metadata["tool"].ends_with('…'));
        assert_eq!(truncate("short".to_owned(), 10), "short");
    }
}
