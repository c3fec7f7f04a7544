//! The operator side of the door: what a person with an operator's agent entry may see and do,
//! whichever front door they came through (the gRPC API, the console). Every action and every
//! read of another agent's data takes the operator's [`Caller`] and refuses anyone else, so a
//! door cannot forget the check; the work itself is the supervisor's, the store's and the fleet
//! store's, which no front door names.

use std::sync::Arc;

use tokio::sync::watch;

use super::error::DoorError;
use super::model::{AuditFilter, AuditRecord, Caller, DefinitionDiff, Hold, ServerState, Span, Verdict};
use super::reload::{ReloadReport, Reloads};
use crate::fleet::Fleet;
use crate::fleet::query::{Drift, Host};
use crate::registry::Registry;
use crate::store::Store;
use crate::supervisor::integrity::{ApproveError, Approver};
use crate::supervisor::{Refresher, ServerAction};
use crate::upstream::oauth::authorizer::Authorizer;
pub use crate::upstream::oauth::authorizer::{LOGIN_TIMEOUT, LoginStarted};

/// The operator side. Cheap to clone.
#[derive(Clone)]
pub struct Operator {
    registry: Arc<Registry>,
    store: Store,
    refresher: Refresher,
    approver: Approver,
    fleet: Option<Fleet>,
    /// The public half of the key the audit checkpoints are signed with, if there is one.
    audit_key: Option<ed25519_dalek::VerifyingKey>,
    /// What the audit chain's verification at start found broken, if anything.
    audit_broken: watch::Receiver<Option<String>>,
    reloads: Reloads,
}

/// Which front door an operator acts through, as the records of their approvals say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Grpc,
    Console,
}

/// An audit record, and the fleet host that wrote it when it came from the fleet store.
pub struct Found {
    pub host_id: Option<String>,
    pub record: AuditRecord,
}

/// The fleet store's link and what it holds.
pub struct FleetStatus {
    pub host_id: String,
    pub connected: bool,
    pub last_error: Option<String>,
    pub audit_pending: u64,
    pub drifted_tools: u64,
    pub hosts: Vec<Host>,
    pub drift: Vec<Drift>,
}

/// What the daemon's health says: every server tried once, the store writable, the audit chain
/// found intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub settled: bool,
    pub store_writable: bool,
    pub audit_intact: bool,
}

impl Operator {
    pub fn new(
        registry: Arc<Registry>,
        store: Store,
        refresher: Refresher,
        approver: Approver,
        fleet: Option<Fleet>,
        audit_key: Option<ed25519_dalek::VerifyingKey>,
        audit_broken: watch::Receiver<Option<String>>,
    ) -> Operator {
        Operator { registry, store, refresher, approver, fleet, audit_key, audit_broken, reloads: Reloads::unavailable() }
    }

    /// Reloads are asked of the daemon's run loop through `reloads`.
    #[must_use]
    pub fn with_reloads(self, reloads: Reloads) -> Operator {
        Operator { reloads, ..self }
    }

    /// Reloads the daemon's configuration file: see [`Reloads::reload`].
    ///
    /// # Errors
    /// Not an operator; the reload's own errors.
    pub async fn reload(&self, by: &Caller) -> Result<ReloadReport, DoorError> {
        self.reloads.reload(by).await
    }

    /// Refreshes or restarts `server`.
    ///
    /// # Errors
    /// Not an operator; no such server; a disabled one.
    pub fn operate(&self, by: &Caller, server: &str, action: ServerAction) -> Result<(), DoorError> {
        by.require_admin()?;
        Ok(self.refresher.operate(server, action)?)
    }

    /// Approves the named tools of `server` (or all), bound to `hash` when given: see
    /// `Approver::approve`. Returns the `(tool, hash)` approved.
    ///
    /// # Errors
    /// Not an operator; the approval's own errors.
    pub async fn approve(
        &self,
        by: &Caller,
        via: Via,
        server: &str,
        tools: &[String],
        all: bool,
        hash: Option<&str>,
    ) -> Result<Vec<(String, String)>, DoorError> {
        by.require_admin()?;
        let through = match via {
            Via::Grpc => "",
            Via::Console => ", console",
        };
        let signed = format!("{} ({}{through})", by.agent.name, by.identity.describe());
        let hash = super::given(hash);
        Ok(self.approver.approve(server, tools, all, hash, &signed).await?)
    }

    /// The approved and the offered definition of a tool, and what changed.
    ///
    /// # Errors
    /// Not an operator; no such server or tool; the store.
    pub async fn diff(&self, by: &Caller, server: &str, tool: &str) -> Result<DefinitionDiff, DoorError> {
        by.require_admin()?;
        Ok(self.approver.diff(server, tool).await?)
    }

    /// Held tools now (at most `max`), each with its diff: what waits for review. A tool that
    /// moved on since the snapshot is shown as it is now, or not at all.
    ///
    /// # Errors
    /// Not an operator; the store.
    pub async fn held(&self, by: &Caller, max: usize) -> Result<Vec<(String, String, Hold, DefinitionDiff)>, DoorError> {
        by.require_admin()?;
        let snapshot = self.registry.snapshot();
        let mut held = Vec::new();
        for view in snapshot.servers.values() {
            let Some(generation) = view.generation() else { continue };
            for (idx, tool) in generation.tools.iter().enumerate() {
                let Some(hold) = view.held(idx) else { continue };
                if held.len() >= max {
                    return Ok(held);
                }
                match self.approver.diff(view.name(), &tool.name).await {
                    Ok(diff) => held.push((view.name().to_string(), tool.name.clone(), hold, diff)),
                    Err(ApproveError::Store(error)) => return Err(error.into()),
                    Err(_) => {}
                }
            }
        }
        Ok(held)
    }

    /// The latest definition approvals, newest first: `(server, tool, approval)`.
    ///
    /// # Errors
    /// Not an operator; the store.
    pub async fn recent_approvals(&self, by: &Caller, limit: u32) -> Result<Vec<(String, String, super::model::Approval)>, DoorError> {
        by.require_admin()?;
        Ok(self.store.approvals().recent(limit).await?)
    }

    /// Audit records at or after `since_ms` (of `agent` if given), newest first; from the fleet
    /// store (every host's) when `fleet`.
    ///
    /// # Errors
    /// Not an operator; the store; the fleet store absent or unreachable.
    pub async fn audit(&self, by: &Caller, since_ms: i64, agent: Option<&str>, limit: u32, fleet: bool) -> Result<Vec<Found>, DoorError> {
        by.require_admin()?;
        let agent = agent.filter(|agent| !agent.is_empty());
        if fleet {
            let pool = self.fleet()?.pool()?;
            let records = crate::fleet::query::audit(&pool, since_ms, agent, limit).await?;
            return Ok(records.into_iter().map(|found| Found { host_id: Some(found.host_id), record: found.record }).collect());
        }
        let records = self.store.audit().query(since_ms, agent, limit).await?;
        Ok(records.into_iter().map(|record| Found { host_id: None, record }).collect())
    }

    /// Audit records that pass `filter`, newest first, and how many of each outcome fell in
    /// each `bucket_ms` window: the audit page.
    ///
    /// # Errors
    /// Not an operator; the store.
    #[allow(clippy::type_complexity)]
    pub async fn audit_window(
        &self,
        by: &Caller,
        filter: &AuditFilter,
        rows: u32,
        bucket_ms: i64,
    ) -> Result<(Vec<AuditRecord>, Vec<(i64, String, u64)>), DoorError> {
        by.require_admin()?;
        let records = self.store.audit().query_filtered(filter, rows).await?;
        let sums = self.store.audit().histogram(filter, bucket_ms).await?;
        Ok((records, sums))
    }

    /// The audit chain in `span` checked with the daemon's key, beside the fleet's copy of this
    /// host's checkpoints when it keeps one and answers. Returns the verdict and how many
    /// checkpoints the fleet gave.
    ///
    /// # Errors
    /// Not an operator; no audit key; the store; the fleet store.
    pub async fn verify_audit(&self, by: &Caller, span: Span) -> Result<(Verdict, u64), DoorError> {
        by.require_admin()?;
        let key = self.audit_key.ok_or_else(|| {
            DoorError::new(
                super::error::Kind::FailedPrecondition,
                "NO_AUDIT_KEY",
                "the daemon has no audit key: its checkpoints are not signed",
                vec![],
            )
        })?;
        let kept = match self.fleet.as_ref().filter(|fleet| fleet.shares_audit()).map(|fleet| (fleet.pool(), fleet.host_id())) {
            Some((Ok(pool), host_id)) => crate::fleet::verify::checkpoints_of(&pool, host_id).await?,
            _ => Vec::new(),
        };
        let verdict = self.store.audit().verify(&key, span, &kept).await?;
        Ok((verdict, u64::try_from(kept.len()).unwrap_or(u64::MAX)))
    }

    /// The fleet store's link, its hosts and where their definitions drift.
    ///
    /// # Errors
    /// Not an operator; no `[fleet]`; the fleet store.
    pub async fn fleet_status(&self, by: &Caller) -> Result<FleetStatus, DoorError> {
        by.require_admin()?;
        let fleet = self.fleet()?;
        let pool = fleet.pool()?;
        Ok(FleetStatus {
            host_id: fleet.host_id().to_owned(),
            connected: fleet.is_connected(),
            last_error: fleet.last_error(),
            audit_pending: fleet.audit_pending(),
            drifted_tools: fleet.drifted_tools(),
            hosts: crate::fleet::query::hosts(&pool).await?,
            drift: crate::fleet::query::drift(&pool).await?,
        })
    }

    fn fleet(&self) -> Result<&Fleet, DoorError> {
        Ok(self.fleet.as_ref().ok_or(crate::fleet::FleetError::NotConfigured)?)
    }

    /// Starts an OAuth login of `server` done by the daemon (the operator's browser completes
    /// it); `port` is where the operator's side listens, for a redirect URI that names none.
    ///
    /// # Errors
    /// Not an operator; no such server, or one without a login; the authorization server.
    pub async fn begin_login(
        &self,
        by: &Caller,
        server: &str,
        scope: Option<String>,
        port: Option<u16>,
    ) -> Result<LoginStarted, DoorError> {
        let authorizer = self.authorizer(by, server)?;
        authorizer.begin_login(scope, port).await.map_err(|error| DoorError::login(server, error))
    }

    /// Completes a login with the query the browser was redirected with; a server waiting out
    /// its backoff then tries at once. Returns the token file.
    ///
    /// # Errors
    /// As [`Operator::begin_login`].
    pub async fn complete_login(&self, by: &Caller, server: &str, login_id: &str, query: &str) -> Result<String, DoorError> {
        let authorizer = self.authorizer(by, server)?;
        authorizer.complete_login(login_id, query).await.map_err(|error| DoorError::login(server, error))?;
        self.refresher.authorized(server);
        Ok(authorizer.token_file().display().to_string())
    }

    /// Forgets `server`'s tokens and ends its session, so that its state says so now. Returns
    /// what was done and the token file.
    ///
    /// # Errors
    /// As [`Operator::begin_login`].
    pub async fn logout(&self, by: &Caller, server: &str) -> Result<(String, String), DoorError> {
        let authorizer = self.authorizer(by, server)?;
        let outcome = authorizer.logout().await.map_err(|error| DoorError::login(server, error))?;
        self.refresher.restart(server);
        Ok((outcome, authorizer.token_file().display().to_string()))
    }

    fn authorizer(&self, by: &Caller, server: &str) -> Result<Arc<Authorizer>, DoorError> {
        by.require_admin()?;
        let view = self.registry.server(server).ok_or_else(|| DoorError::unknown_server(server))?;
        view.authorizer()
            .cloned()
            .filter(|authorizer| authorizer.grant() == crate::config::auth::Grant::AuthorizationCode)
            .ok_or_else(|| DoorError::no_login(server))
    }

    /// The daemon's health as it changes: the first value at once, then one per change, until
    /// the daemon stops (`None`).
    pub fn health(&self) -> HealthWatch {
        HealthWatch {
            registry: self.registry.clone(),
            revisions: self.registry.subscribe_status(),
            degraded: self.store.watch_degraded(),
            audit_broken: self.audit_broken.clone(),
            first: true,
            settled: false,
        }
    }
}

/// Follows the daemon's [`Health`].
pub struct HealthWatch {
    registry: Arc<Registry>,
    revisions: watch::Receiver<u64>,
    degraded: watch::Receiver<Option<Arc<str>>>,
    audit_broken: watch::Receiver<Option<String>>,
    first: bool,
    /// Set once: every enabled server has had its first connection attempt.
    settled: bool,
}

impl HealthWatch {
    /// The health now, at once the first time, then when something it depends on changes.
    pub async fn next(&mut self) -> Option<Health> {
        if !std::mem::take(&mut self.first) {
            tokio::select! {
                changed = self.revisions.changed(), if !self.settled => changed.ok()?,
                changed = self.degraded.changed() => changed.ok()?,
                // The verification ends once; its sender then goes, which is no reason to stop.
                Ok(()) = self.audit_broken.changed() => {}
            }
        }
        let store_writable = self.degraded.borrow_and_update().is_none();
        let audit_intact = self.audit_broken.borrow_and_update().is_none();
        if !self.settled {
            self.settled = self.registry.snapshot().servers.values().all(|view| view.state() != ServerState::Starting);
        }
        Some(Health { settled: self.settled, store_writable, audit_intact })
    }
}
