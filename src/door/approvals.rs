//! Calls a person approves before they run. A call whose tool an agent entry's (or its server's)
//! `approve` names is not sent: it becomes a request, bound to the caller's principal, the tool,
//! the definition hash in force, its arguments (RFC 8785 canonical JSON) and the caller's policy
//! revision, until an expiry. Approved, it runs at most once, with exactly those arguments,
//! after the policy and the definition are checked again; denied, expired or stale, it does not
//! run and says which. The same call asked again follows its request instead of asking anew, so
//! a caller whose deadline passed while waiting loses nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::access::Caller;
use crate::calls::{ApprovalError, CallError, ToolRef};
use crate::catalog::record::now_ms;
use crate::config::ApprovalsConfig;
use crate::registry::{CatalogSnapshot, Registry};
use crate::store::call_approvals::{Admission, ApprovalRecord, ApprovalStatus};
use crate::store::{Store, StoreError};

/// Requests a listing shows at most.
pub const MAX_LISTED: u32 = 500;
/// New requests kept for watchers that have not read them yet (one that falls further behind
/// misses some, and lists them: `toolhost approvals`).
const REQUESTS_KEPT: usize = 64;

/// The daemon's approval requests. Cheap to clone; owned by the [`super::Door`].
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: ApprovalsConfig,
    /// Moves with every decision: what waiting calls watch.
    decided: watch::Sender<u64>,
    /// Every new request, as it is stored: what watchers (`toolhost watch`, the console) show.
    requested: broadcast::Sender<ApprovalRecord>,
}

/// Why an operator's decision was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("no approval request {0:?}")]
    Unknown(String),
    #[error("approval request {id:?} is {status}, not pending: it was decided already, or expired")]
    NotPending { id: String, status: &'static str },
    #[error("agent entry {operator:?} asked for this call and may not approve it, by any of its credentials (approvals.separate_approver)")]
    OwnRequest { operator: String },
    #[error("approval store: {0}")]
    Store(#[from] StoreError),
}

/// A request that may now run: its record, used.
pub(super) struct Approved {
    pub(super) record: ApprovalRecord,
}

/// What a call that needs approval is.
pub(super) struct Asked<'a> {
    pub(super) caller: &'a Caller,
    pub(super) tool: &'a ToolRef,
    pub(super) arguments: &'a str,
    /// How long the caller waits for a decision.
    pub(super) wait: Duration,
    pub(super) progress: Option<&'a tokio::sync::mpsc::Sender<Box<serde_json::value::RawValue>>>,
    /// The request a task's call follows by id after a restart (the caller that asked is not
    /// there to be matched again).
    pub(super) followed: Option<&'a str>,
}

/// A call's arguments as RFC 8785 canonical JSON, and its SHA-256.
///
/// # Errors
/// [`CallError::InvalidArguments`]: not a JSON object.
pub fn canonical_arguments(arguments: &str) -> Result<(String, String), CallError> {
    let value: serde_json::Value = serde_json::from_str(arguments).map_err(|error| CallError::InvalidArguments(error.to_string()))?;
    if !value.is_object() {
        return Err(CallError::InvalidArguments("not an object".to_owned()));
    }
    let canonical = serde_json_canonicalizer::to_string(&value).map_err(|error| CallError::InvalidArguments(error.to_string()))?;
    let digest = crate::catalog::model::sha256_hex(canonical.as_bytes());
    Ok((canonical, digest))
}

impl Approvals {
    #[must_use]
    pub fn new(store: Store, settings: ApprovalsConfig) -> Approvals {
        let requested = broadcast::Sender::new(REQUESTS_KEPT);
        Approvals { inner: Arc::new(Inner { store, settings, decided: watch::Sender::new(0), requested }) }
    }

    /// The request `asked`'s call waits for: the one a task follows after a restart, the live
    /// request of the same call asked before, else a new one (told to `requested`, for the
    /// trail); `None` when there is no such tool to approve.
    ///
    /// # Errors
    /// [`CallError::Approval`] (expired, too many), [`CallError::Store`].
    pub(super) async fn request(
        &self,
        asked: &Asked<'_>,
        registry: &Registry,
        requested: impl FnOnce(&ApprovalRecord),
    ) -> Result<Option<ApprovalRecord>, CallError> {
        let stored = |error: StoreError| CallError::Store(error.to_string());
        match asked.followed {
            // The request a task waited for before a restart: its own (the task checked), for
            // this tool, and judged as any other, whatever the catalog is at start.
            Some(id) => match self.inner.store.call_approvals().get(id).await.map_err(stored)? {
                Some(record) if record.qualified_name == *asked.tool.qualified() => Ok(Some(record)),
                _ => Err(ApprovalError::Expired { id: id.to_owned() }.into()),
            },
            None => self.request_for(asked, registry, requested).await,
        }
    }

    /// Waits for a decision on `record` within `asked`'s wait, and on approval checks the policy
    /// and the definition again and uses the approval.
    ///
    /// # Errors
    /// [`CallError::Approval`] (pending past the wait, denied, expired, stale), [`CallError::Store`].
    pub(super) async fn decision(&self, asked: &Asked<'_>, mut record: ApprovalRecord, registry: &Registry) -> Result<Approved, CallError> {
        let store = &self.inner.store;
        let stored = |error: StoreError| CallError::Store(error.to_string());
        if let Some(progress) = asked.progress {
            let message = format!("waiting for approval by an operator (request {})", record.id);
            tell(progress, &message);
        }
        let until = crate::deadline::after(asked.wait);
        let mut decided = self.inner.decided.subscribe();
        loop {
            decided.borrow_and_update();
            match record.status {
                ApprovalStatus::Pending => {}
                ApprovalStatus::Approved => break,
                ApprovalStatus::Denied => {
                    let by = record.decided_by.clone().unwrap_or_default();
                    return Err(ApprovalError::Denied { id: record.id, by, reason: record.reason }.into());
                }
                ApprovalStatus::Expired | ApprovalStatus::Used | ApprovalStatus::Stale => {
                    return Err(ApprovalError::Expired { id: record.id }.into());
                }
            }
            let left_ms = record.expires_at_ms.saturating_sub(now_ms());
            let expiry = crate::deadline::after(Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)));
            tokio::select! {
                changed = decided.changed() => if changed.is_err() { return Err(CallError::Store("approvals closed".to_owned())) },
                () = tokio::time::sleep_until(expiry) => {
                    store.call_approvals().transition(&record.id, ApprovalStatus::Pending, ApprovalStatus::Expired, None, now_ms()).await.map_err(stored)?;
                }
                () = tokio::time::sleep_until(until) => {
                    return Err(ApprovalError::Pending { id: record.id, expires_at_ms: record.expires_at_ms, task: None }.into());
                }
            }
            record = store
                .call_approvals()
                .get(&record.id)
                .await
                .map_err(stored)?
                .ok_or_else(|| ApprovalError::Expired { id: record.id.clone() })?;
        }
        // Approved: what it binds must still hold, checked now, against what runs.
        let changed = if record.policy_revision != asked.caller.agent.policy_revision {
            Some("the caller's policy")
        } else if record.definition_hash != definition_hash_now(&registry.snapshot(), asked.tool).unwrap_or_default() {
            Some("the tool's definition")
        } else {
            None
        };
        if let Some(what) = changed {
            store
                .call_approvals()
                .transition(&record.id, ApprovalStatus::Approved, ApprovalStatus::Stale, None, now_ms())
                .await
                .map_err(stored)?;
            return Err(ApprovalError::Stale { id: record.id, what: what.to_owned() }.into());
        }
        // At most once: of two calls holding this approval, one moves it to used.
        if !store
            .call_approvals()
            .transition(&record.id, ApprovalStatus::Approved, ApprovalStatus::Used, None, now_ms())
            .await
            .map_err(stored)?
        {
            return Err(ApprovalError::Expired { id: record.id }.into());
        }
        if let Some(progress) = asked.progress {
            tell(progress, &format!("approved by {}; running", record.decided_by.as_deref().unwrap_or("an operator")));
        }
        Ok(Approved { record })
    }

    /// The live request of `asked`'s call (the same call asked before), else a new one (told to
    /// `requested`); `None` when there is no such tool to approve.
    async fn request_for(
        &self,
        asked: &Asked<'_>,
        registry: &Registry,
        requested: impl FnOnce(&ApprovalRecord),
    ) -> Result<Option<ApprovalRecord>, CallError> {
        let store = &self.inner.store;
        let snapshot = registry.snapshot();
        let Some((view, idx)) = crate::calls::locate(&snapshot.servers, asked.tool) else {
            // Nothing to approve: the call fails as a call of an unknown tool does.
            return Ok(None);
        };
        let Some(definition_hash) = view.generation().and_then(|generation| generation.tools.get(idx)).map(|tool| tool.hash.clone()) else {
            return Ok(None);
        };
        let qualified = view.qualified().name(idx).to_owned();
        let (arguments, digest) = canonical_arguments(asked.arguments)?;
        let principal = asked.caller.principal();
        let now = now_ms();
        let stored = |error: StoreError| CallError::Store(error.to_string());
        if let Some(record) = store.call_approvals().live(&principal, &qualified, &digest, now).await.map_err(stored)? {
            return Ok(Some(record));
        }
        let ttl = i64::try_from(self.inner.settings.ttl.as_millis()).unwrap_or(i64::MAX);
        let record = ApprovalRecord {
            id: crate::secrets::random_token().ok_or_else(|| CallError::Store("no random source for an approval id".to_owned()))?,
            principal,
            agent: asked.caller.agent.name.to_string(),
            caller: asked.caller.identity.describe(),
            qualified_name: qualified,
            definition_hash,
            arguments,
            arguments_digest: digest,
            policy_revision: asked.caller.agent.policy_revision.clone(),
            status: ApprovalStatus::Pending,
            requested_at_ms: now,
            expires_at_ms: now.saturating_add(ttl),
            decided_by: None,
            decided_at_ms: None,
            reason: None,
            task_id: None,
        };
        let settings = &self.inner.settings;
        match store.call_approvals().insert(&record, settings.max_pending_per_agent, settings.max_pending, now).await.map_err(stored)? {
            Admission::Stored => {
                requested(&record);
                // No watcher is no one to tell.
                let _ = self.inner.requested.send(record.clone());
            }
            Admission::AgentFull(limit) => {
                return Err(ApprovalError::TooMany { whose: format!("agent {:?}", record.agent), limit }.into());
            }
            Admission::Full(limit) => return Err(ApprovalError::TooMany { whose: "toolhost".to_owned(), limit }.into()),
        }
        Ok(Some(record))
    }

    /// An operator's decision on a pending request: approve, or deny with a reason. Exactly one
    /// decision of several at once wins.
    ///
    /// # Errors
    /// [`DecideError`].
    pub(super) async fn decide(
        &self,
        operator: &Caller,
        id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<ApprovalRecord, DecideError> {
        let store = &self.inner.store;
        let unknown = || DecideError::Unknown(crate::door::truncate(id.to_owned(), 128));
        let record = store.call_approvals().get(id).await?.ok_or_else(unknown)?;
        // The approver is another entry, not another credential of the same one: an entry's
        // tokens, certificate and uids are one party (its principal names the entry first).
        if self.inner.settings.separate_approver
            && approve
            && (record.agent == *operator.agent.name || record.principal == operator.principal())
        {
            return Err(DecideError::OwnRequest { operator: operator.agent.name.to_string() });
        }
        let by = format!("{} ({})", operator.agent.name, operator.identity.describe());
        let to = if approve { ApprovalStatus::Approved } else { ApprovalStatus::Denied };
        let reason = reason.map(|reason| crate::door::truncate(reason.trim().to_owned(), 1000)).filter(|reason| !reason.is_empty());
        if !store.call_approvals().transition(id, ApprovalStatus::Pending, to, Some((&by, reason.as_deref())), now_ms()).await? {
            let now = store.call_approvals().get(id).await?.ok_or_else(unknown)?;
            let status = if now.status == ApprovalStatus::Pending { ApprovalStatus::Expired } else { now.status };
            return Err(DecideError::NotPending { id: now.id, status: status.as_str() });
        }
        self.inner.decided.send_modify(|count| *count = count.wrapping_add(1));
        store.call_approvals().get(id).await?.ok_or_else(unknown)
    }

    /// Requests, newest first (expired ones marked so first).
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn list(&self, status: Option<ApprovalStatus>) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.inner.store.call_approvals().expire(now_ms()).await?;
        self.inner.store.call_approvals().list(status, MAX_LISTED).await
    }

    /// One request.
    ///
    /// # Errors
    /// [`StoreError`].
    pub async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.inner.store.call_approvals().get(id).await
    }

    /// Makes `task` the follower of request `id` if its follower is still `was`.
    ///
    /// # Errors
    /// [`StoreError`].
    pub(super) async fn follow(&self, id: &str, was: Option<&str>, task: &str) -> Result<bool, StoreError> {
        self.inner.store.call_approvals().follow(id, was, task).await
    }

    /// New requests from now on, as they are stored.
    #[must_use]
    pub fn requests(&self) -> broadcast::Receiver<ApprovalRecord> {
        self.inner.requested.subscribe()
    }

    /// How long a plain call waits for a decision before it answers with its request.
    #[must_use]
    pub fn answer_after(&self) -> Duration {
        self.inner.settings.answer_after
    }

    /// Whether an operator may not approve their own calls.
    #[must_use]
    pub fn separate_approver(&self) -> bool {
        self.inner.settings.separate_approver
    }
}

/// How a wait for approval ended, as metrics name it.
pub(super) fn outcome(refusal: &ApprovalError) -> &'static str {
    match refusal {
        ApprovalError::Pending { .. } => "pending",
        ApprovalError::Denied { .. } => "denied",
        ApprovalError::Expired { .. } => "expired",
        ApprovalError::Stale { .. } => "stale",
        ApprovalError::TooMany { .. } => "exhausted",
    }
}

/// The definition hash of `tool` in `snapshot`, if it is there.
fn definition_hash_now(snapshot: &CatalogSnapshot, tool: &ToolRef) -> Option<String> {
    let (view, idx) = crate::calls::locate(&snapshot.servers, tool)?;
    view.generation()?.tools.get(idx).map(|tool| tool.hash.clone())
}

/// Tells a caller following the call's progress where it is (a task shows it as its status).
fn tell(progress: &tokio::sync::mpsc::Sender<Box<serde_json::value::RawValue>>, message: &str) {
    let params = serde_json::json!({"progressToken": 0, "progress": 0, "message": message});
    if let Ok(raw) = serde_json::value::to_raw_value(&params) {
        let _ = progress.try_send(raw);
    }
}
