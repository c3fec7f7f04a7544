//! The composition root: opens the store, starts the supervisor, and owns the shutdown order.
//! The only module that wires subsystems together.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::catalog::store::{Store, StoreError};
use crate::config::Config;
use crate::supervisor::Supervisor;
use crate::supervisor::registry::Registry;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A running daemon: what tests and `main` hold while it runs.
pub struct App {
    store: Store,
    supervisor: Supervisor,
    config: Config,
}

// === impl App ===

impl App {
    /// Opens and migrates the store, loads the stored catalog and starts every enabled server.
    ///
    /// # Errors
    /// [`StartError`] when the store cannot be opened or read.
    pub async fn start(config: Config) -> Result<App, StartError> {
        let store = Store::open(&config.store.path, config.store.history_generations).await?;
        let registry = Arc::new(Registry::new());
        let supervisor = Supervisor::start(&config.servers, store.clone(), registry, CancellationToken::new()).await?;
        Ok(App { store, supervisor, config })
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

    /// Stops every server (the stdio shutdown sequence), then closes the store.
    pub async fn shutdown(self) {
        self.supervisor.shutdown(self.config.daemon.shutdown_timeout).await;
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
