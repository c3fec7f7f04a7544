//! Why a console request was refused or failed, and the HTTP status each reason answers with
//! (the one place that maps them).

use http::StatusCode;

use crate::access::Refusal;
use crate::door::SearchError;
use crate::door::tasks::TaskError;
use crate::store::StoreError;
use crate::supervisor::integrity::ApproveError;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The caller could not be admitted (no agent entry, no valid token): the login page.
    #[error("{0}")]
    NotAdmitted(Refusal),
    #[error("{0}")]
    NotAdmin(Refusal),
    #[error("this request came from another site (Origin {0:?}): the console takes actions from its own pages only")]
    CrossSite(String),
    #[error("the Host {0:?} is not this console's (DNS rebinding protection)")]
    WrongHost(String),
    #[error("the form's CSRF token is missing or does not belong to this session: reload the page and try again")]
    Csrf,
    #[error("too many sign-in attempts: wait a second and try again")]
    LoginLimited,
    #[error("{0}")]
    BadRequest(String),
    #[error("no page here")]
    NotFound,
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("{server:?} offers no tool {tool:?}")]
    UnknownTool { server: String, tool: String },
    #[error(transparent)]
    Operate(#[from] crate::supervisor::OperateError),
    #[error(transparent)]
    Approve(#[from] ApproveError),
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error("the store failed; the daemon's log has the details")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Decide(#[from] crate::door::approvals::DecideError),
    #[error("too many pages are following the catalog now; try again later")]
    Busy,
    #[error("the daemon is stopping")]
    ShuttingDown,
}

impl ConsoleError {
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::NotAdmitted(_) => StatusCode::UNAUTHORIZED,
            ConsoleError::NotAdmin(_) | ConsoleError::CrossSite(_) | ConsoleError::WrongHost(_) | ConsoleError::Csrf => {
                StatusCode::FORBIDDEN
            }
            ConsoleError::LoginLimited => StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound | ConsoleError::UnknownServer(_) | ConsoleError::UnknownTool { .. } => StatusCode::NOT_FOUND,
            ConsoleError::Operate(crate::supervisor::OperateError::UnknownServer(_)) => StatusCode::NOT_FOUND,
            ConsoleError::Operate(crate::supervisor::OperateError::Disabled(_)) => StatusCode::CONFLICT,
            ConsoleError::Approve(error) => match error {
                ApproveError::UnknownServer(_) | ApproveError::UnknownTool { .. } => StatusCode::NOT_FOUND,
                ApproveError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::CONFLICT,
            },
            ConsoleError::Search(SearchError::UnknownServer(_)) => StatusCode::NOT_FOUND,
            ConsoleError::Search(SearchError::Store(_)) | ConsoleError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ConsoleError::Task(error) => match error {
                TaskError::Unknown(_) => StatusCode::NOT_FOUND,
                TaskError::Store(_) | TaskError::NoRandom => StatusCode::INTERNAL_SERVER_ERROR,
                TaskError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::CONFLICT,
            },
            ConsoleError::Decide(error) => match error {
                crate::door::approvals::DecideError::Unknown(_) => StatusCode::NOT_FOUND,
                crate::door::approvals::DecideError::OwnRequest { .. } => StatusCode::FORBIDDEN,
                crate::door::approvals::DecideError::NotPending { .. } => StatusCode::CONFLICT,
                crate::door::approvals::DecideError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ConsoleError::Busy | ConsoleError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// What the page says: a store failure's own text stays in the log.
    pub fn message(&self) -> String {
        match self {
            ConsoleError::Approve(ApproveError::Store(_))
            | ConsoleError::Search(SearchError::Store(_))
            | ConsoleError::Store(_)
            | ConsoleError::Task(TaskError::Store(_))
            | ConsoleError::Decide(crate::door::approvals::DecideError::Store(_)) => {
                "the store failed; the daemon's log has the details".to_owned()
            }
            other => other.to_string(),
        }
    }

    /// Whether the daemon's log should have it in full (a failure of toolhost's, not a refusal).
    pub fn is_internal(&self) -> bool {
        self.status() == StatusCode::INTERNAL_SERVER_ERROR
    }
}
