//! What toolhost knows about a caller: on a Unix socket, what the kernel says (`SO_PEERCRED`,
//! the process's supplementary groups and its systemd unit, read once per connection); on any
//! transport, a bearer token if one was presented. Nothing here is configured by the agent.

use std::fmt::Write as _;

/// A Unix-socket peer, as the kernel identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixPeer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    /// Supplementary groups (from `/proc/PID/status`).
    pub groups: Vec<u32>,
    /// The systemd unit the process runs in (from `/proc/PID/cgroup`), e.g. `research-bot.service`.
    pub unit: Option<String>,
    /// The peer is a process of a server toolhost supervises: never a caller, whatever its uid.
    pub server: bool,
}

/// What a Unix-socket listener attaches to each connection's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo(pub Option<UnixPeer>);

/// What a TLS listener attaches to each connection's requests: the verified client
/// certificate's subject (RFC 4514), if the client presented one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPeerInfo(pub Option<String>);

/// A caller's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub transport: &'static str,
    peer: Option<UnixPeer>,
    token: Option<Vec<u8>>,
    /// A verified TLS client certificate's subject.
    certificate: Option<String>,
}

impl UnixPeer {
    pub fn new(uid: u32, gid: u32, pid: i32) -> UnixPeer {
        UnixPeer { uid, gid, pid: Some(pid), groups: Vec::new(), unit: None, server: false }
    }

    /// The peer of a connected socket, with its groups and unit read from `/proc`. Where
    /// `/proc` hides other users' processes (`hidepid`, systemd's `ProtectProc=`), the groups
    /// are the user's in the user database instead, so that an agent admitted through a
    /// supplementary group (`usermod -aG`) is still recognised; the unit is then unknown.
    pub fn of(stream: &tokio::net::UnixStream) -> Option<UnixPeer> {
        let cred = stream.peer_cred().ok()?;
        let pid = cred.pid();
        let (groups, unit) = match pid.and_then(read_proc) {
            Some(found) => found,
            None => (database_groups(cred.uid(), cred.gid()), None),
        };
        let server = crate::sandbox::servers::may_be_a_server(cred.uid()) && pid.is_some_and(crate::sandbox::servers::owns_pid);
        Some(UnixPeer { uid: cred.uid(), gid: cred.gid(), pid, groups, unit, server })
    }

    /// The owner of the other end of a loopback TCP connection, from the kernel's socket table
    /// (`/proc/net/tcp`, `/proc/net/tcp6`): the socket whose local end is our peer's address and
    /// whose remote end is ours. Its uid is the kernel's word, as `SO_PEERCRED` is on a Unix
    /// socket; groups and unit are not known (the primary group comes from the user database).
    /// Addresses are compared in their canonical form, and an IPv4 peer is also looked for as
    /// an IPv6 socket connected to the v4-mapped address (`::ffff:127.0.0.1`), which the kernel
    /// lists in `tcp6`.
    ///
    /// Fails closed: a loopback peer that cannot be found (a client that already closed leaves
    /// an orphaned entry whose uid reads 0, which must never make it root), or whose process
    /// cannot be told from a server's ([`servers::SocketHolder`]), is [`UnixPeer::unidentified`],
    /// never a caller. Blocking (it reads tables as long as the host's connections and
    /// processes): call it off the accept loop.
    ///
    /// A peer on another of this machine's addresses ([`machine::is_this_machine`]: an
    /// interface's, reached directly or from a server with the network) is looked up the same
    /// way, as a server's process may be it; only to be refused, though: the kernel's word
    /// names a caller on loopback alone, elsewhere its token does (`None`). A peer the egress
    /// proxy connected for a server ([`machine::is_a_tunnel`]) is that server's, though the
    /// socket is the daemon's.
    ///
    /// [`servers::SocketHolder`]: crate::sandbox::servers::SocketHolder
    /// [`machine::is_this_machine`]: crate::listen::machine::is_this_machine
    /// [`machine::is_a_tunnel`]: crate::listen::machine::is_a_tunnel
    pub fn of_loopback(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Option<UnixPeer> {
        use crate::listen::machine;
        let (local, remote) = (canonical(local), canonical(remote));
        let loopback = remote.ip().is_loopback();
        if !loopback && !machine::is_this_machine(remote.ip()) {
            return None;
        }
        if machine::is_a_tunnel(remote) {
            return Some(UnixPeer::unidentified());
        }
        let peer = Self::of_local(local, remote);
        (loopback || peer.server).then_some(peer)
    }

    /// The owner of the socket `remote` → `local`, a peer on this machine, whatever its address
    /// (see [`UnixPeer::of_loopback`]).
    fn of_local(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> UnixPeer {
        use crate::sandbox::servers::{self, SocketHolder};
        let Some((uid, inode)) = find_socket(remote, local) else { return UnixPeer::unidentified() };
        let gid = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map_or(u32::MAX, |user| user.gid.as_raw());
        let mut peer = UnixPeer { uid, gid, pid: None, groups: Vec::new(), unit: None, server: false };
        if servers::may_be_a_server(uid) {
            match servers::socket_holder(inode, uid) {
                SocketHolder::Caller(pid) => peer.pid = Some(pid),
                SocketHolder::Server => peer.server = true,
                SocketHolder::Hidden | SocketHolder::Gone => return UnixPeer::unidentified(),
            }
        }
        peer
    }

    /// A loopback peer the kernel's tables do not name: no uid any entry could match, and
    /// refused as a server's process would be (it may be one).
    pub fn unidentified() -> UnixPeer {
        UnixPeer { uid: u32::MAX, gid: u32::MAX, pid: None, groups: Vec::new(), unit: None, server: true }
    }

    /// Whose share of a door's connections a connection from `peer` counts against: its uid; a
    /// peer the kernel does not name, or that cannot be told from a server's process, shares
    /// one key with all its kind.
    pub fn share_key(peer: Option<&UnixPeer>) -> String {
        match peer {
            Some(peer) if !peer.server => format!("uid {}", peer.uid),
            Some(_) => "unidentified".to_owned(),
            None => "unknown".to_owned(),
        }
    }

    /// The primary group and every supplementary one.
    pub fn gids(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.gid).chain(self.groups.iter().copied())
    }
}

/// Supplementary groups and systemd unit of process `pid`, or `None` when `/proc` does not show
/// it (hidden from this user, or gone).
fn read_proc(pid: i32) -> Option<(Vec<u32>, Option<String>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let groups = status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|list| list.split_whitespace().filter_map(|gid| gid.parse().ok()).collect())?;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    Some((groups, unit_of(&cgroup)))
}

/// The supplementary groups the user database gives `uid` (as `id` prints them); none for a
/// uid it does not know.
fn database_groups(uid: u32, gid: u32) -> Vec<u32> {
    let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) else { return Vec::new() };
    let Ok(name) = std::ffi::CString::new(user.name) else { return Vec::new() };
    nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
        .map(|groups| groups.into_iter().map(nix::unistd::Gid::as_raw).filter(|group| *group != gid).collect())
        .unwrap_or_default()
}

/// `/proc/net/tcp{,6}` states of a connection whose client may still send: established, or
/// closed for writing only (FIN_WAIT1, FIN_WAIT2).
const OPEN_STATES: [&str; 3] = ["01", "04", "05"];

/// An address with an IPv4-mapped IPv6 address written as the IPv4 one.
fn canonical(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The uid and inode of the client socket `client` → `listener`: an IPv4 client in `tcp`, or an
/// IPv6 socket connected to the v4-mapped address in `tcp6`; an IPv6 client in `tcp6`.
fn find_socket(client: std::net::SocketAddr, listener: std::net::SocketAddr) -> Option<(u32, u64)> {
    use std::io::BufRead;
    let mapped = |addr: std::net::SocketAddr| match addr.ip() {
        std::net::IpAddr::V4(ip) => std::net::SocketAddr::new(ip.to_ipv6_mapped().into(), addr.port()),
        std::net::IpAddr::V6(_) => addr,
    };
    let mut places = vec![("/proc/net/tcp6", proc_address(mapped(client)), proc_address(mapped(listener)))];
    if client.is_ipv4() {
        places.insert(0, ("/proc/net/tcp", proc_address(client), proc_address(listener)));
    }
    places.into_iter().find_map(|(table, local, remote)| {
        let file = std::fs::File::open(table).ok()?;
        std::io::BufReader::new(file).lines().skip(1).map_while(Result::ok).find_map(|line| socket_owner(&line, &local, &remote))
    })
}

/// The uid owning the socket `local` → `remote` (both as [`proc_address`] writes them) and the
/// socket's inode, if this table line is that socket, in an open state and held (an inode).
fn socket_owner(line: &str, local: &str, remote: &str) -> Option<(u32, u64)> {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …
    let fields: Vec<&str> = line.split_whitespace().take(10).collect();
    let [_, line_local, line_remote, state, _, _, _, uid, _, inode] = fields[..] else { return None };
    let this_socket = line_local.eq_ignore_ascii_case(local) && line_remote.eq_ignore_ascii_case(remote);
    if !this_socket || !OPEN_STATES.contains(&state) || inode == "0" {
        return None;
    }
    Some((uid.parse().ok()?, inode.parse().ok()?))
}

/// An address as `/proc/net/tcp{,6}` writes it: the address's 32-bit words in host byte order,
/// in hex, then the port.
fn proc_address(addr: std::net::SocketAddr) -> String {
    let words: Vec<u32> = match addr.ip() {
        std::net::IpAddr::V4(ip) => vec![u32::from_ne_bytes(ip.octets())],
        std::net::IpAddr::V6(ip) => {
            let octets = ip.octets();
            octets.chunks(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
    };
    let mut text: String = words.iter().map(|word| format!("{word:08X}")).collect();
    let _ = write!(text, ":{:04X}", addr.port());
    text
}

/// The innermost `.service` or `.scope` in a process's cgroup path (cgroup v2, or the systemd
/// hierarchy of v1).
fn unit_of(cgroup: &str) -> Option<String> {
    let path = cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .or_else(|| cgroup.lines().find_map(|line| line.split_once(":name=systemd:").map(|(_, path)| path)))?;
    path.split('/').rev().find(|part| part.ends_with(".service") || part.ends_with(".scope")).map(str::to_owned)
}

impl Identity {
    pub fn unix(peer: UnixPeer) -> Identity {
        Identity { transport: "unix", peer: Some(peer), token: None, certificate: None }
    }

    /// A Unix-socket caller that also presented a token (the console's signed-in session).
    pub fn unix_with_token(peer: Option<UnixPeer>, token: Option<Vec<u8>>) -> Identity {
        Identity { transport: "unix", peer, token, certificate: None }
    }

    pub fn tcp(token: Option<Vec<u8>>) -> Identity {
        Identity { transport: "tcp", peer: None, token, certificate: None }
    }

    /// A TCP caller on loopback, identified by the kernel's socket table (see
    /// [`UnixPeer::of_loopback`]) when it could be, and by its bearer token.
    pub fn loopback(peer: Option<UnixPeer>, token: Option<Vec<u8>>) -> Identity {
        Identity { transport: "tcp", peer, token, certificate: None }
    }

    /// The bearer token of an `authorization` header value.
    pub fn bearer(value: Option<&str>) -> Option<Vec<u8>> {
        value
            .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
            .map(|token| token.trim().as_bytes().to_vec())
            .filter(|token| !token.is_empty())
    }

    /// The identity of a gRPC request: its connection's Unix peer (set by the listener) and the
    /// bearer token in its `authorization` metadata.
    pub fn of_request<T>(request: &tonic::Request<T>) -> Identity {
        let token = Identity::bearer(request.metadata().get("authorization").and_then(|value| value.to_str().ok()));
        if let Some(PeerInfo(peer)) = request.extensions().get::<PeerInfo>() {
            return Identity { transport: "unix", peer: peer.clone(), token, certificate: None };
        }
        if let Some(TlsPeerInfo(subject)) = request.extensions().get::<TlsPeerInfo>() {
            return Identity { transport: "tls", peer: None, token, certificate: subject.clone() };
        }
        Identity { transport: "tcp", peer: None, token, certificate: None }
    }

    pub fn peer(&self) -> Option<&UnixPeer> {
        self.peer.as_ref()
    }

    pub fn token(&self) -> Option<&[u8]> {
        self.token.as_deref()
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    pub fn certificate(&self) -> Option<&str> {
        self.certificate.as_deref()
    }

    /// For messages and the audit trail: never the token itself.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        match &self.peer {
            Some(peer) => {
                let _ = write!(text, "uid {} gid {}", peer.uid, peer.gid);
                if let Some(pid) = peer.pid {
                    let _ = write!(text, " pid {pid}");
                }
                if let Some(unit) = &peer.unit {
                    let _ = write!(text, " unit {unit}");
                }
            }
            None => match &self.certificate {
                Some(subject) => {
                    let _ = write!(text, "certificate {subject}");
                }
                None => text.push_str(self.transport),
            },
        }
        if self.token.is_some() {
            text.push_str(" with a bearer token");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_unit_is_read_from_the_cgroup_path() {
        assert_eq!(unit_of("0::/system.slice/research-bot.service\n").as_deref(), Some("research-bot.service"));
        assert_eq!(unit_of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/agent.service\n").as_deref(), Some("agent.service"));
        assert_eq!(unit_of("0::/user.slice/user-1000.slice/session-3.scope\n").as_deref(), Some("session-3.scope"));
        assert_eq!(unit_of("12:cpu:/x\n1:name=systemd:/system.slice/old.service\n").as_deref(), Some("old.service"));
        assert_eq!(unit_of("0::/\n"), None);
        assert_eq!(unit_of(""), None);
    }

    #[tokio::test]
    async fn a_loopback_tcp_peer_is_identified_by_the_socket_table() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, remote) = listener.accept().await.unwrap();
        assert_eq!(remote, client.local_addr().unwrap());
        let peer = UnixPeer::of_loopback(server.local_addr().unwrap(), remote).expect("found in /proc/net/tcp");
        assert_eq!(peer.uid, nix::unistd::getuid().as_raw());
        assert_eq!(
            proc_address("127.0.0.1:8080".parse().unwrap()),
            if cfg!(target_endian = "little") { "0100007F:1F90" } else { "7F000001:1F90" }
        );
    }

    #[tokio::test]
    async fn an_ipv6_socket_on_the_v4_mapped_address_is_found_and_names_its_process() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mapped = format!("[::ffff:127.0.0.1]:{}", listener.local_addr().unwrap().port());
        let client = tokio::net::TcpStream::connect(&mapped).await.unwrap();
        assert!(client.local_addr().unwrap().is_ipv6(), "an AF_INET6 socket");
        let (server, remote) = listener.accept().await.unwrap();
        let peer = UnixPeer::of_loopback(server.local_addr().unwrap(), remote).expect("found in /proc/net/tcp6");
        assert_eq!(peer.uid, nix::unistd::getuid().as_raw());
        assert!(!peer.server);
        // Its uid may be a server's (it is this daemon's own): so its process was looked up.
        assert_eq!(peer.pid, Some(i32::try_from(std::process::id()).unwrap()));
    }

    #[tokio::test]
    async fn a_client_that_closed_is_nobody_not_root() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, remote) = listener.accept().await.unwrap();
        // Its entry lingers (FIN_WAIT2, no inode, uid 0) after the client closed.
        drop(client);
        let peer = UnixPeer::of_loopback(server.local_addr().unwrap(), remote).expect("a loopback peer");
        assert!(peer.server && peer.uid == u32::MAX, "refused, and no uid at all: {peer:?}");
    }

    #[tokio::test]
    async fn a_connection_the_egress_proxy_made_for_a_server_is_the_servers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tunnel = crate::listen::machine::Tunnel::hold(socket.local_addr().unwrap());
        let _client = socket.connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, remote) = listener.accept().await.unwrap();
        // The socket is this process's, which no table can tell from a caller's: its port says.
        let peer = UnixPeer::of_loopback(server.local_addr().unwrap(), remote).expect("a peer on this machine");
        assert!(peer.server, "{peer:?}");
        drop(tunnel);
        let peer = UnixPeer::of_loopback(server.local_addr().unwrap(), remote).expect("a peer on this machine");
        assert!(!peer.server, "{peer:?}");
    }

    #[tokio::test]
    async fn a_peer_on_another_of_this_machines_addresses_is_looked_up_but_named_by_its_token_only() {
        let Some(own) = nix::ifaddrs::getifaddrs()
            .unwrap()
            .filter_map(|interface| interface.address?.as_sockaddr_in().map(|v4| std::net::IpAddr::V4(v4.ip())))
            .find(|address| !address.is_loopback())
        else {
            return;
        };
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::net::TcpStream::connect((own, port)).await.unwrap();
        let (server, remote) = listener.accept().await.unwrap();
        assert_eq!((remote, remote.ip()), (client.local_addr().unwrap(), own));
        // This process, not a server: no identity from the kernel on this address.
        assert_eq!(UnixPeer::of_loopback(server.local_addr().unwrap(), remote), None);
        // A client gone from the table cannot be told from a server's process: refused.
        drop(client);
        let peer = UnixPeer::of_loopback(server.local_addr().unwrap(), remote);
        assert!(peer.is_some_and(|peer| peer.server), "refused");
        // Elsewhere, nothing is looked up.
        assert_eq!(UnixPeer::of_loopback(server.local_addr().unwrap(), "203.0.113.9:4000".parse().unwrap()), None);
    }

    #[test]
    fn only_an_established_open_socket_names_its_owner() {
        let line = |state: &str, inode: &str| {
            format!(
                "   3: 0100007F:A1B2 0100007F:1F90 {state} 00000000:00000000 00:00000000 00000000  1000        0 {inode} 1 0000 20 4 30 10 -1"
            )
        };
        let (local, remote) = ("0100007F:A1B2", "0100007F:1F90");
        assert_eq!(socket_owner(&line("01", "48213"), local, remote), Some((1000, 48213)));
        assert_eq!(socket_owner(&line("01", "0"), local, remote), None, "an orphan");
        assert_eq!(socket_owner(&line("05", "48213"), local, remote), Some((1000, 48213)), "FIN_WAIT2, still held");
        assert_eq!(socket_owner(&line("06", "48213"), local, remote), None, "TIME_WAIT");
        assert_eq!(socket_owner(&line("01", "48213"), remote, local), None, "the other end");
        assert_eq!(socket_owner("   3: 0100007F:A1B2 0100007F:1F90 01", local, remote), None, "a short line");
    }

    #[tokio::test]
    async fn this_process_is_identified_by_the_kernel() {
        let (a, _b) = tokio::net::UnixStream::pair().unwrap();
        let peer = UnixPeer::of(&a).unwrap();
        assert_eq!(peer.uid, nix::unistd::getuid().as_raw());
        assert_eq!(peer.pid, Some(i32::try_from(std::process::id()).unwrap()));
        assert!(Identity::unix(peer).describe().starts_with("uid "));
    }
}
