//! The audit trail: every tool call, and every refused one, recorded with who made it, what it
//! ran against and how it ended. Recording never waits on the disk: the call path hands a record
//! to a bounded queue, and one writer task stores records in batches (one transaction each) and
//! applies the retention bounds. A queue that overflows (a disk far slower than the calls) drops
//! records, counts them and says so in the log: calls are never held up by their audit.

pub mod export;
pub mod format;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use crate::catalog::record::AuditRecord;
use crate::store::Store;
use crate::store::audit_chain::{Signer, Signing, Witness};
use crate::telemetry::throttle::Throttle;

/// Records waiting for the writer.
const QUEUE: usize = 65_536;
/// Records stored in one transaction.
const BATCH: usize = 512;
/// How often the retention bounds are applied.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// After the first record of a burst, the writer gathers for this long: a busy daemon pays one
/// transaction (one fsync) per burst, not one per call.
const GATHER: Duration = Duration::from_millis(100);

/// The call path's side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Auditor {
    tx: mpsc::Sender<AuditRecord>,
    dropped: Arc<AtomicU64>,
    warnings: Arc<Throttle>,
}

/// How long records are kept, and how many.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub max_age: Duration,
    pub max_records: u64,
}

impl Auditor {
    /// The auditor and the writer loop that stores what it is given until `cancel`, then drains.
    /// With `signer`, the chain's head is signed when the writer starts, every `every.0`
    /// records, every `every.1` when there are new ones, and when the writer stops; never over
    /// a chain that does not continue the newest checkpoint: that is said in `broken` (the
    /// audit's health) and the writer signs and cuts no more, storing records all the same.
    pub fn start(
        store: Store,
        retention: Retention,
        signer: Option<ed25519_dalek::SigningKey>,
        every: (u32, Duration),
        broken: tokio::sync::watch::Sender<Option<String>>,
        cancel: CancellationToken,
    ) -> (Auditor, impl std::future::Future<Output = ()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let auditor = Auditor { tx, dropped: Arc::default(), warnings: Arc::new(Throttle::new(1)) };
        let checkpoints = Checkpoints {
            signer,
            witness: Witness::Starting,
            broken,
            unsigned: 0,
            records: usize::try_from(every.0).unwrap_or(usize::MAX),
            every: every.1,
        };
        (auditor, write_loop(rx, store, retention, checkpoints, cancel))
    }

    pub fn record(&self, record: AuditRecord) {
        if let Err(refused) = self.tx.try_send(record) {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(suppressed) = self.warnings.admit() {
                match refused {
                    tokio::sync::mpsc::error::TrySendError::Full(_) => {
                        tracing::error!(dropped, suppressed, "audit records dropped: the audit queue is full (is the disk keeping up?)");
                    }
                    // A call that outlived the shutdown deadline ended after the writer stopped.
                    tokio::sync::mpsc::error::TrySendError::Closed(_) => {
                        tracing::error!(dropped, suppressed, "audit records dropped: the audit writer has stopped (shutdown)");
                    }
                }
            }
        }
    }
}

/// When the chain's head is signed next, and what the writer saw of it.
struct Checkpoints {
    signer: Option<ed25519_dalek::SigningKey>,
    /// What this daemon signed or checked: a checkpoint removed behind its back is seen.
    witness: Witness,
    /// Where a refusal is said (the audit's health); once said, nothing is signed or cut again.
    broken: tokio::sync::watch::Sender<Option<String>>,
    /// Records written since the last checkpoint.
    unsigned: usize,
    /// Sign after this many records, or this long after the last checkpoint.
    records: usize,
    every: Duration,
}

impl Checkpoints {
    /// The key, unless the chain was found altered (then the daemon signs nothing more).
    fn signer(&self, now_ms: i64) -> Option<Signer<'_>> {
        let key = self.signer.as_ref().filter(|_| self.broken.borrow().is_none())?;
        Some(Signer { key, now_ms, witness: self.witness })
    }

    /// Whether the chain has no checkpoint yet, and its records are this writer's: signed at
    /// once, so that a daemon killed early leaves no chain that no checkpoint signs.
    fn unsigned_chain(&self) -> bool {
        self.witness == Witness::SignedTo(0)
    }

    async fn sign(&mut self, store: &Store) {
        let Some(signer) = self.signer(crate::catalog::record::now_ms()) else { return };
        match store.audit().checkpoint(signer).await {
            Ok(signing) => self.signed(signing),
            Err(error) => tracing::warn!(%error, "cannot sign the audit chain's head"),
        }
    }

    fn signed(&mut self, signing: Signing) {
        match signing {
            Signing::Signed(record_id) | Signing::Unchanged(record_id) => {
                self.witness = Witness::SignedTo(record_id);
                self.unsigned = 0;
            }
            Signing::Refused { record_id, problem } => {
                tracing::error!(
                    %problem,
                    record_id,
                    "the audit chain does not continue its last checkpoint: the daemon signs and cuts it no more \
                     (records are still stored); `toolhost audit verify` says where"
                );
                self.broken.send_if_modified(|broken| broken.replace(broken.clone().unwrap_or(problem)).is_none());
            }
        }
    }
}

async fn write_loop(
    mut rx: mpsc::Receiver<AuditRecord>,
    store: Store,
    retention: Retention,
    mut checkpoints: Checkpoints,
    cancel: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    // Agents' calls drive these writes: a store that refuses them (a full disk) logs a line a second.
    let failures = Throttle::new(1);
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    let mut sign = tokio::time::interval(checkpoints.every);
    // The chain as this daemon finds it: checked against its newest checkpoint, the head signed.
    checkpoints.sign(&store).await;
    loop {
        tokio::select! {
            received = rx.recv_many(&mut batch, BATCH) => {
                if received == 0 {
                    return;
                }
                let gather_until = crate::deadline::after(GATHER);
                while batch.len() < BATCH {
                    let room = BATCH - batch.len();
                    tokio::select! {
                        more = rx.recv_many(&mut batch, room) => if more == 0 { break },
                        () = tokio::time::sleep_until(gather_until) => break,
                        () = cancel.cancelled() => break,
                    }
                }
                checkpoints.unsigned += batch.len();
                store_batch(&store, &mut batch, &failures).await;
                if checkpoints.unsigned >= checkpoints.records || checkpoints.unsigned_chain() {
                    checkpoints.sign(&store).await;
                }
            }
            _ = sign.tick() => if checkpoints.unsigned > 0 { checkpoints.sign(&store).await },
            _ = prune.tick() => {
                let oldest = crate::catalog::record::now_ms().saturating_sub(i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX));
                // The cut is signed with it, in one transaction: retention never cuts silently;
                // a chain found altered is not cut at all (the evidence stays).
                let signer = checkpoints.signer(crate::catalog::record::now_ms());
                if signer.is_some() || checkpoints.signer.is_none() {
                    match store.audit().prune(oldest, retention.max_records, signer).await {
                        Ok(signing) => if let Some(signing) = signing { checkpoints.signed(signing) },
                        Err(error) => tracing::warn!(%error, "cannot apply the audit retention"),
                    }
                }
            }
            () = cancel.cancelled() => {
                // Whatever is queued is stored before the store closes.
                rx.close();
                while rx.recv_many(&mut batch, BATCH).await > 0 {
                    store_batch(&store, &mut batch, &failures).await;
                }
                checkpoints.sign(&store).await;
                return;
            }
        }
    }
}

async fn store_batch(store: &Store, batch: &mut Vec<AuditRecord>, failures: &Throttle) {
    if let Err(error) = store.audit().append(batch).await
        && let Some(suppressed) = failures.admit()
    {
        tracing::error!(%error, records = batch.len(), suppressed, "cannot store audit records");
    }
    batch.clear();
}

/// Whether an audit outcome is a call refused before anything reached a server (the caller's
/// policy, its limits, a stale, held or unknown tool, bad arguments, an unavailable server), as
/// opposed to a call that ran, whatever it returned. `task_started:…` is neither: the task's
/// call has a record of its own.
pub fn refused(outcome: &str) -> bool {
    let kind = outcome.split_once(':').map_or(outcome, |(kind, _)| kind);
    matches!(
        kind,
        "denied"
            | "server_process"
            | "unknown_tool"
            | "unknown_server"
            | "invalid_arguments"
            | "stale_tool"
            | "revision_not_kept"
            | "definition_held"
            | "concurrency_limited"
            | "rate_limited"
            | "quota_exhausted"
            | "unavailable"
            | "overloaded"
            | "task_required"
            | "continuation"
            | "approval_pending"
            | "approval_denied"
            | "approval_expired"
            | "approval_stale"
            | "approvals_exhausted"
    )
}

/// Whether an audit outcome records a call (that ran or was refused), not a task's start or
/// cancellation, nor an approval's request or decision.
pub fn is_call(outcome: &str) -> bool {
    !["task_started:", "task_cancelled:", "approval_requested:", "approval_decided:"].iter().any(|prefix| outcome.starts_with(prefix))
}
