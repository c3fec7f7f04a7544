//! The front doors' one error type. Whatever went wrong below the door (a call, a task, an
//! approval, an operator's action, the store, the fleet store, a login), a door sees a
//! [`DoorError`]: a kind (what class of failure, in no protocol's words), a stable reason (gRPC
//! `ErrorInfo.reason`, MCP `error.data.reason`, the console's page), the message and the facts
//! that help the caller recover. Each door maps a kind to its own wire code in one place; the
//! classification itself is made once, here.

use std::time::Duration;

use crate::access::Refusal;
use crate::calls::{ApprovalError, CallError, ContinuationError};
use crate::fleet::FleetError;
use crate::store::StoreError;
use crate::supervisor::OperateError;
use crate::supervisor::integrity::ApproveError;
use crate::upstream::oauth::authorizer::AuthError;

use super::approvals::DecideError;
use super::tasks::TaskError;

/// What class of failure: each door has one table from this to its wire's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    InvalidArgument,
    NotFound,
    /// The request is well formed but the state it needs is not there (disabled, ended, stale).
    FailedPrecondition,
    PermissionDenied,
    Unauthenticated,
    ResourceExhausted,
    Unavailable,
    DeadlineExceeded,
    /// The upstream server failed the call, or answered something toolhost cannot pass on.
    Upstream,
    /// toolhost's own failure: logged in full where it is made, told to the caller generically.
    Internal,
}

/// An error as a front door tells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DoorError {
    pub kind: Kind,
    pub reason: &'static str,
    pub message: String,
    pub facts: Vec<(&'static str, String)>,
    /// When a retry may succeed (a rate or a quota).
    pub retry_after: Option<Duration>,
}

/// What a caller is told about toolhost's own failures; the details are in the daemon's log.
pub const INTERNAL_MESSAGE: &str = "internal error in toolhost (see its log)";

impl DoorError {
    pub fn new(kind: Kind, reason: &'static str, message: impl Into<String>, facts: Vec<(&'static str, String)>) -> DoorError {
        DoorError { kind, reason, message: message.into(), facts, retry_after: None }
    }

    /// toolhost's own failure: logged here in full (a few a second at most, with how many were
    /// not: callers pace these, a full disk answers every request with one), told generically.
    pub fn internal(error: &dyn std::fmt::Display) -> DoorError {
        static LOGGED: std::sync::OnceLock<crate::telemetry::throttle::Throttle> = std::sync::OnceLock::new();
        if let Some(suppressed) = LOGGED.get_or_init(|| crate::telemetry::throttle::Throttle::new(5)).admit() {
            tracing::error!(%error, suppressed, "internal error while serving a request");
        }
        DoorError::new(Kind::Internal, "INTERNAL", INTERNAL_MESSAGE, vec![])
    }

    pub fn invalid(message: impl Into<String>) -> DoorError {
        DoorError::new(Kind::InvalidArgument, "INVALID_REQUEST", message, vec![])
    }

    pub fn unknown_server(server: &str) -> DoorError {
        DoorError::new(Kind::NotFound, "UNKNOWN_SERVER", format!("no server named {server:?}"), vec![("server", server.to_owned())])
    }

    pub fn unknown_tool(server: &str, tool: &str) -> DoorError {
        DoorError::new(
            Kind::NotFound,
            "UNKNOWN_TOOL",
            format!("no tool {tool:?} on server {server:?}"),
            vec![("server", server.to_owned()), ("tool", tool.to_owned())],
        )
    }

    pub fn page_expired(revision: u64) -> DoorError {
        DoorError::new(
            Kind::FailedPrecondition,
            "PAGE_TOKEN_EXPIRED",
            format!("the page token refers to catalog revision {revision}, which is no longer kept; list again"),
            vec![("catalog_revision", revision.to_string())],
        )
    }

    pub fn shutting_down() -> DoorError {
        DoorError::new(Kind::Unavailable, "SHUTTING_DOWN", "toolhost is shutting down", vec![])
    }

    /// A login asked for a server that has none (it does not use the authorization code grant).
    pub fn no_login(server: &str) -> DoorError {
        DoorError::new(
            Kind::FailedPrecondition,
            "LOGIN_NOT_APPLICABLE",
            format!("{server} does not use the authorization code grant: there is no login for it"),
            vec![("server", server.to_owned())],
        )
    }

    /// An OAuth login or logout of `server` failed.
    pub fn login(server: &str, error: AuthError) -> DoorError {
        let (kind, reason) = match error {
            AuthError::Unavailable(_) => (Kind::Unavailable, "AUTHORIZATION_SERVER_UNAVAILABLE"),
            AuthError::Required(_) | AuthError::Refused(_) => (Kind::FailedPrecondition, "AUTHORIZATION_FAILED"),
        };
        DoorError::new(kind, reason, format!("{server}: {error}"), vec![("server", server.to_owned())])
    }

    pub fn is_internal(&self) -> bool {
        self.kind == Kind::Internal
    }
}

impl From<Refusal> for DoorError {
    fn from(refusal: Refusal) -> DoorError {
        let message = refusal.to_string();
        let (kind, reason, facts) = match refusal {
            Refusal::Unauthenticated => (Kind::Unauthenticated, "UNAUTHENTICATED", vec![]),
            Refusal::NoMatchingAgent { .. } => (Kind::PermissionDenied, "NO_MATCHING_AGENT", vec![]),
            Refusal::NotAdmin { agent } => (Kind::PermissionDenied, "ADMIN_REQUIRED", vec![("agent", agent)]),
            Refusal::ServerProcess { .. } => (Kind::PermissionDenied, "SERVER_PROCESS", vec![]),
        };
        DoorError::new(kind, reason, message, facts)
    }
}

impl From<StoreError> for DoorError {
    fn from(error: StoreError) -> DoorError {
        DoorError::internal(&error)
    }
}

/// The kind of a failed call: the table every door's call path reads.
pub fn kind_of_call(error: &CallError) -> Kind {
    match error {
        CallError::InvalidArguments(_) | CallError::UpstreamInvalidParams { .. } => Kind::InvalidArgument,
        CallError::UnknownTool { .. } | CallError::UnknownServer(_) => Kind::NotFound,
        CallError::Unavailable { .. } | CallError::SessionLost { .. } => Kind::Unavailable,
        CallError::Stale(_) | CallError::RevisionNotKept(_) | CallError::TaskRequired { .. } | CallError::DefinitionHeld { .. } => {
            Kind::FailedPrecondition
        }
        CallError::DeadlineExceeded { .. } => Kind::DeadlineExceeded,
        CallError::Overloaded { .. } | CallError::CallerBusy { .. } | CallError::RateLimited { .. } | CallError::QuotaExhausted { .. } => {
            Kind::ResourceExhausted
        }
        CallError::Upstream { .. } | CallError::InvalidResult { .. } => Kind::Upstream,
        CallError::NotAllowed { .. } => Kind::PermissionDenied,
        CallError::Approval(approval) => match approval {
            ApprovalError::Denied { .. } => Kind::PermissionDenied,
            ApprovalError::TooMany { .. } => Kind::ResourceExhausted,
            ApprovalError::Pending { .. } | ApprovalError::Expired { .. } | ApprovalError::Stale { .. } => Kind::FailedPrecondition,
        },
        CallError::Continuation(problem) => match problem {
            ContinuationError::Unknown => Kind::FailedPrecondition,
            ContinuationError::TooMany => Kind::ResourceExhausted,
            ContinuationError::OtherTool { .. } | ContinuationError::InvalidResponses(_) | ContinuationError::Incomplete => {
                Kind::InvalidArgument
            }
        },
        CallError::Store(_) => Kind::Internal,
    }
}

impl From<CallError> for DoorError {
    fn from(error: CallError) -> DoorError {
        if let CallError::Store(detail) = &error {
            return DoorError::internal(detail);
        }
        let explained = error.explain();
        let retry_after = match &error {
            CallError::RateLimited { retry_after, .. } | CallError::QuotaExhausted { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        DoorError {
            kind: kind_of_call(&error),
            reason: explained.reason,
            message: error.to_string(),
            facts: explained.details,
            retry_after,
        }
    }
}

impl From<TaskError> for DoorError {
    fn from(error: TaskError) -> DoorError {
        let message = error.to_string();
        let (kind, reason, facts) = match error {
            TaskError::Call(error) => return error.into(),
            TaskError::TooManyForAgent { agent, limit } => {
                (Kind::ResourceExhausted, "TASKS_LIMITED", vec![("agent", agent), ("limit", limit.to_string())])
            }
            TaskError::TooMany { limit } => (Kind::ResourceExhausted, "TASKS_LIMITED", vec![("limit", limit.to_string())]),
            TaskError::StorageFull { limit, .. } => (Kind::ResourceExhausted, "TASK_STORAGE_FULL", vec![("limit", limit.to_string())]),
            TaskError::Unknown(id) => (Kind::NotFound, "UNKNOWN_TASK", vec![("task_id", id)]),
            TaskError::Ended { id, status } => {
                (Kind::FailedPrecondition, "TASK_ENDED", vec![("task_id", id), ("status", status.to_owned())])
            }
            TaskError::ShuttingDown => return DoorError::shutting_down(),
            TaskError::NoRandom => return DoorError::internal(&message),
            TaskError::Store(store) => return store.into(),
        };
        DoorError::new(kind, reason, message, facts)
    }
}

impl From<DecideError> for DoorError {
    fn from(error: DecideError) -> DoorError {
        let message = error.to_string();
        let (kind, reason, facts) = match error {
            DecideError::Unknown(id) => (Kind::NotFound, "UNKNOWN_APPROVAL", vec![("approval_id", id)]),
            DecideError::NotPending { id, status } => {
                (Kind::FailedPrecondition, "APPROVAL_NOT_PENDING", vec![("approval_id", id), ("status", status.to_owned())])
            }
            DecideError::OwnRequest { operator } => (Kind::PermissionDenied, "SEPARATE_APPROVER", vec![("operator", operator)]),
            DecideError::Store(store) => return store.into(),
        };
        DoorError::new(kind, reason, message, facts)
    }
}

impl From<ApproveError> for DoorError {
    fn from(error: ApproveError) -> DoorError {
        let message = error.to_string();
        let (kind, reason, facts) = match error {
            ApproveError::UnknownServer(server) => (Kind::NotFound, "UNKNOWN_SERVER", vec![("server", server)]),
            ApproveError::UnknownTool { server, tool } => (Kind::NotFound, "UNKNOWN_TOOL", vec![("server", server), ("tool", tool)]),
            ApproveError::Pinned { server, tool } => (Kind::FailedPrecondition, "TOOL_PINNED", vec![("server", server), ("tool", tool)]),
            ApproveError::HashMismatch { server, tool, expected, offered } => (
                Kind::FailedPrecondition,
                "DEFINITION_CHANGED",
                vec![("server", server), ("tool", tool), ("expected_hash", expected), ("offered_hash", offered)],
            ),
            ApproveError::NothingNamed | ApproveError::HashNeedsOneTool | ApproveError::HashTooShort(_) => {
                (Kind::InvalidArgument, "BAD_APPROVAL", vec![])
            }
            ApproveError::Store(store) => return store.into(),
        };
        DoorError::new(kind, reason, message, facts)
    }
}

impl From<OperateError> for DoorError {
    fn from(error: OperateError) -> DoorError {
        match error {
            OperateError::UnknownServer(server) => DoorError::unknown_server(&server),
            OperateError::Disabled(server) => DoorError::new(
                Kind::FailedPrecondition,
                "SERVER_DISABLED",
                format!("server {server:?} is disabled"),
                vec![("server", server)],
            ),
        }
    }
}

impl From<FleetError> for DoorError {
    fn from(error: FleetError) -> DoorError {
        let message = error.to_string();
        let (kind, reason) = match error {
            FleetError::NotConfigured => (Kind::FailedPrecondition, "FLEET_NOT_CONFIGURED"),
            FleetError::SchemaOlder { .. } | FleetError::SchemaNewer { .. } | FleetError::Foreign => {
                (Kind::FailedPrecondition, "FLEET_SCHEMA_MISMATCH")
            }
            FleetError::Connect(_) | FleetError::Timeout(_) | FleetError::Database(_) => (Kind::Unavailable, "FLEET_UNAVAILABLE"),
            FleetError::Store(store) => return store.into(),
        };
        DoorError::new(kind, reason, message, vec![])
    }
}

impl From<super::SearchError> for DoorError {
    fn from(error: super::SearchError) -> DoorError {
        match error {
            super::SearchError::UnknownServer(server) => DoorError::unknown_server(&server),
            super::SearchError::Store(store) => store.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per source of failure: the kind and reason every door then shows.
    #[test]
    fn every_failure_below_the_door_has_one_kind_and_reason() {
        let rows: Vec<(DoorError, Kind, &str)> = vec![
            (Refusal::Unauthenticated.into(), Kind::Unauthenticated, "UNAUTHENTICATED"),
            (Refusal::NotAdmin { agent: "a".into() }.into(), Kind::PermissionDenied, "ADMIN_REQUIRED"),
            (CallError::UnknownTool { server: None, tool: "t".into() }.into(), Kind::NotFound, "UNKNOWN_TOOL"),
            (CallError::InvalidArguments("x".into()).into(), Kind::InvalidArgument, "ARGUMENTS_NOT_AN_OBJECT"),
            (TaskError::Unknown("t1".into()).into(), Kind::NotFound, "UNKNOWN_TASK"),
            (TaskError::ShuttingDown.into(), Kind::Unavailable, "SHUTTING_DOWN"),
            (TaskError::NoRandom.into(), Kind::Internal, "INTERNAL"),
            (DecideError::OwnRequest { operator: "o".into() }.into(), Kind::PermissionDenied, "SEPARATE_APPROVER"),
            (ApproveError::NothingNamed.into(), Kind::InvalidArgument, "BAD_APPROVAL"),
            (OperateError::Disabled("s".into()).into(), Kind::FailedPrecondition, "SERVER_DISABLED"),
            (OperateError::UnknownServer("s".into()).into(), Kind::NotFound, "UNKNOWN_SERVER"),
            (FleetError::NotConfigured.into(), Kind::FailedPrecondition, "FLEET_NOT_CONFIGURED"),
            (FleetError::Timeout(Duration::from_secs(1)).into(), Kind::Unavailable, "FLEET_UNAVAILABLE"),
            (DoorError::login("s", AuthError::Unavailable("down".into())), Kind::Unavailable, "AUTHORIZATION_SERVER_UNAVAILABLE"),
            (DoorError::page_expired(7), Kind::FailedPrecondition, "PAGE_TOKEN_EXPIRED"),
        ];
        for (error, kind, reason) in rows {
            assert_eq!((error.kind, error.reason), (kind, reason), "{error}");
        }
    }

    #[test]
    fn an_internal_failure_tells_nothing_of_itself() {
        let error = DoorError::from(TaskError::NoRandom);
        assert!(error.is_internal());
        assert_eq!(error.message, INTERNAL_MESSAGE);
    }
}
