//! Listeners of the front doors (`[grpc]`, `[mcp]`, `[console]`): addresses, Unix socket modes
//! and groups, TLS files, and the rules every HTTP door shares (no TLS yet, browser origins).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{KeyProblem, ValueError};

/// `listen`: one listener or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(RawListen),
    Many(Vec<RawListen>),
}

impl OneOrMany {
    pub(crate) fn into_vec(listen: Option<OneOrMany>) -> Vec<RawListen> {
        match listen {
            None => Vec::new(),
            Some(OneOrMany::One(entry)) => vec![entry],
            Some(OneOrMany::Many(entries)) => entries,
        }
    }
}

/// A listener as written: an address, or a table with an address and, for a Unix socket, its
/// access.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawListen {
    Address(String),
    Table(RawListenTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListenTable {
    pub(crate) address: String,
    /// Octal permission bits of the socket file, e.g. "0660".
    pub(crate) mode: Option<String>,
    /// The group that owns the socket file: a name or a numeric id.
    pub(crate) group: Option<String>,
    /// TLS for a TCP listener.
    pub(crate) tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    /// PEM certificate chain and private key of the listener.
    pub(crate) cert: String,
    pub(crate) key: String,
    /// PEM certificates of the CA that signs client certificates; a client that presents one
    /// is identified by its certificate's subject.
    pub(crate) client_ca: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// As the configuration writes it: `127.0.0.1:50051`, `unix:/run/toolhost/toolhost.sock`.
impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(socket) => write!(f, "{socket}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// One API listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub addr: ListenAddr,
    /// Who may connect, for a Unix socket (the file's mode and group).
    pub socket: SocketAccess,
    /// TLS, for a TCP listener (required off loopback).
    pub tls: Option<TlsFiles>,
}

/// A TLS listener's files (absolute paths, readable when the configuration was loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// A Unix socket file's permission bits and owning group. The kernel checks them on every
/// connect: with the default 0660, the daemon's user and the socket's group get in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketAccess {
    pub mode: u32,
    /// `None`: the daemon's own group.
    pub group: Option<SocketGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketGroup {
    pub name: String,
    pub gid: u32,
}

impl Default for SocketAccess {
    fn default() -> SocketAccess {
        SocketAccess { mode: 0o660, group: None }
    }
}

/// A listener as written, its relative paths taken against the configuration file's directory.
impl TryFrom<(&Path, &RawListen)> for Listener {
    type Error = ValueError;

    fn try_from((base, entry): (&Path, &RawListen)) -> Result<Listener, ValueError> {
        listener(base, entry)
    }
}

fn listener(base: &Path, entry: &RawListen) -> Result<Listener, ValueError> {
    let (address, mode, group, tls) = match entry {
        RawListen::Address(address) => (address, None, None, None),
        RawListen::Table(table) => (&table.address, table.mode.as_deref(), table.group.as_deref(), table.tls.as_ref()),
    };
    let addr = parse_listen(base, address)?;
    let tls = match (tls, &addr) {
        (None, _) => None,
        (Some(_), ListenAddr::Unix(_)) => return Err(ValueError::TlsOnUnix),
        (Some(tls), ListenAddr::Tcp(_)) => {
            let file = |path: &str| {
                let path = base.join(path);
                std::fs::metadata(&path).map(|_| path.clone()).map_err(|source| ValueError::TlsFile { path, source })
            };
            Some(TlsFiles { cert: file(&tls.cert)?, key: file(&tls.key)?, client_ca: tls.client_ca.as_deref().map(file).transpose()? })
        }
    };
    if let ListenAddr::Tcp(socket) = &addr
        && !socket.ip().is_loopback()
        && tls.is_none()
    {
        return Err(ValueError::OffLoopback { address: address.clone() });
    }
    if matches!(addr, ListenAddr::Tcp(_)) && (mode.is_some() || group.is_some()) {
        return Err(ValueError::ModeOnTcp);
    }
    let mut socket = SocketAccess::default();
    if let Some(mode) = mode {
        socket.mode = u32::from_str_radix(mode.trim_start_matches("0o"), 8)
            .ok()
            .filter(|mode| *mode <= 0o777)
            .ok_or_else(|| ValueError::NotAMode { mode: mode.to_owned() })?;
        if socket.mode & 0o200 == 0 {
            return Err(ValueError::ModeLocksOutOwner { mode: mode.to_owned() });
        }
    }
    if let Some(group) = group {
        socket.group = Some(resolve_group(group)?);
    }
    Ok(Listener { addr, socket, tls })
}

/// A group by name or numeric id, which must exist on this machine.
pub(super) fn resolve_group(group: &str) -> Result<SocketGroup, ValueError> {
    let found = match group.parse::<u32>() {
        Ok(gid) => nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)),
        Err(_) => nix::unistd::Group::from_name(group),
    };
    match found {
        Ok(Some(entry)) => Ok(SocketGroup { name: entry.name, gid: entry.gid.as_raw() }),
        Ok(None) => Err(ValueError::NoSuchGroup { group: group.to_owned() }),
        Err(source) => Err(ValueError::GroupLookup { group: group.to_owned(), source }),
    }
}

fn parse_listen(base: &Path, addr: &str) -> Result<ListenAddr, ValueError> {
    if let Some(path) = addr.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(ValueError::UnixWithoutPath);
        }
        return Ok(ListenAddr::Unix(base.join(path)));
    }
    addr.parse::<SocketAddr>().map(ListenAddr::Tcp).map_err(|_| ValueError::NotAnAddress { addr: addr.to_owned() })
}

/// The listeners of an HTTP front door without TLS (the MCP endpoint, the console): each
/// address once; `no_tls` says why a `tls` table is refused.
pub(super) fn http_listeners(base: &Path, raw: Option<OneOrMany>, no_tls: &str) -> Result<Vec<Listener>, KeyProblem> {
    let entries = OneOrMany::into_vec(raw);
    let mut listen: Vec<Listener> = Vec::with_capacity(entries.len());
    for (idx, entry) in entries.iter().enumerate() {
        let listener = Listener::try_from((base, entry)).map_err(|problem| (format!("listen[{idx}]"), problem.to_string()))?;
        if listener.tls.is_some() {
            return Err((format!("listen[{idx}]"), no_tls.to_owned()));
        }
        if listen.iter().any(|other| other.addr == listener.addr) {
            return Err((format!("listen[{idx}]"), "names the same address twice".into()));
        }
        listen.push(listener);
    }
    Ok(listen)
}

/// Browser origins a listener admits besides loopback ones, checked and normalized (lower case,
/// no trailing slash).
pub(super) fn origins(raw: &[String]) -> Result<Vec<String>, KeyProblem> {
    for (idx, origin) in raw.iter().enumerate() {
        let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        let valid =
            rest.is_some_and(|rest| !rest.is_empty() && !rest.trim_end_matches('/').contains('/') && !rest.contains(char::is_whitespace));
        if !valid {
            return Err((format!("allowed_origins[{idx}]"), format!("{origin:?} is not an origin like \"https://app.example\"")));
        }
    }
    Ok(raw.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect())
}
