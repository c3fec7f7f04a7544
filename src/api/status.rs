//! The one place where errors become gRPC statuses. Each status carries a `google.rpc.ErrorInfo`
//! (domain `toolhost`) whose reason is stable and whose metadata names the server, the tool and
//! the generations involved.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::access::Refusal;
use crate::calls::{ApprovalError, CallError, ContinuationError};
use crate::store::StoreError;
use crate::supervisor::integrity::ApproveError;

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

/// Why a login through the daemon cannot go on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoginError {
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("{0} does not use the authorization code grant: there is no login for it")]
    NotApplicable(String),
    #[error("{server}: {error}")]
    Auth { server: String, error: crate::upstream::oauth::authorizer::AuthError },
}

impl From<crate::supervisor::OperateError> for ApiError {
    fn from(error: crate::supervisor::OperateError) -> ApiError {
        match error {
            crate::supervisor::OperateError::UnknownServer(server) => ApiError::UnknownServer(server),
            crate::supervisor::OperateError::Disabled(server) => ApiError::Disabled(server),
        }
    }
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
            Refusal::ServerProcess { .. } => (Code::PermissionDenied, "SERVER_PROCESS", vec![]),
        };
        status(code, message, reason, metadata)
    }
}

impl From<ApproveError> for Status {
    fn from(error: ApproveError) -> Status {
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            ApproveError::UnknownServer(server) => (Code::NotFound, "UNKNOWN_SERVER", vec![("server", server)]),
            ApproveError::UnknownTool { server, tool } => (Code::NotFound, "UNKNOWN_TOOL", vec![("server", server), ("tool", tool)]),
            ApproveError::Pinned { server, tool } => (Code::FailedPrecondition, "TOOL_PINNED", vec![("server", server), ("tool", tool)]),
            ApproveError::HashMismatch { server, tool, expected, offered } => (
                Code::FailedPrecondition,
                "DEFINITION_CHANGED",
                vec![("server", server), ("tool", tool), ("expected_hash", expected), ("offered_hash", offered)],
            ),
            ApproveError::NothingNamed | ApproveError::HashNeedsOneTool | ApproveError::HashTooShort(_) => {
                (Code::InvalidArgument, "BAD_APPROVAL", vec![])
            }
            ApproveError::Store(error) => return internal(&error),
        };
        status(code, message, reason, metadata)
    }
}

impl From<LoginError> for Status {
    fn from(error: LoginError) -> Status {
        use crate::upstream::oauth::authorizer::AuthError;
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            LoginError::UnknownServer(server) => (Code::NotFound, "UNKNOWN_SERVER", vec![("server", server)]),
            LoginError::NotApplicable(server) => (Code::FailedPrecondition, "LOGIN_NOT_APPLICABLE", vec![("server", server)]),
            LoginError::Auth { server, error: AuthError::Unavailable(_) } => {
                (Code::Unavailable, "AUTHORIZATION_SERVER_UNAVAILABLE", vec![("server", server)])
            }
            LoginError::Auth { server, error: AuthError::Required(_) | AuthError::Refused(_) } => {
                (Code::FailedPrecondition, "AUTHORIZATION_FAILED", vec![("server", server)])
            }
        };
        status(code, message, reason, metadata)
    }
}

impl From<crate::fleet::FleetError> for Status {
    fn from(error: crate::fleet::FleetError) -> Status {
        use crate::fleet::FleetError;
        let message = error.to_string();
        let (code, reason) = match error {
            FleetError::NotConfigured => (Code::FailedPrecondition, "FLEET_NOT_CONFIGURED"),
            FleetError::SchemaOlder { .. } | FleetError::SchemaNewer { .. } | FleetError::Foreign => {
                (Code::FailedPrecondition, "FLEET_SCHEMA_MISMATCH")
            }
            FleetError::Connect(_) | FleetError::Timeout(_) | FleetError::Database(_) => (Code::Unavailable, "FLEET_UNAVAILABLE"),
            FleetError::Store(store) => return internal(&store),
        };
        status(code, message, reason, vec![])
    }
}

impl From<CallError> for Status {
    fn from(error: CallError) -> Status {
        let code = match &error {
            CallError::InvalidArguments(_) | CallError::UpstreamInvalidParams { .. } => Code::InvalidArgument,
            CallError::UnknownTool { .. } | CallError::UnknownServer(_) => Code::NotFound,
            CallError::Unavailable { .. } | CallError::SessionLost { .. } => Code::Unavailable,
            CallError::Stale(_) | CallError::RevisionNotKept(_) | CallError::TaskRequired { .. } | CallError::DefinitionHeld { .. } => {
                Code::FailedPrecondition
            }
            CallError::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            CallError::Overloaded { .. }
            | CallError::CallerBusy { .. }
            | CallError::RateLimited { .. }
            | CallError::QuotaExhausted { .. } => Code::ResourceExhausted,
            CallError::Upstream { .. } | CallError::InvalidResult { .. } => Code::Unknown,
            CallError::NotAllowed { .. } => Code::PermissionDenied,
            CallError::Approval(approval) => match approval {
                ApprovalError::Denied { .. } => Code::PermissionDenied,
                ApprovalError::TooMany { .. } => Code::ResourceExhausted,
                ApprovalError::Pending { .. } | ApprovalError::Expired { .. } | ApprovalError::Stale { .. } => Code::FailedPrecondition,
            },
            CallError::Continuation(problem) => match problem {
                ContinuationError::Unknown => Code::FailedPrecondition,
                ContinuationError::TooMany => Code::ResourceExhausted,
                ContinuationError::OtherTool { .. } | ContinuationError::InvalidResponses(_) | ContinuationError::Incomplete => {
                    Code::InvalidArgument
                }
            },
            CallError::Store(detail) => return internal(detail),
        };
        let explained = error.explain();
        let mut status = status(code, error.to_string(), explained.reason, explained.details);
        if let CallError::RateLimited { retry_after, .. } | CallError::QuotaExhausted { retry_after, .. } = &error {
            // RetryInfo beside the ErrorInfo: what gRPC clients' retry policies read.
            let mut details = status.get_error_details();
            details.set_retry_info(Some(*retry_after));
            status = Status::with_error_details(status.code(), status.message().to_owned(), details);
        }
        status
    }
}

impl From<crate::door::tasks::TaskError> for Status {
    fn from(error: crate::door::tasks::TaskError) -> Status {
        use crate::door::tasks::TaskError;
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            TaskError::Call(error) => return error.into(),
            TaskError::TooManyForAgent { agent, limit } => {
                (Code::ResourceExhausted, "TASKS_LIMITED", vec![("agent", agent), ("limit", limit.to_string())])
            }
            TaskError::TooMany { limit } => (Code::ResourceExhausted, "TASKS_LIMITED", vec![("limit", limit.to_string())]),
            TaskError::StorageFull { limit, .. } => (Code::ResourceExhausted, "TASK_STORAGE_FULL", vec![("limit", limit.to_string())]),
            TaskError::Unknown(id) => (Code::NotFound, "UNKNOWN_TASK", vec![("task_id", id)]),
            TaskError::Ended { id, status } => {
                (Code::FailedPrecondition, "TASK_ENDED", vec![("task_id", id), ("status", status.to_owned())])
            }
            TaskError::ShuttingDown => (Code::Unavailable, "SHUTTING_DOWN", vec![]),
            TaskError::NoRandom => return internal(&error),
            TaskError::Store(store) => return internal(&store),
        };
        status(code, message, reason, metadata)
    }
}

impl From<crate::door::approvals::DecideError> for Status {
    fn from(error: crate::door::approvals::DecideError) -> Status {
        use crate::door::approvals::DecideError;
        let message = error.to_string();
        let (code, reason, metadata) = match error {
            DecideError::Unknown(id) => (Code::NotFound, "UNKNOWN_APPROVAL", vec![("approval_id", id)]),
            DecideError::NotPending { id, status } => {
                (Code::FailedPrecondition, "APPROVAL_NOT_PENDING", vec![("approval_id", id), ("status", status.to_owned())])
            }
            DecideError::OwnRequest { operator } => (Code::PermissionDenied, "SEPARATE_APPROVER", vec![("operator", operator)]),
            DecideError::Store(store) => return internal(&store),
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

pub(crate) use crate::door::truncate;

/// Internal failures are logged in full here; clients get a generic message.
fn internal(error: &dyn std::fmt::Display) -> Status {
    tracing::error!(%error, "internal error while serving a request");
    status(Code::Internal, "internal error in toolhost (see its log)".to_owned(), "INTERNAL", vec![])
}

/// A gRPC status code as the RPC conventions name it in `rpc.response.status_code`.
pub(super) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
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
