//! Each server's worker runs under a guard task that owns it: a worker that panics (a toolhost
//! bug, never a server's input) is observed through its `JoinError`, counted, shown as
//! `Failed` with the panic message, and started again after a backoff. Its session dies with it:
//! the panic drops the `Connection`, whose child process is killed with its group.

use std::any::Any;
use std::sync::{Arc, PoisonError};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::config::ServerSpec;
use crate::mcp::lifecycle::Era;
use crate::registry::Registry;
use crate::store::Store;
use crate::supervisor::session_state::WorkerCommand;
use crate::supervisor::worker::Worker;
use crate::supervisor::{Senders, WORKER_QUEUE, lifecycle};
use crate::telemetry::metrics::Metrics;
use crate::upstream::reaper::Reaper;

/// Everything a server's worker is built from, kept so that it can be built again.
pub(crate) struct WorkerSeed {
    pub(crate) name: Arc<str>,
    pub(crate) spec: ServerSpec,
    pub(crate) store: Store,
    pub(crate) registry: Arc<Registry>,
    pub(crate) reaper: Arc<Reaper>,
    pub(crate) start_permits: Arc<Semaphore>,
    pub(crate) metrics: Metrics,
    pub(crate) era: Option<Era>,
    pub(crate) cancel: CancellationToken,
    pub(crate) senders: Senders,
}

impl WorkerSeed {
    fn worker(&self, commands: mpsc::Receiver<WorkerCommand>) -> Worker {
        Worker {
            name: self.name.clone(),
            spec: self.spec.clone(),
            store: self.store.clone(),
            registry: self.registry.clone(),
            reaper: self.reaper.clone(),
            start_permits: self.start_permits.clone(),
            metrics: self.metrics.clone(),
            era: self.era,
            commands,
            cancel: self.cancel.clone(),
            listings: Default::default(),
        }
    }
}

/// Runs the server's worker until it stops, restarting it after each panic. `commands` is the
/// first worker's queue; a restarted worker gets a new one, published in `senders`.
pub(crate) async fn guard(seed: WorkerSeed, mut commands: mpsc::Receiver<WorkerCommand>) {
    let mut panics: u32 = 0;
    loop {
        let span = tracing::info_span!("server", server = %seed.name);
        // Aborted with the guard: the worker never outlives its owner.
        let task = AbortOnDropHandle::new(tokio::spawn(seed.worker(commands).run().instrument(span)));
        let error = match task.await {
            Ok(()) => return,
            Err(error) if error.is_panic() => error,
            Err(_) => return,
        };
        panics = panics.saturating_add(1);
        let message = panic_message(error.into_panic());
        tracing::error!(server = %seed.name, panics, %message, "the server's worker panicked; it will be restarted");
        seed.metrics.record_worker_panic(&seed.name);
        seed.registry.update(&seed.name, |view| view.worker_panicked(&message));
        let delay = lifecycle::backoff(&seed.spec.restart, panics);
        tokio::select! {
            () = seed.cancel.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        let (sender, receiver) = mpsc::channel(WORKER_QUEUE);
        seed.senders.write().unwrap_or_else(PoisonError::into_inner).insert(seed.name.clone(), sender);
        commands = receiver;
    }
}

/// The text a panic was raised with, when it was a string.
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload.downcast_ref::<&str>().map_or_else(|| "a non-text panic".to_owned(), |text| (*text).to_owned()),
    }
}
