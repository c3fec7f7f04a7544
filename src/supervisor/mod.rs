//! The supervisor owns one worker task per configured server and the live [`Registry`] they
//! publish into. Only the supervisor starts and stops sessions.

mod backoff;
mod enumerate;
pub mod registry;
mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::catalog::record::EnumerationReason;
use crate::catalog::store::{Store, StoreError};
use crate::config::{ServerSpec, Transport};
use registry::{Registry, ServerState, ServerView};
use worker::{Worker, WorkerCommand};

/// Commands a worker may have queued before it reads them.
const WORKER_QUEUE: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SupervisorError {
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("server {0:?} is disabled")]
    Disabled(String),
}

/// Owns the workers. Dropping it without [`Supervisor::shutdown`] cancels them all the same.
pub struct Supervisor {
    registry: Arc<Registry>,
    workers: BTreeMap<Arc<str>, WorkerHandle>,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

struct WorkerHandle {
    commands: mpsc::Sender<WorkerCommand>,
    cancel: CancellationToken,
}

// === impl Supervisor ===

impl Supervisor {
    /// Loads each server's last committed generation from the store (served at once, marked
    /// as revalidating) and starts a worker per enabled server.
    ///
    /// # Errors
    /// [`StoreError`] when the stored catalog cannot be read.
    pub async fn start(
        servers: &BTreeMap<String, ServerSpec>,
        store: Store,
        registry: Arc<Registry>,
        cancel: CancellationToken,
    ) -> Result<Supervisor, StoreError> {
        let mut supervisor = Supervisor { registry, workers: BTreeMap::new(), tracker: TaskTracker::new(), cancel };
        for (name, spec) in servers {
            let name: Arc<str> = name.as_str().into();
            let stored = store.load_current(&name).await?;
            let state = if spec.enabled { ServerState::Starting } else { ServerState::Disabled };
            let transport = match spec.transport {
                Transport::Stdio(_) => "stdio",
                Transport::Http(_) => "http",
            };
            let mut view = ServerView::new(name.clone(), state, transport, spec.max_concurrent_calls, spec.request_timeout);
            if let Some(stored) = stored {
                view.generation = Some(stored.generation);
                view.last_verified_at_ms = stored.last_verified_at_ms;
                view.revalidating = spec.enabled;
            }
            supervisor.registry.insert(view);
            if spec.enabled {
                supervisor.spawn_worker(name, spec.clone(), store.clone());
            }
        }
        Ok(supervisor)
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Asks a server's worker to re-enumerate now. Requests that find the worker busy coalesce.
    ///
    /// # Errors
    /// [`SupervisorError`] for an unknown or disabled server.
    pub fn refresh(&self, server: &str, reason: EnumerationReason) -> Result<(), SupervisorError> {
        let Some(worker) = self.workers.get(server) else {
            return Err(match self.registry.server(server) {
                Some(_) => SupervisorError::Disabled(server.to_owned()),
                None => SupervisorError::UnknownServer(server.to_owned()),
            });
        };
        // A full queue already holds a refresh that will run after this moment; dropping is fine.
        let _ = worker.commands.try_send(WorkerCommand::Refresh(reason));
        Ok(())
    }

    /// A cheap, cloneable way to ask for refreshes from other tasks.
    pub fn refresher(&self) -> Refresher {
        Refresher { senders: Arc::new(self.workers.iter().map(|(name, worker)| (name.clone(), worker.commands.clone())).collect()) }
    }

    /// Stops every worker (each runs its session's shutdown sequence) and waits for them, at
    /// most `deadline`.
    pub async fn shutdown(self, deadline: Duration) {
        self.cancel.cancel();
        for worker in self.workers.values() {
            worker.cancel.cancel();
        }
        self.tracker.close();
        if tokio::time::timeout(deadline, self.tracker.wait()).await.is_err() {
            tracing::warn!(deadline_ms = deadline.as_millis() as u64, "servers did not stop within the shutdown deadline");
        }
    }

    fn spawn_worker(&mut self, name: Arc<str>, spec: ServerSpec, store: Store) {
        let (commands_tx, commands_rx) = mpsc::channel(WORKER_QUEUE);
        let cancel = self.cancel.child_token();
        let worker =
            Worker { name: name.clone(), spec, store, registry: self.registry.clone(), commands: commands_rx, cancel: cancel.clone() };
        let span = tracing::info_span!("server", server = %name);
        self.tracker.spawn(worker.run().instrument(span));
        self.workers.insert(name, WorkerHandle { commands: commands_tx, cancel });
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Sends refresh requests to workers; held by the call path to report stale tools.
#[derive(Clone)]
pub struct Refresher {
    senders: Arc<BTreeMap<Arc<str>, mpsc::Sender<WorkerCommand>>>,
}

impl Refresher {
    /// Asks for a re-enumeration; requests that find the worker busy coalesce.
    pub fn refresh(&self, server: &str, reason: EnumerationReason) {
        if let Some(sender) = self.senders.get(server) {
            let _ = sender.try_send(WorkerCommand::Refresh(reason));
        }
    }

    /// Asks for a fresh session.
    pub fn restart(&self, server: &str) {
        if let Some(sender) = self.senders.get(server) {
            let _ = sender.try_send(WorkerCommand::Restart);
        }
    }
}
