//! The composition root: opens the store, starts the supervisor and the API, and owns the
//! shutdown order. The only module that wires subsystems together.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ApiParts, ApiStartError, BoundAddr};
use crate::calls::Calls;
use crate::catalog::store::{Store, StoreError};
use crate::config::Config;
use crate::supervisor::Supervisor;
use crate::supervisor::registry::Registry;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Api(#[from] ApiStartError),
}

/// A running daemon: what tests and `main` hold while it runs.
pub struct App {
    store: Store,
    supervisor: Supervisor,
    calls: Calls,
    grpc_addrs: Vec<BoundAddr>,
    api_tasks: TaskTracker,
    api_cancel: CancellationToken,
    shutdown_timeout: Duration,
}

// === impl App ===

impl App {
    /// Binds the API listeners, opens and migrates the store, loads the stored catalog, starts
    /// every enabled server, and serves the API.
    ///
    /// # Errors
    /// [`StartError`] when a listener cannot be bound or the store cannot be opened or read.
    pub async fn start(config: Config) -> Result<App, StartError> {
        let (grpc_addrs, listeners) = api::bind(&config.grpc.listen).await?;
        let store = Store::open(&config.store.path, config.store.history_generations).await?;
        let registry = Arc::new(Registry::with_event_log(config.grpc.watch_backlog));
        let supervisor = Supervisor::start(&config.servers, store.clone(), registry.clone(), CancellationToken::new()).await?;
        let calls = Calls::new(registry.clone(), store.clone(), supervisor.refresher());
        let api_tasks = TaskTracker::new();
        let api_cancel = CancellationToken::new();
        let parts = ApiParts { registry, store: store.clone(), calls: calls.clone(), refresher: supervisor.refresher() };
        api::serve(listeners, parts, &api_tasks, api_cancel.clone())?;
        for addr in &grpc_addrs {
            tracing::info!(?addr, "serving the gRPC API");
        }
        Ok(App { store, supervisor, calls, grpc_addrs, api_tasks, api_cancel, shutdown_timeout: config.daemon.shutdown_timeout })
    }

    pub fn registry(&self) -> &Arc<Registry> {
        self.supervisor.registry()
    }

    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
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

    /// Stops accepting RPCs and lets those in flight finish, stops every server (the stdio
    /// shutdown sequence), then closes the store. The whole sequence is bounded by the
    /// configured shutdown timeout.
    pub async fn shutdown(self) {
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        self.api_cancel.cancel();
        self.api_tasks.close();
        if tokio::time::timeout_at(deadline, self.api_tasks.wait()).await.is_err() {
            tracing::warn!("RPCs in flight did not finish before the shutdown deadline");
        }
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.supervisor.shutdown(remaining.max(Duration::from_secs(1))).await;
        self.store.close().await;
    }
}

/// Runs the daemon until `shutdown` completes.
///
/// # Errors
/// [`StartError`] when the daemon cannot start.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let app = App::start(config).await?;
    tracing::info!(servers = app.registry().snapshot().servers.len(), "toolhost is running");
    shutdown.await;
    tracing::info!("stopping");
    app.shutdown().await;
    Ok(())
}
