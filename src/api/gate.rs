//! The TCP listeners' gate: a connection from a process of a supervised server is closed
//! before anything is read from it. Servers are never callers (a Unix socket's peer is refused
//! by `Access::admit`, which sees its pid); over TCP the kernel names no pid, so the owner of a
//! socket on this machine (loopback or any of its addresses: a server with the network reaches
//! a listener on `0.0.0.0` through the machine's own address too) is looked up once per
//! connection, off the async threads.

use std::io;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::door::model::UnixPeer;
use crate::door::observe::Throttle;

/// Connections being looked up at once; more wait in the listener's backlog.
const MAX_PENDING: usize = 256;

/// Whether the other end of `stream` is a process of a supervised server, or a connection the
/// egress proxy made for one (then it is refused, and said so at WARN, at most once a second).
pub(crate) async fn from_a_server(stream: &TcpStream) -> bool {
    let (Ok(local), Ok(remote)) = (stream.local_addr(), stream.peer_addr()) else { return false };
    // A peer elsewhere costs no lookup; the list of this machine's addresses is kept current
    // without one per connection (`listen::machine`).
    if !crate::listen::machine::is_this_machine(remote.ip()) {
        return false;
    }
    let peer = tokio::task::spawn_blocking(move || UnixPeer::of_loopback(local, remote)).await.ok().flatten();
    let refused = peer.is_some_and(|peer| peer.server);
    if refused {
        static WARNINGS: std::sync::OnceLock<Throttle> = std::sync::OnceLock::new();
        if WARNINGS.get_or_init(|| Throttle::new(1)).admit().is_some() {
            tracing::warn!(%remote, "refused a gRPC connection from a process of a supervised server, or one that cannot be told from one: servers are never callers");
        }
    }
    refused
}

/// Accepts plain TCP connections and hands over those that pass the gate.
pub(crate) fn incoming(
    listener: TcpListener,
    tracker: &TaskTracker,
    cancel: CancellationToken,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<TcpStream>> {
    accept_each(listener, tracker, cancel, MAX_PENDING, |stream| async move { (!from_a_server(&stream).await).then_some(stream) })
}

/// The accept loop of a TCP listener: each connection passes `admit` on a task of its own (at
/// most `at_once` at a time; more wait in the backlog), and what it gives is handed over.
pub(crate) fn accept_each<T, F, Fut>(
    listener: TcpListener,
    tracker: &TaskTracker,
    cancel: CancellationToken,
    at_once: usize,
    admit: F,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<T>>
where
    T: Send + 'static,
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Option<T>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    let tasks = tracker.clone();
    tracker.spawn(async move {
        let pending = std::sync::Arc::new(tokio::sync::Semaphore::new(at_once));
        loop {
            let accepted = tokio::select! {
                () = cancel.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else { continue };
            let _ = stream.set_nodelay(true);
            let Ok(permit) = pending.clone().acquire_owned().await else { return };
            let (admitted, tx) = (admit(stream), tx.clone());
            tasks.spawn(async move {
                let _permit = permit;
                if let Some(connection) = admitted.await {
                    let _ = tx.send(Ok(connection)).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
