//! `/events`: the catalog watch as server-sent events, for the page the caller has open. Each
//! change the caller may see ([`crate::door::changes`]) is one `catalog` event carrying the new
//! revision; the page then fetches its live region again. The first event is the revision at
//! connect time, so a page rendered just before a change still sees it. A new approval request
//! the caller may see is a `catalog` event saying `approval`: the Approvals page shows it at once.

use std::sync::Arc;

use http::Response;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::sync::CancellationToken;

use crate::door::Door;
use crate::door::changes::{Changes, Seen};
use crate::door::model::Identity;
use crate::listen::http::{Body, sse};
use crate::listen::shares::{Share, Shares};

/// Event streams open at once (each holds one connection).
pub(super) const MAX_STREAMS: usize = 256;
/// Event streams one agent entry may hold: its pages in a few browsers, never all of them.
pub(super) const STREAMS_PER_AGENT: usize = 16;

/// A stream of `identity`'s catalog changes until the page closes, the caller is no longer
/// admitted, or the daemon stops. `permit` is its place among [`MAX_STREAMS`] and among its
/// agent's [`STREAMS_PER_AGENT`].
pub(super) fn stream(door: &Door, identity: Identity, stop: CancellationToken, permit: (OwnedSemaphorePermit, Share)) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<String>(4);
    let mut changes = Changes::new(door, identity, 0, Vec::new());
    let revision = door.snapshot().revision();
    let feeder = async move {
        let _permit = permit;
        if tx.send(revision.to_string()).await.is_err() {
            return;
        }
        let follow = async {
            while let Some(seen) = changes.next().await {
                let revision = match seen {
                    Ok(Seen::Event(event)) => event.revision.to_string(),
                    Ok(Seen::Resync { revision }) => revision.to_string(),
                    // Not a catalog change: the page fetches its live region all the same.
                    Ok(Seen::Approval { .. }) => "approval".to_owned(),
                    // Signed out of its agent entry by a reload: the page's next fetch says why.
                    Err(_) => return,
                };
                // A page refreshes at most once per change it has not fetched yet: a full
                // channel means it will fetch anyway.
                if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(revision) {
                    return;
                }
            }
        };
        tokio::select! {
            () = stop.cancelled() => {}
            () = follow => {}
            () = tx.closed() => {}
        }
    };
    sse(rx, "catalog", Some(Box::pin(feeder)))
}

/// Room for another stream of `agent`'s: within its share, and within the whole.
pub(super) fn slot(streams: &Arc<tokio::sync::Semaphore>, shares: &Arc<Shares>, agent: &str) -> Option<(OwnedSemaphorePermit, Share)> {
    let share = shares.take(agent)?;
    Some((streams.clone().try_acquire_owned().ok()?, share))
}
