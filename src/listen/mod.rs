//! Where the front doors listen: the addresses they bound, and binding a TCP port or a Unix
//! socket (with its group and mode) so that a bad address fails the start, not the first agent.

pub mod http;
pub mod machine;
pub mod shares;
pub mod tables;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use crate::config::{ListenAddr, Listener, SocketAccess};
/// A TLS listener's client CA file read as the client side reads its authorities: one reader,
/// one error, for the doors (which name `listen`, not `tls_client`).
pub use crate::tls_client::{TlsError as CaFileError, roots_of as ca_roots};

/// An address a front door actually listens on (a TCP port 0 resolved to the real port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// As the configuration writes an address, with the port the kernel gave for `:0`.
impl std::fmt::Display for BoundAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BoundAddr::Tcp(socket) => write!(f, "{socket}"),
            BoundAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A listener bound, not yet served.
pub enum Bound {
    Tcp(TcpListener),
    Unix(UnixListener, SocketFile),
}

/// A Unix socket's file as this daemon bound it. It is removed when its listener closes, and
/// only if it is still the one bound: a reload may have bound another at the same path since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFile {
    path: PathBuf,
    /// The file's device and inode when it was bound.
    id: Option<(u64, u64)>,
}

impl SocketFile {
    /// The file at `path`, just bound.
    pub fn bound(path: &Path) -> SocketFile {
        SocketFile { path: path.to_path_buf(), id: file_id(path) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file if it is still the one bound.
    pub fn remove(&self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|metadata| (metadata.dev(), metadata.ino()))
}

/// Binds every listener of a front door, so that a bad address fails the start; tells the
/// addresses they got.
///
/// # Errors
/// [`BindError`] naming the address.
pub async fn bind_all(listeners: &[Listener]) -> Result<(Vec<BoundAddr>, Vec<Bound>), BindError> {
    let mut addrs = Vec::new();
    let mut bound = Vec::new();
    for listener in listeners {
        match &listener.addr {
            ListenAddr::Tcp(socket) => {
                let (tcp, local) = bind_tcp(*socket).await?;
                addrs.push(BoundAddr::Tcp(local));
                bound.push(Bound::Tcp(tcp));
            }
            ListenAddr::Unix(path) => {
                let unix = bind_unix(path, &listener.socket).await?;
                addrs.push(BoundAddr::Unix(path.clone()));
                bound.push(Bound::Unix(unix, SocketFile::bound(path)));
            }
        }
    }
    Ok((addrs, bound))
}

/// A connection slot of one of `door`'s listeners (`slots` holds `limit`); `None` when every
/// slot is taken and the connection is to be closed, said at most as often as `warnings` lets.
pub fn connection_slot(
    slots: &std::sync::Arc<tokio::sync::Semaphore>,
    warnings: &crate::telemetry::throttle::Throttle,
    door: &'static str,
    limit: usize,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let slot = slots.clone().try_acquire_owned().ok();
    if slot.is_none()
        && let Some(suppressed) = warnings.admit()
    {
        tracing::warn!(door, limit, suppressed, "a connection was refused: too many open");
    }
    slot
}

/// A place among the connections of the peer `key`'s share of `door`'s; `None` (said at WARN,
/// at most as often as `warnings` lets) when it holds all of it.
pub fn connection_share(
    shares: &std::sync::Arc<shares::Shares>,
    key: &str,
    warnings: &crate::telemetry::throttle::Throttle,
    door: &'static str,
) -> Option<shares::Share> {
    let share = shares.take(key);
    if share.is_none()
        && let Some(suppressed) = warnings.admit()
    {
        tracing::warn!(door, peer = %key, limit = shares.per_peer(), suppressed, "a connection was refused: its peer holds its share");
    }
    share
}

/// After an accept of one of `door`'s listeners failed (out of file descriptors, say): said,
/// and a pause, so that the accept loop does not spin while the cause lasts.
pub async fn accept_failed(error: &std::io::Error, door: &'static str) {
    tracing::warn!(%error, door, "cannot accept a connection");
    tokio::time::sleep(ACCEPT_PAUSE).await;
}

/// How long an accept loop waits after a failed accept.
const ACCEPT_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// A listener that could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    pub addr: String,
    pub source: std::io::Error,
}

/// Binds `socket`, telling the port it got.
///
/// # Errors
/// [`BindError`] naming the address.
pub async fn bind_tcp(socket: SocketAddr) -> Result<(TcpListener, SocketAddr), BindError> {
    let error = |source| BindError { addr: socket.to_string(), source };
    let listener = TcpListener::bind(socket).await.map_err(error)?;
    let local = listener.local_addr().map_err(error)?;
    Ok((listener, local))
}

/// How long a process already listening on a socket path has to accept a probe connection.
const SOCKET_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Binds a Unix socket at `path` with the configured owner group and mode, replacing a socket a
/// previous run left (never one somebody still listens on).
///
/// # Errors
/// [`BindError`] naming the path.
pub async fn bind_unix(path: &Path, access: &SocketAccess) -> Result<UnixListener, BindError> {
    bind_unix_at(path, access).await.map_err(|source| BindError { addr: format!("unix:{}", path.display()), source })
}

async fn bind_unix_at(path: &Path, access: &SocketAccess) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    // A fresh machine may not have the socket's directory yet (systemd's RuntimeDirectory makes
    // /run/toolhost; a hand-run daemon may have nothing).
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    // A socket left by a previous run would make bind fail and is replaced; one that somebody
    // still listens on is theirs and stays; anything else at that path is kept.
    if let Ok(metadata) = std::fs::symlink_metadata(path)
        && metadata.file_type().is_socket()
    {
        match tokio::time::timeout(SOCKET_PROBE_TIMEOUT, tokio::net::UnixStream::connect(path)).await {
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)?,
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {}
            Ok(Err(error)) => return Err(error),
            Ok(Ok(_)) | Err(_) => {
                return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "another process is listening on this socket"));
            }
        }
    }
    let listener = UnixListener::bind(path)?;
    // The kernel checks these on every connect: by default owner and group only, so membership
    // of the socket's group is what lets an agent in.
    if let Some(group) = &access.group {
        std::os::unix::fs::chown(path, None, Some(group.gid))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode))?;
    Ok(listener)
}

/// Which browser origins and `Host` names an HTTP listener serves: loopback ones (any port) and
/// those the operator allowed. Anything else is a DNS-rebinding attempt until proven not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins {
    /// Lower case, no trailing slash (as the configuration normalizes them).
    allowed: Vec<String>,
}

impl Origins {
    pub fn new(allowed: Vec<String>) -> Origins {
        Origins { allowed }
    }

    /// Whether a page from `origin` may talk to the listener.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.allowed.contains(&origin) {
            return true;
        }
        let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else { return false };
        is_loopback_name(rest)
    }

    /// Whether a request's `Host` names this machine's loopback (any port) or the host of an
    /// allowed origin: a rebound DNS name (`evil.example`) is refused even without an Origin.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        is_loopback_name(&host) || self.allowed.iter().any(|origin| origin.split_once("://").is_some_and(|(_, allowed)| allowed == host))
    }
}

/// A loopback host ([`crate::oauth_core::urls::is_loopback_host`]) with or without a port, and
/// nothing else: an authority with user info, a path or a second host
/// (`127.0.0.1:80@evil.example`) is not loopback.
pub fn is_loopback_name(authority: &str) -> bool {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((host, rest)) => (host, rest),
            None => return false,
        },
        None => authority.find(':').map_or((authority, ""), |at| authority.split_at(at)),
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()),
        None => port.is_empty(),
    };
    port_ok && crate::oauth_core::urls::is_loopback_host(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_loopback_authority_is_loopback() {
        for ok in ["localhost", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:443", "localhost:1"] {
            assert!(is_loopback_name(ok), "{ok}");
        }
        for refused in [
            "127.0.0.1:8080@evil.example",
            "localhost@evil.example",
            "[::1]:80@evil.example",
            "127.0.0.1:80/x",
            "127.0.0.1:",
            "127.0.0.1:123456",
            "127.0.0.1:80:81",
            "[::1",
            "evil.example",
            "127.0.0.1.evil.example",
            "",
        ] {
            assert!(!is_loopback_name(refused), "{refused}");
        }
        let origins = Origins::new(vec!["https://tools.example".into()]);
        assert!(origins.origin_allowed("http://127.0.0.1:3000"));
        assert!(origins.origin_allowed("https://TOOLS.example/"));
        assert!(origins.host_allowed("tools.example"));
        assert!(!origins.origin_allowed("http://127.0.0.1:3000@evil.example"));
        assert!(!origins.host_allowed("127.0.0.1:3000@evil.example"));
        assert!(!origins.host_allowed("evil.example"));
    }
}
