//! The fleet store: a PostgreSQL database the daemons of several hosts share, for what does not
//! fit on one host: approvals made once for every host, the audit trail in one place, and the
//! definitions each host's servers offer side by side, so that a server that tells one host
//! something else than another (a rug pull aimed at some hosts) is seen.
//!
//! It sits beside the catalog store, never on the call path: one task per daemon (`run`) owns
//! the connection, and whether PostgreSQL is up, down or wrong changes nothing about serving.
//! SQLite stays each host's source of truth and is the spool of what goes out (`ship`); what
//! comes in is approvals (`approvals`, announced with LISTEN/NOTIFY); what each host offers is
//! published with its drift (`publish`); `query` answers `toolhost fleet` and `audit --fleet`.

mod approvals;
pub mod gauges;
mod publish;
pub mod query;
pub mod schema;
mod ship;
pub mod verify;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use crate::config::{FleetConfig, ServerSpec};
use crate::registry::Registry;
use crate::store::{Store, StoreError};
use crate::supervisor::integrity::Approver;
use crate::telemetry::throttle::Throttle;

/// The channel new approvals are announced on (see the PostgreSQL migrations).
const APPROVALS_CHANNEL: &str = "toolhost_approvals";
/// How often the spool is shipped and changed servers published.
const TICK: Duration = Duration::from_millis(250);
/// How often the host says it is alive and looks at drift again.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// Longest any one exchange with PostgreSQL may take before the link counts as down.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// Waits between connection attempts: doubling from the first to the last, jittered.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_LAST: Duration = Duration::from_secs(10);

/// What went wrong with the fleet store. None of it stops the host from serving.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("cannot connect to the fleet store: {0}")]
    Connect(String),
    #[error(
        "the fleet store's schema is older than this toolhost's (version {applied}, expected {expected}): run `toolhost fleet-migrate` once, when every host runs a toolhost that knows version {expected}"
    )]
    SchemaOlder { applied: i64, expected: i64 },
    #[error(
        "the fleet store's schema is newer than this toolhost knows (version {applied}, this toolhost knows up to {known}): upgrade toolhost on this host"
    )]
    SchemaNewer { applied: i64, known: i64 },
    #[error("the fleet database holds tables that are not toolhost's; give toolhost a database of its own")]
    Foreign,
    #[error("fleet store: {0}")]
    Database(String),
    #[error("fleet store: no answer within {0:?}")]
    Timeout(Duration),
    #[error("no [fleet] section in the configuration")]
    NotConfigured,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for FleetError {
    fn from(error: sqlx::Error) -> FleetError {
        FleetError::Database(crate::secrets::redact_owned(error.to_string()))
    }
}

/// The daemon's side of the fleet: its settings, how the link stands, and what the task and
/// the API share. Cheap to clone.
#[derive(Clone)]
pub struct Fleet {
    shared: Arc<Shared>,
}

struct Shared {
    config: FleetConfig,
    /// Each configured server's fleet identity, swapped whole on reload.
    identities: ArcSwap<BTreeMap<String, String>>,
    /// The link's pool while it is up (the API's queries use it).
    pool: ArcSwap<Option<PgPool>>,
    connected: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Audit records waiting in this host's spool.
    audit_pending: AtomicU64,
    /// Tools of this host's servers whose definition another host sees differently.
    drifted_tools: AtomicU64,
}

/// What `run` needs besides the fleet itself.
pub struct FleetParts {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub approver: Approver,
}

/// The explicit state of the link to PostgreSQL.
enum Link {
    /// Not connected: the next attempt after `retry` waits `wait`.
    Down {
        wait: Duration,
    },
    Up(Connected),
}

/// A live link: the pool for queries, and the connection that listens for approvals.
struct Connected {
    pool: PgPool,
    listener: PgListener,
}

impl Connected {
    /// Takes the link down. The listener goes first: it holds one of the pool's connections,
    /// and closing a pool waits for every connection to come back to it, so a link that failed
    /// anywhere but in the listener would wait for ever. Bounded all the same: a connection on a
    /// network that drops packets may take long to say goodbye, and dropping the pool ends it.
    async fn close(self) {
        let Connected { pool, listener } = self;
        drop(listener);
        if tokio::time::timeout(EXCHANGE_TIMEOUT, pool.close()).await.is_err() {
            tracing::debug!("the fleet store's connections did not close in time; they are dropped");
        }
    }
}

impl Fleet {
    pub fn new(config: FleetConfig, servers: &BTreeMap<String, ServerSpec>) -> Fleet {
        Fleet {
            shared: Arc::new(Shared {
                config,
                identities: ArcSwap::from_pointee(identities(servers)),
                pool: ArcSwap::from_pointee(None),
                connected: AtomicBool::new(false),
                last_error: Mutex::new(None),
                audit_pending: AtomicU64::new(0),
                drifted_tools: AtomicU64::new(0),
            }),
        }
    }

    /// Whether this host ships its audit trail (`share_audit`).
    #[must_use]
    pub fn shares_audit(&self) -> bool {
        self.shared.config.share_audit
    }

    pub fn host_id(&self) -> &str {
        &self.shared.config.host_id
    }

    /// Applies a reloaded configuration's servers (their identities); the `[fleet]` section
    /// itself takes effect at the next restart.
    pub fn reconfigure(&self, servers: &BTreeMap<String, ServerSpec>) {
        self.shared.identities.store(Arc::new(identities(servers)));
    }

    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    /// Why the link is down (or was last down), scrubbed of secrets.
    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn audit_pending(&self) -> u64 {
        self.shared.audit_pending.load(Ordering::Relaxed)
    }

    pub fn drifted_tools(&self) -> u64 {
        self.shared.drifted_tools.load(Ordering::Relaxed)
    }

    /// The pool, while the link is up.
    ///
    /// # Errors
    /// [`FleetError::Connect`] with the reason the link is down.
    pub fn pool(&self) -> Result<PgPool, FleetError> {
        match &**self.shared.pool.load() {
            Some(pool) => Ok(pool.clone()),
            None => Err(FleetError::Connect(self.last_error().unwrap_or_else(|| "not connected yet".to_owned()))),
        }
    }

    /// Runs the link until `cancel`: connects (again and again, backing off), then ships the
    /// spool, publishes what this host offers, and applies approvals from other hosts.
    pub async fn run(self, parts: FleetParts, cancel: CancellationToken) {
        if let Err(error) = parts.store.fleet().hold_unshipped_audit(self.shared.config.share_audit).await {
            tracing::warn!(%error, "cannot set up the fleet's audit spool");
        }
        let mut state = State::new(&self, parts);
        let warnings = Throttle::new(1);
        let mut link = Link::Down { wait: Duration::ZERO };
        loop {
            link = match link {
                Link::Down { wait } => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    let attempt = tokio::select! {
                        () = cancel.cancelled() => return,
                        attempt = self.connect() => attempt,
                    };
                    match attempt {
                        Ok(connected) => {
                            tracing::info!(host_id = %self.host_id(), "connected to the fleet store");
                            self.set_up(Some(&connected.pool), None);
                            state.reset();
                            Link::Up(connected)
                        }
                        Err(error) => {
                            self.down(&error, &warnings);
                            Link::Down { wait: next_wait(wait) }
                        }
                    }
                }
                Link::Up(mut connected) => match state.serve(&mut connected, &cancel).await {
                    Ok(()) => return,
                    Err(error) => {
                        self.down(&error, &warnings);
                        connected.close().await;
                        Link::Down { wait: RETRY_FIRST }
                    }
                },
            };
        }
    }

    /// One attempt, bounded in time as a whole: connecting, checking (or creating) the schema,
    /// and the listener, so that a database that stops answering halfway leaves the attempt to
    /// fail and the next one to try.
    async fn connect(&self) -> Result<Connected, FleetError> {
        let config = &self.shared.config;
        let bound = config.connect_timeout.saturating_add(EXCHANGE_TIMEOUT);
        let pool = match tokio::time::timeout(bound, schema::open(config)).await {
            Ok(pool) => pool?,
            Err(_) => return Err(FleetError::Timeout(bound)),
        };
        let mut listener = bounded(async { Ok(PgListener::connect_with(&pool).await?) }).await?;
        if config.share_approvals {
            bounded(async { Ok(listener.listen(APPROVALS_CHANNEL).await?) }).await?;
        }
        Ok(Connected { pool, listener })
    }

    fn set_up(&self, pool: Option<&PgPool>, error: Option<String>) {
        self.shared.pool.store(Arc::new(pool.cloned()));
        self.shared.connected.store(pool.is_some(), Ordering::Relaxed);
        if error.is_some() || pool.is_some() {
            *self.shared.last_error.lock().unwrap_or_else(PoisonError::into_inner) = error;
        }
    }

    fn down(&self, error: &FleetError, warnings: &Throttle) {
        let text = crate::secrets::redact_owned(error.to_string());
        if let Some(suppressed) = warnings.admit() {
            tracing::warn!(error = %text, suppressed, "the fleet store is not available; this host goes on serving from its own store");
        }
        self.set_up(None, Some(text));
    }
}

/// What the link task keeps between ticks; rebuilt in part on every reconnect.
struct State {
    fleet: Fleet,
    parts: FleetParts,
    approvals: approvals::Known,
    published: publish::Published,
}

impl State {
    fn new(fleet: &Fleet, parts: FleetParts) -> State {
        State { fleet: fleet.clone(), parts, approvals: approvals::Known::default(), published: publish::Published::default() }
    }

    /// After a reconnect everything is published and every approval read again.
    fn reset(&mut self) {
        self.approvals = approvals::Known::default();
        self.published = publish::Published::default();
    }

    /// Serves a live link until `cancel` (`Ok`) or a failure (`Err`: the link is down).
    async fn serve(&mut self, link: &mut Connected, cancel: &CancellationToken) -> Result<(), FleetError> {
        let config = self.fleet.shared.config.clone();
        let mut revisions = self.parts.registry.subscribe_status();
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        bounded(publish::announce_host(&link.pool, &config.host_id)).await?;
        if config.share_approvals {
            bounded(self.approvals.load(&link.pool, &self.fleet.shared.identities.load())).await?;
            self.approvals.apply(&self.parts, &self.fleet.shared.identities.load()).await;
        }
        let mut dirty = true;
        loop {
            tokio::select! {
                () = cancel.cancelled() => {
                    // What the last calls recorded goes out if PostgreSQL answers at once.
                    let _ = tokio::time::timeout(Duration::from_secs(2), self.ship(&link.pool)).await;
                    return Ok(());
                }
                notification = link.listener.recv(), if config.share_approvals => {
                    notification?;
                    bounded(self.approvals.load_new(&link.pool, &self.fleet.shared.identities.load())).await?;
                    self.approvals.apply(&self.parts, &self.fleet.shared.identities.load()).await;
                }
                changed = revisions.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    dirty = true;
                    // An operator's approval changes the registry: other hosts hear of it now,
                    // not at the next tick.
                    if config.share_approvals {
                        let identities = self.fleet.shared.identities.load();
                        bounded(ship::approvals(&link.pool, &self.parts.store, &config.host_id, &identities)).await?;
                    }
                }
                _ = ticks.tick() => {
                    self.ship(&link.pool).await?;
                    if dirty {
                        dirty = false;
                        if config.share_drift {
                            let identities = self.fleet.shared.identities.load_full();
                            let snapshot = self.parts.registry.snapshot();
                            bounded(self.published.publish(&link.pool, &config.host_id, &snapshot, &identities)).await?;
                            self.check_drift(&link.pool).await?;
                        }
                        if config.share_approvals {
                            self.approvals.apply(&self.parts, &self.fleet.shared.identities.load()).await;
                        }
                    }
                }
                _ = heartbeat.tick() => {
                    bounded(publish::announce_host(&link.pool, &config.host_id)).await?;
                    // A notification sent while the listening connection was being re-established
                    // is lost; reading what is new now and then closes that gap.
                    if config.share_approvals {
                        bounded(self.approvals.load_new(&link.pool, &self.fleet.shared.identities.load())).await?;
                        self.approvals.apply(&self.parts, &self.fleet.shared.identities.load()).await;
                    }
                    if config.share_drift {
                        // Another host's publication can start (or end) a drift of this host's tools.
                        self.check_drift(&link.pool).await?;
                    }
                }
            }
        }
    }

    async fn check_drift(&mut self, pool: &PgPool) -> Result<(), FleetError> {
        let drifted = bounded(publish::check_drift(pool, &self.fleet.shared.config.host_id, &mut self.published)).await?;
        self.fleet.shared.drifted_tools.store(drifted, Ordering::Relaxed);
        Ok(())
    }

    /// Ships what the spool holds: audit records and operators' approvals.
    async fn ship(&mut self, pool: &PgPool) -> Result<(), FleetError> {
        let config = &self.fleet.shared.config;
        if config.share_audit {
            let pending = ship::audit(pool, &self.parts.store, &config.host_id).await?;
            self.fleet.shared.audit_pending.store(pending, Ordering::Relaxed);
        }
        if config.share_approvals {
            let identities = self.fleet.shared.identities.load();
            bounded(ship::approvals(pool, &self.parts.store, &config.host_id, &identities)).await?;
        }
        Ok(())
    }
}

/// One exchange with PostgreSQL, bounded in time: a database that stops answering (stopped,
/// frozen, a network that drops packets) takes the link down instead of hanging it, and fails
/// an operator's read (`query`, `verify`) instead of holding it.
async fn bounded<T>(exchange: impl Future<Output = Result<T, FleetError>>) -> Result<T, FleetError> {
    match tokio::time::timeout(EXCHANGE_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(FleetError::Timeout(EXCHANGE_TIMEOUT)),
    }
}

fn next_wait(wait: Duration) -> Duration {
    let doubled = wait.saturating_mul(2).clamp(RETRY_FIRST, RETRY_LAST);
    // Up to a quarter less, so that hosts cut off together do not come back together.
    doubled.saturating_sub(doubled.mul_f64(fastrand::f64() / 4.0))
}

fn identities(servers: &BTreeMap<String, ServerSpec>) -> BTreeMap<String, String> {
    servers.iter().map(|(name, spec)| (name.clone(), spec.fleet_identity())).collect()
}
