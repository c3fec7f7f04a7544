//! The composition root: opens the store, starts the supervisor and the API, tells the service
//! manager how things stand, reloads on request, and owns the shutdown order. The only module
//! that wires subsystems together.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod listening;
#[cfg(test)]
mod owned_tasks;

use crate::access::Access;
use crate::api::{self, ApiParts, ApiStartError};
use crate::audit::{Auditor, Retention};
use crate::calls::Calls;
use crate::config::Config;
use crate::console::{self, Console};
use crate::door::Door;
use crate::door::operator::Operator;
use crate::door::reload::{NotApplied, ReloadAsk, ReloadError, ReloadReport, Reloads};
use crate::door::tasks::Tasks;
use crate::endpoint::{self, Endpoint};
use crate::fleet::{Fleet, FleetParts};
use crate::instance::{InstanceError, InstanceLock};
use crate::listen::BoundAddr;
use crate::registry::{Registry, ServerState};
use crate::signals::{Event, Signals};
use crate::store::{Store, StoreError};
use crate::supervisor::Supervisor;
use crate::systemd::{self, Notifier};
use crate::telemetry::metrics::{self, Metrics};
use crate::upstream::reaper::Reaper;
use listening::Front;

/// How long the store gets to checkpoint and close at the end of a shutdown.
const STORE_CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Reloads asked through the doors that may wait while one runs; more are refused at once.
const RELOAD_ASKS: usize = 8;
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
    /// The front doors' services and listeners; reloads open and close listeners here.
    fronts: listening::Fronts,
    /// Reloads asked through a door (`toolhost reload`); the run loop answers them.
    reload_asks: Option<tokio::sync::mpsc::Receiver<ReloadAsk>>,
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

/// Every front's listeners, bound before the store opens or a server starts: a taken port
/// fails the start at once. In the order they start serving.
async fn bind_fronts(config: &Config) -> Result<Vec<(Front, Vec<BoundAddr>, listening::Bound)>, StartError> {
    let (grpc_addrs, grpc) = api::bind(&config.grpc.listen).await?;
    let (mcp_addrs, mcp) = endpoint::bind(&config.mcp.listen).await?;
    let (console_addrs, console) = console::bind(&config.console.listen).await?;
    Ok(vec![
        (Front::Grpc, grpc_addrs, listening::Bound::Grpc(grpc)),
        (Front::Console, console_addrs, listening::Bound::Console(console)),
        (Front::Mcp, mcp_addrs, listening::Bound::Mcp(mcp)),
    ])
}

/// Serves what [`bind_fronts`] bound, each listener under its configuration.
fn serve_fronts(fronts: &mut listening::Fronts, config: &Config, bound: Vec<(Front, Vec<BoundAddr>, listening::Bound)>) {
    for (front, addrs, listeners) in bound {
        let (configs, what) = match front {
            Front::Grpc => (&config.grpc.listen, "serving the gRPC API"),
            Front::Console => (&config.console.listen, "serving the operator console"),
            Front::Mcp => (&config.mcp.listen, "serving the MCP endpoint"),
        };
        for addr in &addrs {
            tracing::info!(?addr, "{what}");
        }
        fronts.serve_bound(front, configs, addrs, listeners);
    }
}

/// How much of the catalog the store gave back, and how long that took.
fn log_stored_catalog(registry: &Registry, started: std::time::Instant) {
    let snapshot = registry.snapshot();
    let stored_tools: usize = snapshot.servers.values().filter_map(|v| v.generation()).map(|g| g.tools.len()).sum();
    tracing::info!(
        servers = snapshot.servers.len(),
        tools = stored_tools,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "stored catalog loaded"
    );
}

/// The fleet store's link, when configured: it runs beside everything else, never in front of
/// it (serving does not wait for PostgreSQL, now or ever).
fn start_fleet(
    config: &Config,
    parts: FleetParts,
    background: &TaskTracker,
    cancel: &CancellationToken,
) -> (Option<Fleet>, Option<crate::fleet::gauges::FleetGauges>) {
    let Some(fleet_config) = config.fleet.clone() else { return (None, None) };
    let fleet = Fleet::new(fleet_config, &config.servers);
    let gauges = crate::fleet::gauges::register(&opentelemetry::global::meter(crate::telemetry::SCOPE), fleet.clone());
    background.spawn(fleet.clone().run(parts, cancel.clone()));
    (Some(fleet), Some(gauges))
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
        let bound = bind_fronts(&config).await?;
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
        log_stored_catalog(&registry, started);
        let calls = Calls::new(registry.clone(), store.clone(), supervisor.refresher(), metrics.clone());
        let access = Arc::new(Access::new(&config.access));
        let background = TaskTracker::new();
        let background_cancel = CancellationToken::new();
        let (auditor, audit_key, audit_broken) = start_audit(&config, &store, &metrics, &background, &background_cancel);
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
        let parts = FleetParts { store: store.clone(), registry: registry.clone(), approver: supervisor.approver() };
        let (fleet, fleet_gauges) = start_fleet(&config, parts, &background, &background_cancel);
        let (reload_tx, reload_asks) = tokio::sync::mpsc::channel(RELOAD_ASKS);
        let operator = Operator::new(
            registry.clone(),
            store.clone(),
            supervisor.refresher(),
            supervisor.approver(),
            fleet.clone(),
            audit_key,
            audit_broken,
        )
        .with_reloads(Reloads::new(reload_tx));
        let api = api::start(ApiParts { door: door.clone(), operator: operator.clone() }, &api_tasks, api_cancel.clone())?;
        let console = Arc::new(Console::new(door.clone(), operator, &config.console));
        let endpoint = Arc::new(Endpoint::new(door, &config.mcp));
        let mut fronts = listening::Fronts {
            api,
            endpoint,
            console,
            tracker: api_tasks,
            cancel: api_cancel,
            grpc: Default::default(),
            mcp: Default::default(),
            consoles: Default::default(),
        };
        serve_fronts(&mut fronts, &config, bound);
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
            fronts,
            reload_asks: Some(reload_asks),
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
        self.fronts.listeners(Front::Grpc).addrs()
    }

    /// The MCP endpoint, for answering messages without a transport.
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.fronts.endpoint
    }

    /// Where the MCP endpoint listens (with real port numbers).
    pub fn mcp_addrs(&self) -> &[BoundAddr] {
        self.fronts.listeners(Front::Mcp).addrs()
    }

    /// Where the operator console listens (with real port numbers).
    pub fn console_addrs(&self) -> &[BoundAddr] {
        self.fronts.listeners(Front::Console).addrs()
    }

    /// Applies a new configuration: servers added, removed and restarted where their entry
    /// changed, listeners opened and closed, `[access]` and `[mcp]`'s settings replaced. What the
    /// running daemon cannot change is left as it was and named in the report, with why.
    ///
    /// # Errors
    /// [`ReloadError::PartWay`] if an added server's stored catalog cannot be read.
    pub async fn reload(&mut self, config: Config) -> Result<ReloadReport, ReloadError> {
        self.notifier.reloading();
        let mut report = ReloadReport { not_applied: self.kept_as_they_were(&config), ..ReloadReport::default() };
        // Every door closes first, then opens: an address may move from one door to another.
        let fronts = [(Front::Grpc, &config.grpc.listen), (Front::Mcp, &config.mcp.listen), (Front::Console, &config.console.listen)];
        let mut closed = Vec::new();
        for (front, wanted) in fronts {
            closed.extend(self.fronts.close_unwanted(front, wanted, &mut report));
        }
        for (front, wanted) in fronts {
            self.fronts.open_wanted(front, wanted, &closed, &mut report).await;
        }
        self.config.grpc.listen = self.fronts.listeners(Front::Grpc).configured();
        self.config.console.listen = self.fronts.listeners(Front::Console).configured();
        // Profiles, page size and allowed origins apply to the next request.
        self.config.mcp.listen = self.fronts.listeners(Front::Mcp).configured();
        let mcp = crate::config::McpConfig { listen: self.config.mcp.listen.clone(), ..config.mcp };
        if mcp != self.config.mcp {
            self.fronts.endpoint.reconfigure(&mcp);
            report.applied.push("[mcp] page size, origins and profiles: from the next request".to_owned());
        }
        self.config.mcp = mcp;
        // New requests and open watch streams are judged by the new policy from here on, the
        // events of this reload included.
        if config.access != self.config.access {
            self.access.replace(&config.access);
            report.applied.push("[access]: every request from now on, open watch streams included".to_owned());
        }
        self.config.access = config.access;
        if let Some(fleet) = &self.fleet {
            fleet.reconfigure(&config.servers);
        }
        let result = self.supervisor.reconcile(&config.servers).await;
        self.notifier.ready();
        report.servers = result.map_err(|error| ReloadError::PartWay(error.to_string()))?;
        self.config.servers = config.servers;
        Ok(report)
    }

    /// The settings of `config` that differ from the running daemon's and that it cannot change
    /// while it runs, each with why.
    fn kept_as_they_were(&self, config: &Config) -> Vec<NotApplied> {
        let old = &self.config;
        let restart = "it takes effect at the next restart";
        let mut kept = Vec::new();
        let mut keep = |differs: bool, setting: &str, why: &str| {
            if differs {
                kept.push(NotApplied { setting: setting.to_owned(), why: why.to_owned() });
            }
        };
        keep(config.store != old.store, "[store]", "the store is opened once, at start; it takes effect at the next restart");
        keep(config.fleet != old.fleet, "[fleet]", "the fleet store's link is made at start; it takes effect at the next restart");
        keep(
            config.audit != old.audit,
            "[audit]",
            "the audit writer, its signing key and its exports start with the daemon; it takes effect at the next restart",
        );
        keep(config.approvals != old.approvals, "[approvals]", restart);
        keep(config.tasks != old.tasks, "[tasks]", restart);
        keep(config.daemon != old.daemon, "[daemon]", restart);
        keep(
            config.telemetry != old.telemetry,
            "[telemetry]",
            "the exporters are set up before the daemon starts; it takes effect at the next restart",
        );
        keep(config.grpc.watch_backlog != old.grpc.watch_backlog, "[grpc] watch_backlog", restart);
        keep(
            config.console.allowed_origins != old.console.allowed_origins || config.console.session_ttl != old.console.session_ttl,
            "[console] allowed_origins, session_ttl",
            restart,
        );
        kept
    }

    /// Stops accepting RPCs and lets those in flight finish, stops every server (the stdio
    /// shutdown sequence), then closes the store. Bounded by `daemon.shutdown_timeout`.
    pub async fn shutdown(self) {
        self.notifier.stopping();
        let deadline = crate::deadline::after(self.config.daemon.shutdown_timeout);
        self.fronts.cancel.cancel();
        self.fronts.tracker.close();
        if tokio::time::timeout_at(deadline, self.fronts.tracker.wait()).await.is_err() {
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
        // Bounded too: a write that never returns its connection (a stuck disk) must not hold
        // the exit; what SQLite committed is on disk, and the WAL is replayed at the next start.
        if tokio::time::timeout(STORE_CLOSE_GRACE, self.store.close()).await.is_err() {
            tracing::warn!(grace = ?STORE_CLOSE_GRACE, "the store did not close in time; its WAL is replayed at the next start");
        }
    }
}

/// Starts the audit writer, its exports and the chain's verification, in `background`: the
/// writer outlives the API (it drains what the last calls recorded) and stops with the other
/// background tasks, before the store closes. Returns the auditor, the public half of the
/// signing key, and what the verification finds broken.
fn start_audit(
    config: &Config,
    store: &Store,
    metrics: &Metrics,
    background: &TaskTracker,
    background_cancel: &CancellationToken,
) -> (Auditor, Option<ed25519_dalek::VerifyingKey>, tokio::sync::watch::Receiver<Option<String>>) {
    let retention = Retention { max_age: config.access.audit_retention, max_records: config.access.audit_max_records };
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
    if let Some(key) = audit_key {
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
    (auditor, audit_key, audit_broken)
}

/// What the run loop acts on: a signal, or a reload asked through a door.
enum Wake {
    Signal(Event),
    Asked(ReloadAsk),
}

/// Runs the daemon until SIGTERM or SIGINT; SIGHUP and `toolhost reload` reload `config_path`.
///
/// # Errors
/// [`StartError`] when the daemon cannot start.
pub async fn run(config_path: &Path, config: Config, options: RuntimeOptions) -> Result<(), StartError> {
    let mut signals = Signals::install().map_err(StartError::Signals)?;
    let mut app = App::start_with(config, options).await?;
    let Some(mut asks) = app.reload_asks.take() else { unreachable!("a started daemon holds its reload requests") };
    tracing::info!(servers = app.registry().snapshot().servers.len(), "toolhost is running");
    // Who waits for the next reload's report: a reload asked while one runs is done after it
    // (it may have been asked because of an edit the running one did not read).
    let mut waiting: Vec<ReloadAsk> = Vec::new();
    let mut queued = false;
    loop {
        if !std::mem::take(&mut queued) {
            let wake = tokio::select! {
                event = signals.next() => Wake::Signal(event),
                Some(ask) = asks.recv() => Wake::Asked(ask),
            };
            match wake {
                Wake::Signal(Event::Stop) => break,
                Wake::Signal(Event::Reload) => {}
                Wake::Asked(ask) => waiting.push(ask),
            }
        }
        let answering = std::mem::take(&mut waiting);
        // Signals are read while the reload runs: a stop ends it where it stands (the shutdown
        // stops every worker, reconciled or not), and another reload runs again afterwards.
        let reload = reload(config_path, &mut app);
        tokio::pin!(reload);
        let outcome = loop {
            tokio::select! {
                outcome = &mut reload => break Some(outcome),
                event = signals.next() => match event {
                    Event::Stop => break None,
                    Event::Reload => queued = true,
                },
                Some(ask) = asks.recv() => {
                    waiting.push(ask);
                    queued = true;
                }
            }
        };
        let Some(outcome) = outcome else {
            tracing::info!("stopping during a reload");
            break;
        };
        for ask in answering {
            // The asker may have gone (its deadline passed): the log has the report all the same.
            let _ = ask.reply.send(outcome.clone());
        }
    }
    tracing::info!("stopping");
    app.shutdown().await;
    Ok(())
}

/// Re-reads the configuration file and applies it, or keeps the current one if it is invalid.
async fn reload(config_path: &Path, app: &mut App) -> Result<ReloadReport, ReloadError> {
    let config = match Config::load(config_path) {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(%error, "the new configuration is invalid; keeping the current one");
            return Err(ReloadError::Invalid(error.to_string()));
        }
    };
    let outcome = app.reload(config).await;
    match &outcome {
        Ok(report) => {
            for kept in &report.not_applied {
                tracing::warn!(setting = %kept.setting, why = %kept.why, "not applied by the reload");
            }
            tracing::info!(
                added = ?report.servers.added, removed = ?report.servers.removed, changed = ?report.servers.changed,
                unchanged = report.servers.unchanged.len(), applied = ?report.applied, "configuration reloaded"
            );
        }
        Err(error) => tracing::error!(%error, "the reload failed part way"),
    }
    outcome
}

/// Keeps the service manager's STATUS line current: servers ready and tools served.
async fn report_status(registry: Arc<Registry>, notifier: Arc<Notifier>, cancel: CancellationToken) {
    let mut revisions = registry.subscribe_status();
    loop {
        let snapshot = registry.snapshot();
        let enabled = snapshot.servers.values().filter(|v| v.state() != ServerState::Disabled).count();
        let ready = snapshot.servers.values().filter(|v| v.is_available()).count();
        let tools: usize =
            snapshot.servers.values().filter(|v| v.is_available()).filter_map(|v| v.generation()).map(|g| g.tools.len()).sum();
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
