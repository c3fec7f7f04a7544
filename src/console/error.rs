//! Why a console request was refused or failed, and the HTTP status each reason answers with
//! (the one place that maps them). What failed below the door arrives as the door's one error
//! type, already classified; this says its kind in HTTP's words.

use http::StatusCode;

use crate::door::SearchError;
use crate::door::approvals::DecideError;
use crate::door::error::{DoorError, Kind};
use crate::door::model::Refusal;
use crate::door::tasks::TaskError;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The caller could not be admitted (no agent entry, no valid token): the login page.
    #[error("{0}")]
    NotAdmitted(Refusal),
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
    #[error("too many pages are following the catalog now; try again later")]
    Busy,
    #[error("the daemon is stopping")]
    ShuttingDown,
    /// What the door said (a refusal, an unknown server, a failed action, the store).
    #[error("{0}")]
    Door(DoorError),
}

/// Every failure a door method returns becomes a console error through [`DoorError`].
macro_rules! through_the_door {
    ($($error:ty),*) => {$(
        impl From<$error> for ConsoleError {
            fn from(error: $error) -> ConsoleError {
                ConsoleError::Door(DoorError::from(error))
            }
        }
    )*};
}

through_the_door!(TaskError, DecideError, SearchError);

impl From<DoorError> for ConsoleError {
    fn from(error: DoorError) -> ConsoleError {
        ConsoleError::Door(error)
    }
}

impl ConsoleError {
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::NotAdmitted(_) => StatusCode::UNAUTHORIZED,
            ConsoleError::CrossSite(_) | ConsoleError::WrongHost(_) | ConsoleError::Csrf => StatusCode::FORBIDDEN,
            ConsoleError::LoginLimited => StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Busy | ConsoleError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::Door(error) => match error.kind {
                Kind::InvalidArgument => StatusCode::BAD_REQUEST,
                Kind::NotFound => StatusCode::NOT_FOUND,
                Kind::FailedPrecondition => StatusCode::CONFLICT,
                Kind::PermissionDenied => StatusCode::FORBIDDEN,
                Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
                Kind::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
                Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                Kind::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
                Kind::Upstream => StatusCode::BAD_GATEWAY,
                Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            },
        }
    }
}
