//! The supervisor owns one worker task per configured server and the live [`Registry`] they
//! publish into. Only the supervisor starts and stops sessions.

mod commit;
mod enumerate;
pub mod gauges;
mod guard;
pub mod integrity;
pub(crate) mod lifecycle;
pub mod probe;
mod session_state;
mod trace;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::catalog::integrity::Approval;
use crate::catalog::record::EnumerationReason;
use crate::config::ServerSpec;
use crate::registry::{self, ConfigChange, Registry, ServerState, ServerView};
use crate::store::{Store, StoreError, StoredServer};
use crate::telemetry::metrics::Metrics;
use crate::upstream::reaper::Reaper;
use session_state::WorkerCommand;

/// Commands a worker may have queued before it reads them.
pub(crate) const WORKER_QUEUE: usize = 16;
/// Sessions that may be starting (connecting and enumerating for the first time) at once.
const CONCURRENT_STARTS: usize = 32;
/// After a restart with a stored catalog, how long sessions wait before starting: agents that
/// connect at boot get the stored catalog first, instead of racing a thousand session starts
/// for the CPU (each server is enumerated afresh right after).
const BOOT_GRACE: Duration = Duration::from_millis(100);
/// How long a reload waits for a removed or changed server to stop.
const WORKER_STOP_DEADLINE: Duration = Duration::from_secs(15);

pub(crate) type Senders = Arc<RwLock<BTreeMap<Arc<str>, mpsc::Sender<WorkerCommand>>>>;

/// Owns the workers. Dropping it without [`Supervisor::shutdown`] cancels them all the same.
pub struct Supervisor {
    metrics: Metrics,
    registry: Arc<Registry>,
    store: Store,
    reaper: Arc<Reaper>,
    specs: BTreeMap<Arc<str>, ServerSpec>,
    /// The era each server was last found to speak (from the store at boot).
    eras: std::collections::HashMap<String, String>,
    workers: BTreeMap<Arc<str>, WorkerHandle>,
    senders: Senders,
    tracker: TaskTracker,
    cancel: CancellationToken,
    start_permits: Arc<tokio::sync::Semaphore>,
    /// Whether `start_workers` has handed the start permits out.
    permits_released: bool,
}

struct WorkerHandle {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// What a reload changed, by server name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
}

// === impl Supervisor ===

impl Supervisor {
    /// Publishes every configured server with its last committed generation from the store
    /// (served at once, marked as revalidating). No server is started yet: see
    /// [`Supervisor::start_workers`].
    ///
    /// # Errors
    /// [`StoreError`] when the stored catalog cannot be read.
    pub async fn load(
        servers: &BTreeMap<String, ServerSpec>,
        store: Store,
        registry: Arc<Registry>,
        reaper: Arc<Reaper>,
        metrics: Metrics,
    ) -> Result<Supervisor, StoreError> {
        // Four reads on the pool's connections at once: the restart serves sooner.
        let (stored, eras, approvals, previous) = tokio::join!(
            store.generations().load_all_current(),
            store.generations().eras(),
            store.approvals().current(None),
            store.generations().previous_definitions(None)
        );
        let (mut stored, eras, mut approvals, mut previous) = (stored?, eras?, approvals?, previous?);
        let mut supervisor = Supervisor {
            metrics,
            registry,
            store,
            reaper,
            specs: BTreeMap::new(),
            eras,
            workers: BTreeMap::new(),
            senders: Senders::default(),
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
            // No permits yet: `start_workers` hands them out (after the boot grace when a
            // stored catalog is being served).
            start_permits: Arc::new(tokio::sync::Semaphore::new(0)),
            permits_released: false,
        };
        let mut views = Vec::with_capacity(servers.len());
        for (name, spec) in servers {
            let name: Arc<str> = name.as_str().into();
            let mut view = supervisor.view(&name, spec, stored.remove(&*name));
            let (approvals, previous) = (approvals.remove(&*name).unwrap_or_default(), previous.remove(&*name).unwrap_or_default());
            supervisor.judge(&mut view, approvals, &previous).await?;
            views.push(view);
            supervisor.specs.insert(name, spec.clone());
        }
        supervisor.registry.insert_all(views);
        Ok(supervisor)
    }

    /// Starts a worker for every enabled server. With a stored catalog to serve, their
    /// sessions start [`BOOT_GRACE`] later.
    pub fn start_workers(&mut self) {
        if self.start_permits.available_permits() == 0 && !self.permits_released {
            self.permits_released = true;
            let stored = self.registry.snapshot().servers.values().any(|view| view.generation().is_some());
            let (permits, cancel) = (self.start_permits.clone(), self.cancel.clone());
            match stored {
                true => {
                    self.tracker.spawn(async move {
                        tokio::select! {
                            () = cancel.cancelled() => {}
                            () = tokio::time::sleep(BOOT_GRACE) => permits.add_permits(CONCURRENT_STARTS),
                        }
                    });
                }
                false => permits.add_permits(CONCURRENT_STARTS),
            }
        }
        let enabled: Vec<(Arc<str>, ServerSpec)> =
            self.specs.iter().filter(|(_, spec)| spec.enabled).map(|(n, s)| (n.clone(), s.clone())).collect();
        for (name, spec) in enabled {
            if !self.workers.contains_key(&name) {
                self.spawn_worker(name, spec);
            }
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// A cheap, cloneable way to ask workers for refreshes and restarts from other tasks.
    pub fn refresher(&self) -> Refresher {
        Refresher { senders: self.senders.clone(), registry: self.registry.clone() }
    }

    /// Brings the running servers in line with a new configuration: starts added servers, stops
    /// removed ones, restarts those whose settings changed, and leaves the rest running.
    ///
    /// # Errors
    /// [`StoreError`] when an added server's stored catalog cannot be read.
    pub async fn reconcile(&mut self, servers: &BTreeMap<String, ServerSpec>) -> Result<ReloadSummary, StoreError> {
        let mut summary = ReloadSummary::default();
        let removed: Vec<Arc<str>> = self.specs.keys().filter(|name| !servers.contains_key(&***name)).cloned().collect();
        let changed: Vec<Arc<str>> = servers
            .iter()
            .filter_map(|(name, spec)| {
                self.specs.get_key_value(name.as_str()).filter(|(_, old)| *old != spec).map(|(name, _)| name.clone())
            })
            .collect();
        // Every server that must stop stops at once, under one deadline.
        self.stop_workers(removed.iter().chain(&changed)).await;
        for name in removed {
            self.specs.remove(&name);
            self.registry.remove(&name);
            summary.removed.push(name.to_string());
        }
        for (name, spec) in servers {
            let name: Arc<str> = name.as_str().into();
            match self.specs.get(&name) {
                None => {
                    self.add(name.clone(), spec.clone(), Some(ConfigChange::Added)).await?;
                    summary.added.push(name.to_string());
                }
                Some(old) if old != spec => {
                    self.add(name.clone(), spec.clone(), Some(ConfigChange::Changed)).await?;
                    summary.changed.push(name.to_string());
                }
                Some(_) => summary.unchanged.push(name.to_string()),
            }
        }
        Ok(summary)
    }

    /// Stops every worker (each runs its session's shutdown sequence) and waits for them until
    /// `deadline`; workers still running then are aborted, which kills their process groups.
    pub async fn shutdown(mut self, deadline: tokio::time::Instant) {
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout_at(deadline, self.tracker.wait()).await.is_err() {
            tracing::warn!("servers did not stop within the shutdown deadline; killing them");
            for worker in std::mem::take(&mut self.workers).into_values() {
                worker.task.abort();
            }
            // Aborted tasks finish as soon as they are polled; their drops kill the children.
            let _ = tokio::time::timeout(Duration::from_secs(1), self.tracker.wait()).await;
        }
    }

    /// Publishes a server (with its stored generation) and starts its worker if enabled.
    async fn add(&mut self, name: Arc<str>, spec: ServerSpec, change: Option<ConfigChange>) -> Result<(), StoreError> {
        let stored = self.store.generations().load_current(&name).await?;
        let mut view = self.view(&name, &spec, stored);
        let approvals = self.store.approvals().current(Some(&name)).await?.remove(&*name).unwrap_or_default();
        let previous = self.store.generations().previous_definitions(Some(&name)).await?.remove(&*name).unwrap_or_default();
        self.judge(&mut view, approvals, &previous).await?;
        self.registry.insert(view, change);
        if spec.enabled {
            self.spawn_worker(name.clone(), spec.clone());
        }
        self.specs.insert(name, spec);
        Ok(())
    }

    /// Evaluates a stored generation's integrity before it is first published, and hands the
    /// server's approvals to its shared state.
    async fn judge(
        &self,
        view: &mut ServerView,
        approvals: HashMap<String, Approval>,
        previous: &HashMap<String, String>,
    ) -> Result<(), StoreError> {
        let approvals = match view.generation().cloned() {
            Some(generation) => {
                let (states, approvals) =
                    integrity::evaluate_stored(&self.store, view.name(), &view.shared().policy, &generation, approvals, previous).await?;
                view.integrity_changed(states);
                approvals
            }
            None => approvals,
        };
        view.approvals_loaded(approvals);
        Ok(())
    }

    /// An operator's approvals and diffs.
    pub fn approver(&self) -> integrity::Approver {
        integrity::Approver { registry: self.registry.clone(), store: self.store.clone() }
    }

    fn view(&self, name: &Arc<str>, spec: &ServerSpec, stored: Option<StoredServer>) -> ServerView {
        let state = if spec.enabled { ServerState::Starting } else { ServerState::Disabled };
        let transport = spec.transport.label();
        let mut view = ServerView::new(
            name.clone(),
            state,
            transport,
            spec.max_concurrent_calls,
            spec.request_timeout,
            spec.audit_arguments,
            spec.integrity.clone(),
        );
        if let crate::config::Transport::Stdio(stdio) = &spec.transport {
            let sandbox = &stdio.sandbox;
            // The network as it runs: a package launcher left unset reaches its registry alone.
            let route = crate::upstream::effective_network(stdio);
            view.sandboxed(registry::SandboxView {
                enabled: sandbox.enabled,
                network: route.network,
                allow: route.reach.iter().map(|reach| reach.host.to_string()).collect(),
                reaches: route.reach.iter().map(|reach| (reach.host.to_string(), reach.why())).collect(),
                limits: sandbox.limits,
                last_limit: None,
                enforcement: self.reaper.enforcement(),
                // What it will see, as check-config counts it (else what its entry grants).
                read: crate::upstream::sandbox_reads(stdio).unwrap_or_else(|| sandbox.read.clone()),
                write: sandbox.write.clone(),
                given: crate::upstream::sandbox_given(stdio),
                home: sandbox.home.clone(),
                data: sandbox.data.as_ref().map(|data| data.path.clone()),
            });
        }
        // A private listing made with another credential is not this credential's to see: the
        // server lists again before its tools are served.
        let stored = stored.filter(|stored| match &stored.private_to {
            Some(owner) if *owner != spec.credential_fingerprint(name) => {
                tracing::info!(server = %name, "the stored listing was private to another credential; not served until the server lists again");
                false
            }
            _ => true,
        });
        if let Some(stored) = stored {
            view.stored(stored.generation, stored.last_verified_at_ms, spec.enabled);
        }
        view
    }

    fn spawn_worker(&mut self, name: Arc<str>, spec: ServerSpec) {
        let (commands_tx, commands_rx) = mpsc::channel(WORKER_QUEUE);
        let cancel = self.cancel.child_token();
        let seed = worker::WorkerSeed {
            name: name.clone(),
            spec,
            store: self.store.clone(),
            registry: self.registry.clone(),
            reaper: self.reaper.clone(),
            start_permits: self.start_permits.clone(),
            metrics: self.metrics.clone(),
            era: self.eras.get(&*name).and_then(|era| crate::mcp::lifecycle::Era::parse(era)),
            cancel: cancel.clone(),
            senders: self.senders.clone(),
        };
        self.senders.write().unwrap_or_else(PoisonError::into_inner).insert(name.clone(), commands_tx);
        let task = self.tracker.spawn(guard::guard(seed, commands_rx));
        self.workers.insert(name, WorkerHandle { cancel, task });
    }

    /// Cancels the named workers together, then waits for all of them at most
    /// [`WORKER_STOP_DEADLINE`], aborting any still running.
    async fn stop_workers<'a>(&mut self, names: impl Iterator<Item = &'a Arc<str>>) {
        let mut stopping = Vec::new();
        for name in names {
            self.senders.write().unwrap_or_else(PoisonError::into_inner).remove(name);
            if let Some(worker) = self.workers.remove(name) {
                worker.cancel.cancel();
                stopping.push((name.clone(), worker.task));
            }
        }
        let deadline = crate::deadline::after(WORKER_STOP_DEADLINE);
        for (name, task) in stopping {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                tracing::warn!(server = %name, "the server did not stop in time; its task was aborted");
                abort.abort();
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Sends refresh and restart requests to workers; held by the front doors and the call path.
#[derive(Clone)]
pub struct Refresher {
    senders: Senders,
    registry: Arc<Registry>,
}

/// What an operator asks of a server's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAction {
    /// List the tools again.
    Refresh,
    /// Start a fresh session.
    Restart,
}

/// Why an operator's refresh or restart was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperateError {
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("server {0:?} is disabled")]
    Disabled(String),
}

impl Refresher {
    /// An operator's refresh or restart of `server` (every front door's): refused for a server
    /// that does not exist or is disabled, which no worker runs.
    ///
    /// # Errors
    /// [`OperateError`].
    pub fn operate(&self, server: &str, action: ServerAction) -> Result<(), OperateError> {
        let view = self.registry.server(server).ok_or_else(|| OperateError::UnknownServer(server.to_owned()))?;
        if view.state() == ServerState::Disabled {
            return Err(OperateError::Disabled(server.to_owned()));
        }
        match action {
            ServerAction::Refresh => self.refresh(server, EnumerationReason::Manual),
            ServerAction::Restart => self.restart(server),
        }
        Ok(())
    }

    /// Asks for a re-enumeration; requests that find the worker busy coalesce.
    pub fn refresh(&self, server: &str, reason: EnumerationReason) {
        self.send(server, WorkerCommand::Refresh(reason, None));
    }

    /// Asks for a re-enumeration whose trace links back to `cause` (the call that found a tool
    /// missing).
    pub fn refresh_linked(&self, server: &str, reason: EnumerationReason, cause: Option<opentelemetry::trace::SpanContext>) {
        self.send(server, WorkerCommand::Refresh(reason, cause));
    }

    /// Asks for a fresh session.
    pub fn restart(&self, server: &str) {
        self.send(server, WorkerCommand::Restart);
    }

    /// The server's authorization changed (an operator logged in): a worker waiting out its
    /// backoff tries now; a running session goes on (its authorizer already has the token).
    pub fn authorized(&self, server: &str) {
        self.send(server, WorkerCommand::Authorized);
    }

    fn send(&self, server: &str, command: WorkerCommand) {
        let sender = self.senders.read().unwrap_or_else(PoisonError::into_inner).get(server).cloned();
        // A full queue already holds a request that will run after this moment.
        if let Some(sender) = sender {
            let _ = sender.try_send(command);
        }
    }
}
