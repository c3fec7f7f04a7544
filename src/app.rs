//! The composition root: opens the store, starts the supervisor and the API, tells the service
//! manager how things stand, reloads on request, and owns the shutdown order. The only module
//! that wires subsystems together.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::access::Access;
use crate::api::{self, ApiParts, ApiStartError};
use crate::audit::{Auditor, Retention};
use crate::calls::Calls;
use crate::config::Config;
use crate::console::{self, Console};
use crate::door::Door;
use crate::door::operator::Operator;
use crate::door::tasks::Tasks;
use crate::endpoint::{self, Endpoint};
use crate::fleet::{Fleet, FleetParts};
use crate::instance::{InstanceError, InstanceLock};
use crate::listen::BoundAddr;
use crate::registry::{Registry, ServerState};
use crate::signals::{Event, Signals};
use crate::store::{Store, StoreError};
use crate::supervisor::{ReloadSummary, Supervisor};
use crate::systemd::{self, Notifier};
use crate::telemetry::metrics::{self, Metrics};
use crate::upstream::reaper::Reaper;

/// How often at most the service manager's STATUS line is updated.
const STATUS_INTERVAL: Duration = Duration::from_millis(500);
/// How long the background tasks (audit writer, exports, fleet link...) get to end once told:
/// each ends at once but the audit writer, which stores its last batch first.
const BACKGROUND_GRACE: Duration = Duration::from_secs(5);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Instance(#[from] InstanceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Api(#[from] ApiStartError),
    #[error(transparent)]
    Listen(#[from] crate::listen::BindError),
    #[error("cannot start the orphan guard: {0}")]
    Reaper(std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// Process-level settings that do not come from the configuration file.
pub struct RuntimeOptions {
    /// The program to run as `PROGRAM __reap` (toolhost itself); `None` runs without the guard.
    pub reaper_program: Option<PathBuf>,
    pub notifier: Notifier,
}

/// A running daemon: what tests and `main` hold while it runs.
pub struct App {
    config: Config,
    store: Store,
    supervisor: Supervisor,
    calls: Calls,
    access: Arc<Access>,
    reaper: Arc<Reaper>,
    notifier: Arc<Notifier>,
    grpc_addrs: Vec<BoundAddr>,
    mcp_addrs: Vec<BoundAddr>,
    console_addrs: Vec<BoundAddr>,
    endpoint: Arc<Endpoint>,
    api_tasks: TaskTracker,
    api_cancel: CancellationToken,
    /// Status and watchdog reporting.
    background: TaskTracker,
    background_cancel: CancellationToken,
    tasks: Tasks,
    /// The fleet store's link, when `[fleet]` is configured.
    fleet: Option<Fleet>,
    /// This daemon's hold on the store, released last.
    _instance: InstanceLock,
    /// Keeps the registry gauges' callbacks registered.
    _gauges: crate::supervisor::gauges::RegistryGauges,
    _store_gauge: opentelemetry::metrics::ObservableGauge<u64>,
    _fleet_gauges: Option<crate::fleet::gauges::FleetGauges>,
}

// === impl App ===

impl App {
    /// Starts without a service manager or an orphan guard (tests, embedding).
    ///
    /// # Errors
    /// See [`App::start_with`].
    pub async fn start(config: Config) -> Result<App, StartError> {
        App::start_with(config, RuntimeOptions { reaper_program: None, notifier: Notifier::disabled() }).await
    }

    /// Takes the store for this process (a second daemon on it is refused), binds the API
    /// listeners, opens and migrates the store, loads the stored catalog, starts
    /// every enabled server, serves the API, and then tells the service manager it is ready.
    ///
    /// # Errors
    /// [`StartError`] when another daemon serves the store, a listener cannot be bound, the store cannot be opened or read, or
    /// the orphan guard cannot be started.
    pub async fn start_with(config: Config, options: RuntimeOptions) -> Result<App, StartError> {
        let started = std::time::Instant::now();
        // Before anything is bound or spawned: a second daemon on this store stops here.
        let instance = InstanceLock::acquire(&config.store.path)?;
        let (grpc_addrs, listeners) = api::bind(&config.grpc.listen).await?;
        let (mcp_addrs, mcp_listeners) = endpoint::bind(&config.mcp.listen).await?;
        let (console_addrs, console_listeners) = console::bind(&config.console).await?;
        let store = Store::open(&config.store.path, config.store.history_generations).await?;
        let reaper = Arc::new(match &options.reaper_program {
            Some(program) => Reaper::spawn(program).map_err(StartError::Reaper)?,
            None => Reaper::disabled(),
        });
        let registry = Arc::new(Registry::with_event_log(config.grpc.watch_backlog));
        let metrics = Metrics::global();
        let gauges = crate::supervisor::gauges::register(&opentelemetry::global::meter(crate::telemetry::SCOPE), registry.clone());
        let store_gauge = metrics::register_store_gauge(&opentelemetry::global::meter(crate::telemetry::SCOPE), store.watch_degraded());
        let mut supervisor = Supervisor::load(&config.servers, store.clone(), registry.clone(), reaper.clone(), metrics.clone()).await?;
        let snapshot = registry.snapshot();
        let stored_tools: usize = snapshot.servers.values().filter_map(|v| v.generation.as_ref()).map(|g| g.tools.len()).sum();
        tracing::info!(
            servers = snapshot.servers.len(),
            tools = stored_tools,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "stored catalog loaded"
        );
        let calls = Calls::new(registry.clone(), store.clone(), supervisor.refresher(), metrics.clone());
        let access = Arc::new(Access::new(&config.access));
        let background = TaskTracker::new();
        let background_cancel = CancellationToken::new();
        let retention = Retention { max_age: config.access.audit_retention, max_records: config.access.audit_max_records };
        // The audit writer outlives the API (it drains what the last calls recorded) and stops
        // with the other background tasks, before the store closes.
        // The audit chain's signing key: beside the store, private like it, unless the operator
        // provides one (a file, or a systemd credential).
        let key_place = config.audit.key_place(&config.store.path);
        let signer = match crate::store::audit_chain::load_or_make_key(&key_place.path, key_place.made_if_missing) {
            Ok(key) => Some(key),
            Err(problem) => {
                tracing::error!(%problem, "the audit trail is chained but its checkpoints cannot be signed");
                None
            }
        };
        // The chain is verified once at start, beside serving: a break is an ERROR and the
        // audit's health NOT_SERVING; calls go on.
        let (audit_broken_tx, audit_broken) = tokio::sync::watch::channel(None);
        let audit_key = signer.as_ref().map(ed25519_dalek::SigningKey::verifying_key);
        if let Some(key) = signer.as_ref().map(ed25519_dalek::SigningKey::verifying_key) {
            let (path, cancel, audit_broken_tx) = (config.store.path.clone(), background_cancel.clone(), audit_broken_tx.clone());
            background.spawn(async move {
                let verdict = tokio::select! {
                    () = cancel.cancelled() => return,
                    verdict = crate::store::audit_chain::verify(&path, &key, Default::default(), &[]) => verdict,
                };
                match verdict {
                    Ok(crate::store::audit_chain::Verdict::Broken { problem, .. }) => {
                        tracing::error!(%problem, "the audit trail was altered; `toolhost audit verify` says where");
                        audit_broken_tx.send_replace(Some(problem));
                    }
                    Ok(crate::store::audit_chain::Verdict::Intact { records, checkpoints, .. }) => {
                        tracing::info!(records, checkpoints, "the audit chain is intact");
                    }
                    Err(error) => tracing::warn!(%error, "cannot verify the audit chain"),
                }
            });
        }
        let every = (config.audit.checkpoint_records, config.audit.checkpoint_every);
        let (auditor, audit_writer) = Auditor::start(store.clone(), retention, signer, every, audit_broken_tx, background_cancel.clone());
        for sink in &config.audit.exports {
            background.spawn(crate::audit::export::run(store.clone(), sink.clone(), metrics.clone(), background_cancel.clone()));
        }
        background.spawn(audit_writer);
        let api_tasks = TaskTracker::new();
        let api_cancel = CancellationToken::new();
        let tasks = Tasks::new(store.clone(), config.tasks);
        background.spawn(tasks.clone().sweep(background_cancel.clone()));
        let approvals = crate::door::approvals::Approvals::new(store.clone(), config.approvals.clone());
        let door = Door::new(registry.clone(), calls.clone(), access.clone(), auditor, store.clone(), tasks.clone(), approvals);
        // Tasks a previous daemon left running: followed again where their server keeps them,
        // else ended with it. A full disk must not keep the daemon from serving: what it cannot
        // write now, readers see all the same (a working task no call runs is shown as cut off).
        if let Err(error) = door.recover_tasks().await {
            tracing::warn!(%error, "cannot settle the tasks a previous daemon left running");
        }
        // The fleet store's link runs beside everything else, never in front of it: serving
        // does not wait for PostgreSQL, now or ever.
        let fleet = config.fleet.clone().map(|fleet_config| Fleet::new(fleet_config, &config.servers));
        let fleet_gauges = fleet
            .as_ref()
            .map(|fleet| crate::fleet::gauges::register(&opentelemetry::global::meter(crate::telemetry::SCOPE), fleet.clone()));
        if let Some(fleet) = &fleet {
            let parts = FleetParts { store: store.clone(), registry: registry.clone(), approver: supervisor.approver() };
            background.spawn(fleet.clone().run(parts, background_cancel.clone()));
        }
        let operator = Operator::new(
            registry.clone(),
            store.clone(),
            supervisor.refresher(),
            supervisor.approver(),
            fleet.clone(),
            audit_key,
            audit_broken,
        );
        api::serve(listeners, ApiParts { door: door.clone(), operator: operator.clone() }, &api_tasks, api_cancel.clone())?;
        for addr in &grpc_addrs {
            tracing::info!(?addr, "serving the gRPC API");
        }
        let console = Arc::new(Console::new(door.clone(), operator, &config.console));
        console::serve(console_listeners, console, &api_tasks, &api_cancel);
        for addr in &console_addrs {
            tracing::info!(?addr, "serving the operator console");
        }
        let endpoint = Arc::new(Endpoint::new(door, &config.mcp));
        endpoint::serve(mcp_listeners, endpoint.clone(), &api_tasks, api_cancel.clone());
        for addr in &mcp_addrs {
            tracing::info!(?addr, "serving the MCP endpoint");
        }
        let notifier = Arc::new(options.notifier);
        background.spawn(report_status(registry, notifier.clone(), background_cancel.clone()));
        if let Some(interval) = systemd::watchdog_interval() {
            background.spawn(feed_watchdog(notifier.clone(), interval, background_cancel.clone()));
        }
        // The stored catalog is served from here on; the servers start behind it.
        supervisor.start_workers();
        // The store is migrated and every listener is bound: agents can connect now.
        notifier.ready();
        Ok(App {
            config,
            store,
            supervisor,
            calls,
            access,
            reaper,
            notifier,
            grpc_addrs,
            mcp_addrs,
            console_addrs,
            endpoint,
            api_tasks,
            api_cancel,
            background,
            background_cancel,
            tasks,
            fleet,
            _instance: instance,
            _gauges: gauges,
            _store_gauge: store_gauge,
            _fleet_gauges: fleet_gauges,
        })
    }

    pub fn registry(&self) -> &Arc<Registry> {
        self.supervisor.registry()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// Where the gRPC API listens (with real port numbers).
    pub fn grpc_addrs(&self) -> &[BoundAddr] {
        &self.grpc_addrs
    }

    /// The MCP endpoint, for answering messages without a transport.
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }

    /// Where the MCP endpoint listens (with real port numbers).
    pub fn mcp_addrs(&self) -> &[BoundAddr] {
        &self.mcp_addrs
    }

    /// Where the operator console listens (with real port numbers).
    pub fn console_addrs(&self) -> &[BoundAddr] {
        &self.console_addrs
    }

    /// Applies a new configuration's servers: adds, removes and restarts only what changed.
    /// Store and listener settings need a restart; a change to them is reported, not applied.
    ///
    /// # Errors
    /// [`StoreError`] if an added server's stored catalog cannot be read.
    pub async fn reload(&mut self, config: Config) -> Result<ReloadSummary, StoreError> {
        self.notifier.reloading();
        if config.store.path != self.config.store.path
            || config.grpc.listen != self.config.grpc.listen
            || config.mcp.listen != self.config.mcp.listen
        {
            tracing::warn!("[store], [grpc] and [mcp] listen changes take effect at the next restart");
        }
        // Profiles, page size and allowed origins apply to the next request.
        self.endpoint.reconfigure(&config.mcp);
        let bound = std::mem::take(&mut self.config.mcp.listen);
        self.config.mcp = crate::config::McpConfig { listen: bound, ..config.mcp };
        // New requests and open watch streams are judged by the new policy from here on, the
        // events of this reload included.
        self.access.replace(&config.access);
        self.config.access = config.access;
        if config.fleet != self.config.fleet {
            tracing::warn!("[fleet] changes take effect at the next restart");
        }
        if let Some(fleet) = &self.fleet {
            fleet.reconfigure(&config.servers);
        }
        let result = self.supervisor.reconcile(&config.servers).await;
        if result.is_ok() {
            self.config.servers = config.servers;
        }
        self.notifier.ready();
        result
    }

    /// Stops accepting RPCs and lets those in flight finish, stops every server (the stdio
    /// shutdown sequence), then closes the store. Bounded by `daemon.shutdown_timeout`.
    pub async fn shutdown(self) {
        self.notifier.stopping();
        let deadline = crate::deadline::after(self.config.daemon.shutdown_timeout);
        self.api_cancel.cancel();
        self.api_tasks.close();
        if tokio::time::timeout_at(deadline, self.api_tasks.wait()).await.is_err() {
            tracing::warn!("RPCs in flight did not finish before the shutdown deadline");
        }
        // Running tasks' calls stop (each recorded as cut off) while their servers still run.
        self.tasks.shutdown(deadline).await;
        self.supervisor.shutdown(deadline).await;
        self.reaper.stop().await;
        self.background_cancel.cancel();
        self.background.close();
        // A bound all the same: no task, whatever it waits on, holds the daemon's exit.
        if tokio::time::timeout(BACKGROUND_GRACE, self.background.wait()).await.is_err() {
            tracing::warn!(grace = ?BACKGROUND_GRACE, "background tasks did not stop in time; the store is closed under them");
        }
        self.store.close().await;
    }
}

/// Runs the daemon until SIGTERM or SIGINT; SIGHUP reloads `config_path`.
///
/// # Errors
/// [`StartError`] when the daemon cannot start.
pub async fn run(config_path: &Path, config: Config, options: RuntimeOptions) -> Result<(), StartError> {
    let mut signals = Signals::install().map_err(StartError::Signals)?;
    let mut app = App::start_with(config, options).await?;
    tracing::info!(servers = app.registry().snapshot().servers.len(), "toolhost is running");
    let mut reload_queued = false;
    loop {
        let event = if std::mem::take(&mut reload_queued) { Event::Reload } else { signals.next().await };
        if event == Event::Stop {
            break;
        }
        // Signals are read while the reload runs: a stop ends it where it stands (the shutdown
        // stops every worker, reconciled or not), and another SIGHUP reloads again afterwards.
        let reload = reload(config_path, &mut app);
        tokio::pin!(reload);
        let stopped = loop {
            tokio::select! {
                () = &mut reload => break false,
                event = signals.next() => match event {
                    Event::Stop => break true,
                    Event::Reload => reload_queued = true,
                },
            }
        };
        if stopped {
            tracing::info!("stopping during a reload");
            break;
        }
    }
    tracing::info!("stopping");
    app.shutdown().await;
    Ok(())
}

/// Re-reads the configuration file and applies it, or keeps the current one if it is invalid.
async fn reload(config_path: &Path, app: &mut App) {
    match Config::load(config_path) {
        Err(error) => tracing::error!(%error, "the new configuration is invalid; keeping the current one"),
        Ok(config) => match app.reload(config).await {
            Ok(summary) => tracing::info!(
                added = ?summary.added, removed = ?summary.removed, changed = ?summary.changed,
                unchanged = summary.unchanged.len(), "configuration reloaded"
            ),
            Err(error) => tracing::error!(%error, "the reload failed part way; servers not yet reconciled keep their old settings"),
        },
    }
}

/// Keeps the service manager's STATUS line current: servers ready and tools served.
async fn report_status(registry: Arc<Registry>, notifier: Arc<Notifier>, cancel: CancellationToken) {
    let mut revisions = registry.subscribe_status();
    loop {
        let snapshot = registry.snapshot();
        let enabled = snapshot.servers.values().filter(|v| v.state != ServerState::Disabled).count();
        let ready = snapshot.servers.values().filter(|v| v.is_available()).count();
        let tools: usize =
            snapshot.servers.values().filter(|v| v.is_available()).filter_map(|v| v.generation.as_ref()).map(|g| g.tools.len()).sum();
        notifier.status(&format!("{ready}/{enabled} servers ready, {tools} tools"));
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(STATUS_INTERVAL) => {}
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = revisions.changed() => if changed.is_err() { return },
        }
    }
}

/// Sends WATCHDOG=1 from the runtime itself: a stuck runtime stops sending it.
async fn feed_watchdog(notifier: Arc<Notifier>, interval: Duration, cancel: CancellationToken) {
    let mut ticks = tokio::time::interval(interval);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => notifier.watchdog(),
        }
    }
}
