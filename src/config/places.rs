//! Where a daemon keeps what its configuration does not place: its sockets in a runtime
//! directory, its store in a state directory. A configuration with no listeners at all (a
//! desktop client's `mcpServers` file, a TOML file with only servers) gets a daemon its own user
//! can use at once: the gRPC API and the MCP endpoint on Unix sockets, which identify that user
//! without any token, never TCP (which admits nobody without one).
//!
//! In order: the directories systemd made for the unit (`RuntimeDirectory=`,
//! `StateDirectory=`), then a system service's (`/run/toolhost`, `/var/lib/toolhost`) for
//! root, then the user's (`$XDG_RUNTIME_DIR/toolhost`, `$XDG_STATE_HOME/toolhost` or
//! `~/.local/state/toolhost`). Client commands look where the daemon would put its socket.

use std::path::PathBuf;

/// The gRPC socket's name in the runtime directory.
pub const GRPC_SOCKET: &str = "toolhost.sock";
/// The MCP socket's name in the runtime directory.
pub const MCP_SOCKET: &str = "mcp.sock";
/// A system service's runtime directory (the shipped unit's `RuntimeDirectory=toolhost`).
pub const SYSTEM_RUNTIME_DIR: &str = "/run/toolhost";

/// Where the sockets go when the configuration names none.
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = systemd_dir("RUNTIME_DIRECTORY") {
        return dir;
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from(SYSTEM_RUNTIME_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("toolhost"),
        // No per-user runtime directory (no login session): one of this user's own in /tmp,
        // made 0700 here; one somebody else made first is not used.
        None => {
            let dir = std::env::temp_dir().join(format!("toolhost-{}", nix::unistd::geteuid()));
            if owned_private_dir(&dir) { dir } else { state_dir().join("run") }
        }
    }
}

/// Whether `dir` is (or now is, created 0700) a directory of this user's that nobody else may
/// write to.
fn owned_private_dir(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    std::fs::symlink_metadata(dir)
        .is_ok_and(|meta| meta.is_dir() && meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o022 == 0)
}

/// Where the store goes when the configuration names none.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = systemd_dir("STATE_DIRECTORY") {
        return dir;
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/toolhost");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir).join("toolhost");
    }
    match std::env::var_os("HOME").filter(|dir| !dir.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/state/toolhost"),
        None => std::env::temp_dir().join(format!("toolhost-{}-state", nix::unistd::geteuid())),
    }
}

/// The first directory systemd gives a unit in `variable` (a colon-separated list).
fn systemd_dir(variable: &str) -> Option<PathBuf> {
    let value = std::env::var_os(variable)?;
    let first = value.to_str()?.split(':').next()?.to_owned();
    (!first.is_empty()).then(|| PathBuf::from(first))
}

/// Where client commands look for the daemon's gRPC socket when told nothing: this user's
/// runtime directory, else a system service's.
pub fn default_grpc_socket() -> PathBuf {
    existing_or_system(GRPC_SOCKET)
}

/// The same for the MCP socket (`toolhost mcp`).
pub fn default_mcp_socket() -> PathBuf {
    existing_or_system(MCP_SOCKET)
}

fn existing_or_system(name: &str) -> PathBuf {
    let mine = runtime_dir().join(name);
    if mine.exists() {
        return mine;
    }
    let system = PathBuf::from(SYSTEM_RUNTIME_DIR).join(name);
    if system.exists() { system } else { mine }
}
