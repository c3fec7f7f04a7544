//! `WatchCatalog`: every catalog change after a revision, in order. A watcher that falls behind
//! the registry's event log gets a `Resync` instead of a silent gap. New approval requests the
//! caller may see come between, as they are asked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

use crate::api::convert;
use crate::api::pb;
use crate::door::changes::{Changes, Seen};
use crate::door::error::{DoorError, Kind};
use crate::listen::tables as share;

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

impl Watchers {
    /// Opens a stream of `changes` for the caller `principal` (whose share of the streams it
    /// uses).
    pub(crate) fn watch(&self, changes: Changes, principal: String) -> Result<ReceiverStream<Result<pb::CatalogEvent, Status>>, DoorError> {
        if self.cancel.is_cancelled() {
            return Err(DoorError::shutting_down());
        }
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let ended = self.cancel.child_token();
        let number = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let number = self.opened.fetch_add(1, Ordering::Relaxed);
            let entries = open.iter().map(|(number, (principal, _))| (number, principal.as_str(), *number));
            if let Some(evicted) = share::make_room(entries, &principal, WATCHES_PER_CALLER, MAX_WATCHES).copied()
                && let Some((_, stream)) = open.remove(&evicted)
            {
                stream.cancel();
            }
            open.insert(number, (principal, ended.clone()));
            number
        };
        let (cancel, open) = (self.cancel.clone(), self.open.clone());
        self.tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = ended.cancelled() => {
                    let reason = "this caller opened more watch streams than its share; its oldest ended";
                    let _ = tx.try_send(Err(DoorError::new(Kind::ResourceExhausted, "WATCH_SHARE", reason, vec![]).into()));
                }
                () = tx.closed() => {}
                () = forward(changes, &tx) => {}
            }
            open.lock().unwrap_or_else(PoisonError::into_inner).remove(&number);
        });
        Ok(ReceiverStream::new(rx))
    }
}

/// Sends the caller's changes until it goes, is refused, or the registry goes.
async fn forward(mut changes: Changes, tx: &mpsc::Sender<Result<pb::CatalogEvent, Status>>) {
    const RESYNC: &str = "changes after the requested revision are no longer kept; list again, then watch from this revision";
    while let Some(seen) = changes.next().await {
        let message = match seen {
            Ok(Seen::Event(event)) => Ok(convert::event(event)),
            Ok(Seen::Resync { revision }) => Ok(convert::resync(revision, RESYNC)),
            Ok(Seen::Approval { revision, record }) => Ok(requested(revision, &record)),
            Err(refusal) => Err(refusal.into()),
        };
        let refused = message.is_err();
        if tx.send(message).await.is_err() || refused {
            return;
        }
    }
}

/// A new approval request as a watch event.
fn requested(revision: u64, record: &crate::door::model::ApprovalRecord) -> pb::CatalogEvent {
    let event = pb::ApprovalRequested {
        approval_id: record.id.clone(),
        qualified_name: record.qualified_name.clone(),
        agent: record.agent.clone(),
        caller: record.caller.clone(),
        requested_at_unix_ms: record.requested_at_ms,
        expires_at_unix_ms: record.expires_at_ms,
    };
    pb::CatalogEvent { revision, event: Some(pb::catalog_event::Event::ApprovalRequested(event)) }
}
