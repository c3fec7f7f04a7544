//! The gRPC boundary: the only module that knows about protobuf and tonic.
//!
//! `service` handles requests, `convert` builds messages, `status` maps every error to a gRPC
//! status, `watch` streams catalog changes. `serve` binds the listeners and runs tonic with the
//! standard health and reflection services beside `toolhost.v1.ToolHost`.

mod access;
mod approvals;
pub(crate) mod authority;
mod convert;
mod fleet;
mod gate;
mod integrity;
pub(crate) mod login;
mod search;
pub(crate) mod service;
mod status;
mod tasks;
mod tls;
mod watch;

use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::door::Door;
use crate::door::model::{ListenAddr, Listener};
use crate::door::operator::{Health, HealthWatch, Operator};
use crate::listen::{self, BindError, BoundAddr};

/// The generated protobuf types.
#[allow(clippy::all, clippy::pedantic, unreachable_pub, missing_docs)]
pub mod pb {
    tonic::include_proto!("toolhost.v1");
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("toolhost_descriptor");
}

#[derive(Debug, thiserror::Error)]
pub enum ApiStartError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("cannot build the reflection service: {0}")]
    Reflection(String),
    #[error("TLS for {addr}: {problem}")]
    Tls { addr: String, problem: tls::TlsError },
}

enum Bound {
    Tcp(TcpListener, Option<Arc<rustls::ServerConfig>>),
    Unix(UnixListener, listen::SocketFile),
}

/// What the API serves from: the door's agent side and its operator side.
pub struct ApiParts {
    pub door: Door,
    pub operator: Operator,
}

/// Binds every listener first, so that a bad address fails the start before anything runs.
///
/// # Errors
/// [`ApiStartError::Bind`] naming the address.
pub async fn bind(addrs: &[Listener]) -> Result<(Vec<BoundAddr>, BoundListeners), ApiStartError> {
    let mut bound = Vec::new();
    let mut listeners = Vec::new();
    for Listener { addr, socket, tls } in addrs {
        match addr {
            ListenAddr::Tcp(socket) => {
                let tls = tls
                    .as_ref()
                    .map(tls::server_config)
                    .transpose()
                    .map_err(|problem| ApiStartError::Tls { addr: socket.to_string(), problem })?;
                let (listener, local) = listen::bind_tcp(*socket).await?;
                bound.push(BoundAddr::Tcp(local));
                listeners.push(Bound::Tcp(listener, tls));
            }
            ListenAddr::Unix(path) => {
                let listener = listen::bind_unix(path, socket).await?;
                bound.push(BoundAddr::Unix(path.clone()));
                listeners.push(Bound::Unix(listener, listen::SocketFile::bound(path)));
            }
        }
    }
    Ok((bound, BoundListeners(listeners)))
}

/// Listeners bound by [`bind`], waiting for [`Api::serve`].
pub struct BoundListeners(Vec<Bound>);

impl BoundListeners {
    /// Each listener on its own, in the order bound (each can then be closed on its own).
    pub fn each(self) -> impl Iterator<Item = BoundListeners> {
        self.0.into_iter().map(|bound| BoundListeners(vec![bound]))
    }
}

/// Builds the API's services and starts its health reporting until `cancel`; [`Api::serve`]
/// then serves them on listeners. Every task goes into `tracker`.
///
/// # Errors
/// [`ApiStartError::Reflection`] if the reflection service cannot be built.
pub fn start(parts: ApiParts, tracker: &TaskTracker, cancel: CancellationToken) -> Result<Api, ApiStartError> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    // Two separate builder chains. A single closure that built both was compiled into a
    // use-after-free in release builds (rustc 1.95; found with valgrind): keep them apart.
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|err| ApiStartError::Reflection(err.to_string()))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|err| ApiStartError::Reflection(err.to_string()))?;
    let health = parts.operator.health();
    let service = service::ToolHostService {
        door: parts.door,
        operator: parts.operator,
        watchers: watch::Watchers { tracker: tracker.clone(), cancel: cancel.clone(), open: Arc::default(), opened: Arc::default() },
    };
    tracker.spawn(report_health(health, health_reporter, cancel));
    let router = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(pb::tool_host_server::ToolHostServer::new(service));
    Ok(Api { router })
}

/// The gRPC API's services, built once by [`start`] and served on every listener, at start and
/// as reloads add them: one set of watch limits and one health status for all.
#[derive(Clone)]
pub struct Api {
    router: tonic::transport::server::Router,
}

impl Api {
    /// Serves the API on `listeners` until `cancel` fires, then lets RPCs in flight finish.
    /// Every task goes into `tracker`.
    pub fn serve(&self, listeners: BoundListeners, tracker: &TaskTracker, cancel: CancellationToken) {
        for listener in listeners.0 {
            let router = self.router.clone();
            let shutdown = cancel.clone().cancelled_owned();
            match listener {
                Bound::Tcp(listener, None) => {
                    let incoming = gate::incoming(listener, tracker, cancel.clone());
                    tracker.spawn(async move {
                        if let Err(error) = router.serve_with_incoming_shutdown(incoming, shutdown).await {
                            tracing::error!(%error, "the gRPC server on a TCP listener stopped");
                        }
                    });
                }
                Bound::Tcp(listener, Some(config)) => {
                    let incoming = tls::incoming(listener, config, tracker, cancel.clone());
                    tracker.spawn(async move {
                        if let Err(error) = router.serve_with_incoming_shutdown(incoming, shutdown).await {
                            tracing::error!(%error, "the gRPC server on a TLS listener stopped");
                        }
                    });
                }
                Bound::Unix(listener, file) => {
                    // Every gRPC library's idea of an authority on a Unix socket is accepted.
                    let incoming = UnixListenerStream::new(listener).map(|stream| stream.map(authority::AuthorityFix::new));
                    tracker.spawn(async move {
                        if let Err(error) = router.serve_with_incoming_shutdown(incoming, shutdown).await {
                            tracing::error!(%error, "the gRPC server on a Unix socket stopped");
                        }
                        file.remove();
                    });
                }
            }
        }
    }
}

/// NOT_SERVING until every enabled server has had its first connection attempt, then SERVING.
/// `toolhost.v1.Store` says whether the catalog store can be written: NOT_SERVING while it is
/// degraded (the daemon itself still serves the stored catalog). `toolhost.v1.Audit` is
/// NOT_SERVING once a verification found the audit chain altered (calls go on; operators decide).
async fn report_health(mut health: HealthWatch, reporter: tonic_health::server::HealthReporter, cancel: CancellationToken) {
    const SERVICE: &str = "toolhost.v1.ToolHost";
    const STORE: &str = "toolhost.v1.Store";
    const AUDIT: &str = "toolhost.v1.Audit";
    use tonic_health::ServingStatus::{NotServing, Serving};
    let serving = |yes: bool| if yes { Serving } else { NotServing };
    reporter.set_service_status("", NotServing).await;
    reporter.set_service_status(SERVICE, NotServing).await;
    loop {
        let now: Health = tokio::select! {
            () = cancel.cancelled() => break,
            now = health.next() => match now {
                Some(now) => now,
                None => break,
            },
        };
        reporter.set_service_status(STORE, serving(now.store_writable)).await;
        reporter.set_service_status(AUDIT, serving(now.audit_intact)).await;
        reporter.set_service_status("", serving(now.settled)).await;
        reporter.set_service_status(SERVICE, serving(now.settled)).await;
    }
    reporter.set_service_status("", NotServing).await;
    reporter.set_service_status(SERVICE, NotServing).await;
}
