//! The live view of every server: state, session, current generation. Workers publish into it;
//! readers (the API) take a consistent snapshot without locking.
//!
//! A change to the catalog (a server's tools, whether they can be called, the set of servers)
//! makes a new [`CatalogSnapshot`] with a higher revision. The registry keeps the most recent
//! snapshots (so that paging and revision preconditions can refer to one) and a bounded log of
//! [`CatalogEvent`]s (so that watchers get every change in order, or are told they fell behind).
//! A status update (a state between two unavailable states, an error text, a timestamp)
//! replaces the current snapshot under the same revision: routine refreshes neither expire
//! callers' page tokens nor wake watchers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use opentelemetry::trace::SpanContext;
use tokio::sync::{Semaphore, watch};

use std::collections::HashMap;

use crate::catalog::integrity::{Approval, Hold, Policy, ToolIntegrity};
use crate::catalog::model::{Diff, Generation};
use crate::catalog::names::{QualifiedIndex, qualify};
use crate::catalog::record::EnumerationRecord;
use crate::config::AuditArguments;
use crate::mcp::lifecycle::ServerHello;
use crate::upstream::SessionHandle;

pub mod history;
mod transitions;

/// Snapshots kept for paging and revision preconditions.
const SNAPSHOTS_KEPT: usize = 64;

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ServerState {
    /// `enabled = false` in the configuration.
    Disabled,
    /// The first session is being started.
    Starting,
    /// A session is up and its tools are enumerated.
    Ready,
    /// A session is up, but the server does not offer tools.
    NoTools,
    /// A new session is being started after the previous one ended.
    Reconnecting,
    /// Waiting before the next restart.
    Backoff,
    /// Restarts keep failing; still retried, at the longest backoff.
    CrashLoop,
    /// The server cannot be used as configured (it cannot be started, speaks an unsupported
    /// protocol version, or its tools cannot be enumerated); see `last_error`.
    Failed,
    /// toolhost is shutting down.
    Stopped,
    /// An HTTP server refused the credentials (401/403); retried at the backoff, never in a tight loop.
    AuthFailed,
    /// OAuth needs an operator (`toolhost login`, working client credentials); retried at the
    /// backoff, so a new login is picked up without a restart.
    AuthRequired,
}

impl ServerState {
    pub const ALL: [ServerState; 11] = [
        ServerState::Disabled,
        ServerState::Starting,
        ServerState::Ready,
        ServerState::NoTools,
        ServerState::Reconnecting,
        ServerState::Backoff,
        ServerState::CrashLoop,
        ServerState::Failed,
        ServerState::Stopped,
        ServerState::AuthFailed,
        ServerState::AuthRequired,
    ];

    /// The lowercase name of the state, as metrics and the fleet show it.
    pub fn name(self) -> &'static str {
        match self {
            ServerState::Disabled => "disabled",
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::NoTools => "no_tools",
            ServerState::Reconnecting => "reconnecting",
            ServerState::Backoff => "backoff",
            ServerState::CrashLoop => "crash_loop",
            ServerState::Failed => "failed",
            ServerState::Stopped => "stopped",
            ServerState::AuthFailed => "auth_failed",
            ServerState::AuthRequired => "auth_required",
        }
    }
}

/// One server as the rest of toolhost sees it: read through its accessors, changed only by the
/// named transitions in `transitions` (the fields are private to `registry`).
#[derive(Debug, Clone)]
pub struct ServerView {
    name: Arc<str>,
    state: ServerState,
    /// "stdio" or "http".
    transport: &'static str,
    /// The live session, while there is one.
    session: Option<SessionHandle>,
    /// An OAuth server's authorization (what `BeginLogin` and `CompleteLogin` drive).
    authorizer: Option<Arc<crate::upstream::oauth::authorizer::Authorizer>>,
    /// What the server said about itself in the current (or last) session.
    hello: Option<ServerHello>,
    /// The current generation. It stays while the server is down: its tools are then
    /// unavailable, not deleted.
    generation: Option<Arc<Generation>>,
    /// Qualified names of `generation`'s tools, built on first use (a restart with a hundred
    /// thousand stored tools need not build them all before serving) and reset with the generation.
    qualified: Arc<OnceLock<QualifiedIndex>>,
    /// The integrity state of each of `generation`'s tools (parallel to its tools); empty when
    /// every tool is callable, accepted as offered, with nothing to flag.
    integrity: Arc<[ToolIntegrity]>,
    /// The generation was loaded from the store and no session of this daemon has confirmed it yet.
    revalidating: bool,
    last_verified_at_ms: Option<i64>,
    last_enumeration: Option<EnumerationRecord>,
    last_error: Option<String>,
    /// Sessions started after the first.
    num_restarts: u64,
    /// Times the server's worker panicked and the supervisor restarted it.
    num_worker_panics: u64,
    /// Per-server state that outlives snapshots: the call queue and race counters.
    shared: Arc<ServerShared>,
    /// A stdio server's sandbox; `None` for an HTTP server.
    sandbox: Option<SandboxView>,
}

/// A stdio server's sandbox as configured, and the limit that last stopped it.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxView {
    pub enabled: bool,
    pub network: crate::sandbox::Network,
    pub limits: crate::sandbox::Limits,
    pub last_limit: Option<crate::sandbox::LimitKind>,
    /// How its limits are held on this host.
    pub enforcement: crate::sandbox::Enforcement,
    /// What it sees beyond the system, read-only (its program, its arguments' files, its
    /// script's project, its `cwd`, its `read` grants), and what it may write.
    pub read: Vec<std::path::PathBuf>,
    pub write: Vec<std::path::PathBuf>,
    /// Of `read`, what its entry names (its `cwd`, its arguments' paths, its `read` grants).
    pub given: Vec<std::path::PathBuf>,
    /// Its own home (`HOME`), where its caches live.
    pub home: Option<std::path::PathBuf>,
    /// Its data directory (`data`, `${data}` in its env), made at its start and kept.
    pub data: Option<std::path::PathBuf>,
    /// With a proxied network: the hosts its way out reaches (`host:port`).
    pub allow: Vec<String>,
    /// The same hosts, each with why ("network.allow", "npx's registry; …").
    pub reaches: Vec<(String, String)>,
}

/// Per-server state shared by every snapshot of that server.
#[derive(Debug)]
pub struct ServerShared {
    /// Limits calls in flight; callers beyond it wait in line, served round-robin by agent.
    pub call_queue: Arc<crate::upstream::queue::CallQueue>,
    /// The call timeout when the caller sets no deadline.
    pub request_timeout: Duration,
    /// What the audit trail keeps of this server's call arguments.
    pub audit_arguments: AuditArguments,
    /// Which definitions may be called (`changes`, `new_tools`, `pins`).
    pub policy: Policy,
    /// The current approval of each tool. Also the server's integrity lock: whoever evaluates
    /// and publishes integrity states (a worker's commit, an operator's approval) holds it.
    pub approvals: tokio::sync::Mutex<HashMap<String, Approval>>,
    pub races: RaceCounters,
    /// The trace span of the refresh that published each recent generation, so that a stale-tool
    /// race can link to the enumeration that observed the change.
    generation_spans: Mutex<VecDeque<(u64, SpanContext)>>,
    /// Its recent life (starts, exits, restarts, limits hit), for its own page.
    pub history: history::History,
    /// What a proxied sandbox's way out let through and refused, across its restarts.
    pub egress: Arc<crate::upstream::egress::EgressStats>,
}

/// Generations whose publishing span is remembered.
const GENERATION_SPANS_KEPT: usize = 32;

impl ServerShared {
    pub(crate) fn remember_generation_span(&self, generation: u64, context: SpanContext) {
        let mut spans = self.generation_spans.lock().unwrap_or_else(PoisonError::into_inner);
        if spans.len() == GENERATION_SPANS_KEPT {
            spans.pop_front();
        }
        spans.push_back((generation, context));
    }

    /// The span of the refresh that published `generation`, if it is still remembered.
    pub fn generation_span(&self, generation: u64) -> Option<SpanContext> {
        let spans = self.generation_spans.lock().unwrap_or_else(PoisonError::into_inner);
        spans.iter().rev().find(|(g, _)| *g == generation).map(|(_, context)| context.clone())
    }
}

/// Stale-tool races seen on one server, by kind.
#[derive(Debug, Default)]
pub struct RaceCounters {
    pub removed_before_call: AtomicU64,
    pub changed_since_listed: AtomicU64,
    pub upstream_unknown_tool: AtomicU64,
}

/// A consistent picture of every server at one revision.
#[derive(Debug, Default)]
pub struct CatalogSnapshot {
    /// Increases with every change to the catalog: tools, availability, the set of servers.
    pub revision: u64,
    pub servers: BTreeMap<Arc<str>, Arc<ServerView>>,
}

/// One change, as watchers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEvent {
    pub revision: u64,
    pub change: CatalogChange,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogChange {
    /// A new generation became current. Names are qualified names.
    GenerationPublished {
        server: Arc<str>,
        generation: u64,
        previous: u64,
        added: Vec<String>,
        removed: Vec<String>,
        changed: Vec<String>,
    },
    StateChanged {
        server: Arc<str>,
        state: ServerState,
        previous: ServerState,
        available: bool,
        error: Option<String>,
    },
    /// Tools became held (a definition not approved) or were released (approved). Names are
    /// qualified names.
    IntegrityChanged {
        server: Arc<str>,
        held: Vec<String>,
        released: Vec<String>,
    },
    /// A reload added, removed or changed the server's configuration.
    ConfigChanged {
        server: Arc<str>,
        change: ConfigChange,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigChange {
    Added,
    Removed,
    Changed,
}

impl CatalogChange {
    /// The server the change is about.
    #[must_use]
    pub fn server(&self) -> &Arc<str> {
        match self {
            CatalogChange::GenerationPublished { server, .. }
            | CatalogChange::StateChanged { server, .. }
            | CatalogChange::IntegrityChanged { server, .. }
            | CatalogChange::ConfigChanged { server, .. } => server,
        }
    }
}

/// The watcher asked for changes the registry no longer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lagged;

/// The live catalog.
pub struct Registry {
    current: ArcSwap<CatalogSnapshot>,
    events_kept: usize,
    history: Mutex<History>,
    revision_tx: watch::Sender<u64>,
    /// Counts every publish, status updates included.
    status_tx: watch::Sender<u64>,
}

/// Recent snapshots and events; guarded together with publishing so both stay in order.
#[derive(Default)]
struct History {
    snapshots: VecDeque<Arc<CatalogSnapshot>>,
    events: VecDeque<CatalogEvent>,
    /// The highest revision of an event dropped from `events`.
    trimmed_through: u64,
}

// === impl ServerView ===

impl ServerView {
    pub fn new(
        name: Arc<str>,
        state: ServerState,
        transport: &'static str,
        max_concurrent_calls: u32,
        request_timeout: Duration,
        audit_arguments: AuditArguments,
        policy: Policy,
    ) -> ServerView {
        let permits = usize::try_from(max_concurrent_calls).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        ServerView {
            name,
            state,
            transport,
            session: None,
            authorizer: None,
            hello: None,
            generation: None,
            qualified: Arc::default(),
            integrity: Arc::new([]),
            revalidating: false,
            last_verified_at_ms: None,
            last_enumeration: None,
            last_error: None,
            num_restarts: 0,
            num_worker_panics: 0,
            shared: Arc::new(ServerShared {
                call_queue: crate::upstream::queue::CallQueue::new(permits),
                request_timeout,
                audit_arguments,
                policy,
                approvals: tokio::sync::Mutex::default(),
                races: RaceCounters::default(),
                generation_spans: Mutex::default(),
                history: history::History::default(),
                egress: Arc::default(),
            }),
            sandbox: None,
        }
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub fn state(&self) -> ServerState {
        self.state
    }

    /// "stdio" or "http".
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// The live session, while there is one.
    pub fn session(&self) -> Option<&SessionHandle> {
        self.session.as_ref()
    }

    /// An OAuth server's authorization (what `BeginLogin` and `CompleteLogin` drive).
    pub fn authorizer(&self) -> Option<&Arc<crate::upstream::oauth::authorizer::Authorizer>> {
        self.authorizer.as_ref()
    }

    /// What the server said about itself in the current (or last) session.
    pub fn hello(&self) -> Option<&ServerHello> {
        self.hello.as_ref()
    }

    /// The current generation (kept while the server is down: its tools unavailable, not deleted).
    pub fn generation(&self) -> Option<&Arc<Generation>> {
        self.generation.as_ref()
    }

    /// The integrity state of each of the current generation's tools (empty: all callable as offered).
    pub fn integrity(&self) -> &Arc<[ToolIntegrity]> {
        &self.integrity
    }

    /// The generation came from the store and no session of this daemon has confirmed it yet.
    pub fn revalidating(&self) -> bool {
        self.revalidating
    }

    pub fn last_verified_at_ms(&self) -> Option<i64> {
        self.last_verified_at_ms
    }

    pub fn last_enumeration(&self) -> Option<&EnumerationRecord> {
        self.last_enumeration.as_ref()
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Sessions started after the first.
    pub fn num_restarts(&self) -> u64 {
        self.num_restarts
    }

    /// Times the server's worker panicked and the supervisor restarted it.
    pub fn num_worker_panics(&self) -> u64 {
        self.num_worker_panics
    }

    /// Per-server state that outlives snapshots: the call queue, counters, history.
    pub fn shared(&self) -> &Arc<ServerShared> {
        &self.shared
    }

    /// A stdio server's sandbox; `None` for an HTTP server.
    pub fn sandbox(&self) -> Option<&SandboxView> {
        self.sandbox.as_ref()
    }

    /// The qualified names of the current generation's tools.
    pub fn qualified(&self) -> &QualifiedIndex {
        self.qualified.get_or_init(|| match &self.generation {
            Some(generation) => QualifiedIndex::build(&self.name, generation),
            None => QualifiedIndex::default(),
        })
    }

    /// Its tools can be called now.
    pub fn is_available(&self) -> bool {
        self.state == ServerState::Ready && self.session.is_some()
    }

    pub fn generation_number(&self) -> u64 {
        self.generation.as_ref().map_or(0, |g| g.number)
    }

    /// The integrity state of the current generation's tool `idx` (`None`: callable as offered).
    pub fn integrity_at(&self, idx: usize) -> Option<&ToolIntegrity> {
        self.integrity.get(idx)
    }

    /// Why tool `idx` may not be called, if it is held.
    pub fn held(&self, idx: usize) -> Option<Hold> {
        self.integrity.get(idx).and_then(|state| state.held)
    }

    /// The qualified names of the tools held now.
    pub fn held_names(&self) -> Vec<String> {
        (0..self.integrity.len()).filter(|idx| self.held(*idx).is_some()).map(|idx| self.qualified().name(idx).to_owned()).collect()
    }
}

// === impl Registry ===

impl Registry {
    /// A registry that keeps `events_kept` events for watchers that fall behind.
    pub fn with_event_log(events_kept: usize) -> Registry {
        Registry {
            current: ArcSwap::from_pointee(CatalogSnapshot::default()),
            events_kept: events_kept.max(1),
            history: Mutex::default(),
            revision_tx: watch::channel(0).0,
            status_tx: watch::channel(0).0,
        }
    }

    /// The current snapshot. Cheap: one atomic load and a reference count.
    pub fn snapshot(&self) -> Arc<CatalogSnapshot> {
        self.current.load_full()
    }

    /// The snapshot at `revision`, if it is still kept.
    pub fn snapshot_at(&self, revision: u64) -> Option<Arc<CatalogSnapshot>> {
        let current = self.current.load_full();
        if current.revision == revision {
            return Some(current);
        }
        self.lock_history().snapshots.iter().find(|snapshot| snapshot.revision == revision).cloned()
    }

    /// The view of one server in the current snapshot.
    pub fn server(&self, name: &str) -> Option<Arc<ServerView>> {
        self.current.load().servers.get(name).cloned()
    }

    /// A receiver of the catalog revision, changed when the catalog changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision_tx.subscribe()
    }

    /// A receiver that changes after every update, status updates included.
    pub fn subscribe_status(&self) -> watch::Receiver<u64> {
        self.status_tx.subscribe()
    }

    /// Every event with a revision above `after`, in order.
    ///
    /// # Errors
    /// [`Lagged`] when events after `after` were already dropped from the log.
    pub fn events_after(&self, after: u64) -> Result<Vec<CatalogEvent>, Lagged> {
        let history = self.lock_history();
        if after < history.trimmed_through {
            return Err(Lagged);
        }
        let start = history.events.partition_point(|event| event.revision <= after);
        Ok(history.events.range(start..).cloned().collect())
    }

    /// Adds or replaces a server's view; `change` says why, for watchers (none at boot).
    pub(crate) fn insert(&self, view: ServerView, change: Option<ConfigChange>) {
        self.publish(|servers, events| {
            if let Some(previous) = servers.get(&view.name) {
                view.shared.history.continue_from(&previous.shared.history);
            }
            let what = match change {
                Some(ConfigChange::Changed) => "its configuration changed",
                _ => "configured",
            };
            view.shared.history.record(crate::catalog::record::now_ms(), view.state, what.to_owned());
            if let Some(change) = change {
                events.push(CatalogChange::ConfigChanged { server: view.name.clone(), change });
            }
            servers.insert(view.name.clone(), Arc::new(view));
            true
        });
    }

    /// Publishes many servers at once (boot): one snapshot, however many servers.
    pub(crate) fn insert_all(&self, views: Vec<ServerView>) {
        self.publish(|servers, _| {
            let now = crate::catalog::record::now_ms();
            for view in views {
                view.shared.history.record(now, view.state, "configured".to_owned());
                servers.insert(view.name.clone(), Arc::new(view));
            }
            true
        });
    }

    /// Removes a server that is no longer configured.
    pub(crate) fn remove(&self, name: &str) {
        self.publish(|servers, events| {
            let Some((server, _)) = servers.remove_entry(name) else { return false };
            events.push(CatalogChange::ConfigChanged { server, change: ConfigChange::Removed });
            true
        });
    }

    /// Changes one server's view; does nothing if the server is unknown. A new generation or a
    /// change of availability is a catalog change (a new revision and an event); anything else
    /// is a status update.
    pub(crate) fn update(&self, name: &str, change: impl FnOnce(&mut ServerView)) {
        self.publish(|servers, events| {
            let Some(view) = servers.get_mut(name) else { return false };
            let before = view.clone();
            let after = Arc::make_mut(view);
            change(after);
            if let Some(what) = history::transition(&before, after) {
                after.shared.history.record(crate::catalog::record::now_ms(), after.state, what);
            }
            let generation_changed = match (&before.generation, &after.generation) {
                (Some(old), Some(new)) => !Arc::ptr_eq(old, new),
                (None, Some(_)) => true,
                _ => false,
            };
            if generation_changed && let Some(new) = &after.generation {
                after.qualified = Arc::default();
                events.push(generation_event(&before, new));
            }
            let integrity_changed = !Arc::ptr_eq(&before.integrity, &after.integrity) && {
                let (was, now) = (before.held_names(), after.held_names());
                let held: Vec<String> = now.iter().filter(|name| !was.contains(name)).cloned().collect();
                let released: Vec<String> = was.iter().filter(|name| !now.contains(name)).cloned().collect();
                let changed = !held.is_empty() || !released.is_empty();
                if changed {
                    events.push(CatalogChange::IntegrityChanged { server: after.name.clone(), held, released });
                }
                changed
            };
            let availability_changed = before.is_available() != after.is_available();
            if availability_changed {
                events.push(CatalogChange::StateChanged {
                    server: after.name.clone(),
                    state: after.state,
                    previous: before.state,
                    available: after.is_available(),
                    error: after.last_error.clone(),
                });
            }
            generation_changed || availability_changed || integrity_changed
        });
    }

    /// Applies `change` to a copy of the servers. When it reports a catalog change, the result
    /// is published under the next revision with its events; otherwise it replaces the current
    /// snapshot under the same revision.
    fn publish(&self, change: impl FnOnce(&mut BTreeMap<Arc<str>, Arc<ServerView>>, &mut Vec<CatalogChange>) -> bool) {
        let mut history = self.lock_history();
        let current = self.current.load_full();
        let mut servers = current.servers.clone();
        let mut changes = Vec::new();
        let catalog_changed = change(&mut servers, &mut changes);
        if !catalog_changed {
            self.current.store(Arc::new(CatalogSnapshot { revision: current.revision, servers }));
            self.status_tx.send_modify(|n| *n = n.wrapping_add(1));
            return;
        }
        let revision = current.revision + 1;
        for change in changes {
            if history.events.len() >= self.events_kept
                && let Some(dropped) = history.events.pop_front()
            {
                history.trimmed_through = dropped.revision;
            }
            history.events.push_back(CatalogEvent { revision, change });
        }
        if history.snapshots.len() == SNAPSHOTS_KEPT {
            history.snapshots.pop_front();
        }
        history.snapshots.push_back(current);
        self.current.store(Arc::new(CatalogSnapshot { revision, servers }));
        self.revision_tx.send_replace(revision);
        self.status_tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn lock_history(&self) -> std::sync::MutexGuard<'_, History> {
        // History is append-and-trim only; a panic mid-update cannot leave it inconsistent.
        self.history.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn generation_event(before: &ServerView, new: &Generation) -> CatalogChange {
    let server = before.name.clone();
    let old = before.generation.as_ref().map(|g| g.tools.as_slice()).unwrap_or_default();
    let diff = Diff::between_sorted(old.iter().map(|t| (t.name.as_str(), t.hash.as_str())), &new.tools);
    let qualified = |names: Vec<String>| names.iter().map(|name| qualify(&server, name)).collect();
    CatalogChange::GenerationPublished {
        generation: new.number,
        previous: before.generation_number(),
        added: qualified(diff.added),
        removed: qualified(diff.removed),
        changed: qualified(diff.changed),
        server,
    }
}
