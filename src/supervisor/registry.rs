//! The live view of every server: state, session, current generation. Workers publish into it;
//! readers (the API) take a consistent snapshot without locking.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::catalog::model::Generation;
use crate::catalog::record::EnumerationRecord;
use crate::mcp::lifecycle::ServerHello;
use crate::upstream::SessionHandle;

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// The server cannot be used as configured (it cannot be started, or it speaks an
    /// unsupported protocol version, or its tools cannot be enumerated); see `last_error`.
    Failed,
    /// toolhost is shutting down.
    Stopped,
}

/// One server as the rest of toolhost sees it.
#[derive(Debug, Clone)]
pub struct ServerView {
    pub name: Arc<str>,
    pub state: ServerState,
    /// The live session, while there is one.
    pub session: Option<SessionHandle>,
    /// What the server said about itself in the current (or last) session.
    pub hello: Option<ServerHello>,
    /// The current generation. It stays while the server is down: its tools are then
    /// unavailable, not deleted.
    pub generation: Option<Arc<Generation>>,
    /// The generation was loaded from the store and no session of this daemon has confirmed it yet.
    pub revalidating: bool,
    pub last_verified_at_ms: Option<i64>,
    pub last_enumeration: Option<EnumerationRecord>,
    pub last_error: Option<String>,
    /// Sessions started after the first.
    pub num_restarts: u64,
}

/// A consistent picture of every server at one revision.
#[derive(Debug, Default)]
pub struct CatalogSnapshot {
    /// Increases with every change to any server's view.
    pub revision: u64,
    pub servers: BTreeMap<Arc<str>, Arc<ServerView>>,
}

/// The live catalog.
pub struct Registry {
    current: ArcSwap<CatalogSnapshot>,
    /// Serialises writers; readers never take it.
    write: Mutex<()>,
    revision_tx: watch::Sender<u64>,
}

// === impl ServerView ===

impl ServerView {
    pub fn new(name: Arc<str>, state: ServerState) -> ServerView {
        ServerView {
            name,
            state,
            session: None,
            hello: None,
            generation: None,
            revalidating: false,
            last_verified_at_ms: None,
            last_enumeration: None,
            last_error: None,
            num_restarts: 0,
        }
    }

    /// Its tools can be called now.
    pub fn is_available(&self) -> bool {
        self.state == ServerState::Ready && self.session.is_some()
    }
}

// === impl Registry ===

impl Registry {
    pub fn new() -> Registry {
        Registry { current: ArcSwap::from_pointee(CatalogSnapshot::default()), write: Mutex::new(()), revision_tx: watch::channel(0).0 }
    }

    /// The current snapshot. Cheap: one atomic load and a reference count.
    pub fn snapshot(&self) -> Arc<CatalogSnapshot> {
        self.current.load_full()
    }

    /// The view of one server in the current snapshot.
    pub fn server(&self, name: &str) -> Option<Arc<ServerView>> {
        self.current.load().servers.get(name).cloned()
    }

    /// A receiver of the revision number, changed after every publish.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision_tx.subscribe()
    }

    /// Adds or replaces a server's view.
    pub(crate) fn insert(&self, view: ServerView) {
        self.publish(|servers| {
            servers.insert(view.name.clone(), Arc::new(view));
        });
    }

    /// Changes one server's view; does nothing if the server is unknown.
    pub(crate) fn update(&self, name: &str, change: impl FnOnce(&mut ServerView)) {
        self.publish(|servers| {
            if let Some(view) = servers.get_mut(name) {
                change(Arc::make_mut(view));
            }
        });
    }

    fn publish(&self, change: impl FnOnce(&mut BTreeMap<Arc<str>, Arc<ServerView>>)) {
        let _write = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.current.load();
        let mut servers = current.servers.clone();
        change(&mut servers);
        let revision = current.revision + 1;
        self.current.store(Arc::new(CatalogSnapshot { revision, servers }));
        self.revision_tx.send_replace(revision);
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}
