//! `WatchCatalog`: every catalog change after a revision, in order. A watcher that falls behind
//! the registry's event log gets a `Resync` instead of a silent gap.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

use crate::access::{Access, Identity};
use crate::api::access::visible_event;
use crate::api::convert;
use crate::api::pb;
use crate::api::status::ApiError;
use crate::supervisor::registry::{Lagged, Registry};

/// Events buffered per watcher before it counts as slow.
const WATCH_BUFFER: usize = 256;

/// Owns the watcher tasks: they end with their client, or at shutdown.
#[derive(Clone)]
pub(crate) struct Watchers {
    pub(crate) tracker: TaskTracker,
    pub(crate) cancel: CancellationToken,
}

/// What one watcher asked for, and who it is.
pub(crate) struct Watch {
    pub(crate) from_revision: u64,
    pub(crate) servers: Vec<String>,
    pub(crate) identity: Identity,
}

impl Watchers {
    pub(crate) fn watch(
        &self,
        registry: Arc<Registry>,
        access: Arc<Access>,
        watch: Watch,
    ) -> Result<ReceiverStream<Result<pb::CatalogEvent, Status>>, ApiError> {
        if self.cancel.is_cancelled() {
            return Err(ApiError::ShuttingDown);
        }
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let cancel = self.cancel.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = tx.closed() => {}
                () = forward(&registry, &access, &watch, &tx) => {}
            }
        });
        Ok(ReceiverStream::new(rx))
    }
}

async fn forward(registry: &Registry, access: &Access, watch: &Watch, tx: &mpsc::Sender<Result<pb::CatalogEvent, Status>>) {
    let mut revisions = registry.subscribe();
    let mut cursor = if watch.from_revision == 0 { registry.snapshot().revision } else { watch.from_revision };
    loop {
        revisions.borrow_and_update();
        // The policy in force now decides what this watcher sees: a reload applies at once.
        let caller = match access.admit(watch.identity.clone()) {
            Ok(caller) => caller,
            Err(refusal) => {
                let _ = tx.send(Err(refusal.into())).await;
                return;
            }
        };
        match registry.events_after(cursor) {
            Ok(events) => {
                let snapshot = registry.snapshot();
                for event in events {
                    cursor = cursor.max(event.revision);
                    if !watch.servers.is_empty() && !watch.servers.iter().any(|s| s == convert::change_server(&event.change)) {
                        continue;
                    }
                    let Some(event) = visible_event(&caller, &snapshot, event) else { continue };
                    if tx.send(Ok(convert::event(event))).await.is_err() {
                        return;
                    }
                }
            }
            Err(Lagged) => {
                cursor = registry.snapshot().revision;
                let reason = "changes after the requested revision are no longer kept; list again, then watch from this revision";
                if tx.send(Ok(convert::resync(cursor, reason))).await.is_err() {
                    return;
                }
            }
        }
        if revisions.changed().await.is_err() {
            return;
        }
    }
}
