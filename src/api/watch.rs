//! `WatchCatalog`: every catalog change after a revision, in order. A watcher that falls behind
//! the registry's event log gets a `Resync` instead of a silent gap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

use crate::access::{Access, Identity, share};
use crate::api::access::visible_event;
use crate::api::convert;
use crate::api::pb;
use crate::api::status::ApiError;
use crate::registry::{Lagged, Registry};

/// Events buffered per watcher before it counts as slow.
const WATCH_BUFFER: usize = 256;

/// Watch streams open at once; past this, the oldest stream of the caller holding the most ends.
const MAX_WATCHES: usize = 1024;
/// Watch streams one caller (principal) may hold; past this, its own oldest ends.
const WATCHES_PER_CALLER: usize = 64;

/// Owns the watcher tasks: they end with their client, or at shutdown.
#[derive(Clone)]
pub(crate) struct Watchers {
    pub(crate) tracker: TaskTracker,
    pub(crate) cancel: CancellationToken,
    /// Open streams by number (numbers only grow: a caller's smallest is its oldest), with
    /// their principal and what ends them.
    pub(crate) open: Arc<Mutex<HashMap<u64, (String, CancellationToken)>>>,
    pub(crate) opened: Arc<AtomicU64>,
}

/// What one watcher asked for, and who it is.
pub(crate) struct Watch {
    pub(crate) from_revision: u64,
    pub(crate) servers: Vec<String>,
    pub(crate) identity: Identity,
    /// The caller's principal: whose share of the streams this one uses.
    pub(crate) principal: String,
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
        let ended = self.cancel.child_token();
        let number = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let number = self.opened.fetch_add(1, Ordering::Relaxed);
            let entries = open.iter().map(|(number, (principal, _))| (number, principal.as_str(), *number));
            if let Some(evicted) = share::make_room(entries, &watch.principal, WATCHES_PER_CALLER, MAX_WATCHES).copied()
                && let Some((_, stream)) = open.remove(&evicted)
            {
                stream.cancel();
            }
            open.insert(number, (watch.principal.clone(), ended.clone()));
            number
        };
        let (cancel, open) = (self.cancel.clone(), self.open.clone());
        self.tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = ended.cancelled() => {
                    let reason = "this caller opened more watch streams than its share; its oldest ended";
                    let _ = tx.try_send(Err(Status::resource_exhausted(reason)));
                }
                () = tx.closed() => {}
                () = forward(&registry, &access, &watch, &tx) => {}
            }
            open.lock().unwrap_or_else(PoisonError::into_inner).remove(&number);
        });
        Ok(ReceiverStream::new(rx))
    }
}

async fn forward(registry: &Registry, access: &Access, watch: &Watch, tx: &mpsc::Sender<Result<pb::CatalogEvent, Status>>) {
    let mut revisions = registry.subscribe();
    let mut cursor = if watch.from_revision == 0 { registry.snapshot().revision } else { watch.from_revision };
    loop {
        revisions.borrow_and_update();
        let events = registry.events_after(cursor);
        // The policy in force now decides what this watcher sees: a reload applies at once.
        // Judged after the events are taken, so that a reload's own events (it replaces the
        // policy first) are never sent under the policy it replaced.
        let caller = match access.admit(watch.identity.clone()) {
            Ok(caller) => caller,
            Err(refusal) => {
                let _ = tx.send(Err(refusal.into())).await;
                return;
            }
        };
        match events {
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
