//! Where the front doors listen: the addresses they bound, and binding a TCP port or a Unix
//! socket (with its group and mode) so that a bad address fails the start, not the first agent.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use crate::config::SocketAccess;

/// An address a front door actually listens on (a TCP port 0 resolved to the real port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

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
