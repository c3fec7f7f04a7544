//! A reload asked for through a front door (`toolhost reload`), answered with what it applied
//! and what it could not. The reload itself is the daemon's run loop's (it owns the running
//! daemon, as for SIGHUP); a door only asks and waits for the report.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::error::{DoorError, Kind};
use super::model::Caller;
pub use crate::supervisor::ReloadSummary;

/// How long a door waits for a reload to finish: a reload stops and starts servers, each
/// bounded by its own timeouts; past this the caller is told to look at the log.
const RELOAD_WAIT: Duration = Duration::from_secs(300);

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Servers added, removed, changed and left alone.
    pub servers: ReloadSummary,
    /// Settings applied besides the servers ("console listens on 127.0.0.1:50053", "[access]").
    pub applied: Vec<String>,
    /// Settings the running daemon keeps as they were, each with why and what to do.
    pub not_applied: Vec<NotApplied>,
}

/// A setting a reload left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    /// The setting as the file names it (`[store] path`, `[grpc] listen 127.0.0.1:50051`).
    pub setting: String,
    pub why: String,
}

/// Why a reload did not happen, or stopped part way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    #[error("the configuration file is invalid, and the running one is kept: {0}")]
    Invalid(String),
    #[error("the reload failed part way ({0}); servers not yet reconciled keep their old settings")]
    PartWay(String),
}

/// One request to reload, with where its report goes.
pub struct ReloadAsk {
    pub reply: oneshot::Sender<Result<ReloadReport, ReloadError>>,
}

/// The doors' end of the run loop's reload requests. Cheap to clone.
#[derive(Clone)]
pub struct Reloads {
    asks: Option<mpsc::Sender<ReloadAsk>>,
}

impl Reloads {
    /// Requests go to `asks`; the daemon's run loop reads them.
    pub fn new(asks: mpsc::Sender<ReloadAsk>) -> Reloads {
        Reloads { asks: Some(asks) }
    }

    /// A daemon that no run loop drives (embedded, tests): a reload is refused.
    pub fn unavailable() -> Reloads {
        Reloads { asks: None }
    }

    /// Reloads the configuration file the daemon was started with, as SIGHUP does.
    ///
    /// # Errors
    /// Not an operator; no run loop; the new file is invalid; the reload failed part way or
    /// did not finish in time.
    pub async fn reload(&self, by: &Caller) -> Result<ReloadReport, DoorError> {
        by.require_admin()?;
        let unavailable = || {
            DoorError::new(
                Kind::Unavailable,
                "RELOAD_UNAVAILABLE",
                "this daemon does not reload (it runs embedded, or is stopping)",
                vec![],
            )
        };
        let asks = self.asks.as_ref().ok_or_else(unavailable)?;
        let (reply, answer) = oneshot::channel();
        asks.try_send(ReloadAsk { reply }).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => DoorError::new(
                Kind::ResourceExhausted,
                "RELOADS_QUEUED",
                "enough reloads already wait for the one running; each re-reads the file, so wait for one of them",
                vec![],
            ),
            mpsc::error::TrySendError::Closed(_) => unavailable(),
        })?;
        match tokio::time::timeout(RELOAD_WAIT, answer).await {
            Err(_) => Err(DoorError::new(
                Kind::DeadlineExceeded,
                "RELOAD_TIMEOUT",
                format!("the reload did not finish within {}s; the daemon's log says where it stands", RELOAD_WAIT.as_secs()),
                vec![],
            )),
            Ok(Err(_)) => Err(unavailable()),
            Ok(Ok(Ok(report))) => Ok(report),
            Ok(Ok(Err(error @ ReloadError::Invalid(_)))) => {
                Err(DoorError::new(Kind::FailedPrecondition, "CONFIG_INVALID", error.to_string(), vec![]))
            }
            Ok(Ok(Err(error @ ReloadError::PartWay(_)))) => Err(DoorError::new(Kind::Internal, "RELOAD_FAILED", error.to_string(), vec![])),
        }
    }
}
