//! `WatchCatalog`: every catalog change after a revision, in order. A watcher that falls behind
//! the registry's event log gets a `Resync` instead of a silent gap.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

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

impl Watchers {
    pub(crate) fn watch(
        &self,
        registry: Arc<Registry>,
        from_revision: u64,
        servers: Vec<String>,
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
                () = forward(&registry, from_revision, &servers, &tx) => {}
            }
        });
        Ok(ReceiverStream::new(rx))
    }
}

async fn forward(registry: &Registry, from_revision: u64, servers: &[String], tx: &mpsc::Sender<Result<pb::CatalogEvent, Status>>) {
    let mut revisions = registry.subscribe();
    let mut cursor = if from_revision == 0 { registry.snapshot().revision } else { from_revision };
    loop {
        revisions.borrow_and_update();
        match registry.events_after(cursor) {
            Ok(events) => {
                for event in events {
                    cursor = cursor.max(event.revision);
                    if !servers.is_empty() && !servers.iter().any(|s| s == convert::change_server(&event.change)) {
                        continue;
                    }
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
