//! Each server's worker runs under a guard task that owns it: a worker that panics (a toolhost
//! bug, never a server's input) is observed through its `JoinError`, counted, shown as
//! `Failed` with the panic message, and started again after a backoff. Its session dies with it:
//! the panic drops the `Connection`, whose child process is killed with its group.

use std::any::Any;
use std::sync::PoisonError;

use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::supervisor::session_state::WorkerCommand;
use crate::supervisor::worker::{Worker, WorkerSeed};
use crate::supervisor::{WORKER_QUEUE, lifecycle};

/// Runs the server's worker until it stops, restarting it after each panic. `commands` is the
/// first worker's queue; a restarted worker gets a new one, published in `senders`.
pub(crate) async fn guard(seed: WorkerSeed, mut commands: mpsc::Receiver<WorkerCommand>) {
    let mut panics: u32 = 0;
    loop {
        let span = tracing::info_span!("server", server = %seed.name);
        // Aborted with the guard: the worker never outlives its owner.
        let task = AbortOnDropHandle::new(tokio::spawn(Worker::new(seed.clone(), commands).run().instrument(span)));
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
