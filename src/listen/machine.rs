//! This machine, as the doors and the servers' egress proxy must know it. A connection whose
//! other end is on any address of this machine comes from this machine, whatever interface it
//! uses: a server's process may be it, so it is never a caller; and an allowed host name that
//! leads to one of these addresses leads back into the daemon's machine.
//!
//! The addresses: the loopback ranges, the unspecified ones (a connection to `0.0.0.0` or `::`
//! reaches this machine too), and every interface's (`getifaddrs`), each compared in its
//! canonical form (`::ffff:192.0.2.2` is `192.0.2.2`). Interfaces come and go (DHCP, VPNs,
//! containers), so the list is read again after the kernel says an address changed: a route
//! netlink socket subscribed to address changes is drained, without blocking, at each use. That
//! sees a new address from the moment it exists, with no thread of its own and no `getifaddrs`
//! per connection (a remote peer on a public listener costs one `recv`). Where the kernel
//! gives no such socket, the list is read again once it is a second old.
//!
//! And the tunnels: the egress proxy connects from the daemon's own sockets on a server's
//! behalf, so the kernel's tables name the daemon, not the server, as such a connection's
//! owner. The proxy holds a [`Tunnel`] for each connection's local port, and a peer on this
//! machine from such a port is the server's.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How old the list may grow where no netlink socket says when it changed.
const UNWATCHED_AGE: Duration = Duration::from_secs(1);
/// `RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR`: an address added or removed, either family.
const ADDRESS_GROUPS: u32 = 0x10 | 0x100;
/// Notifications read at one use, at most (the rest wait for the next; the list is read anyway).
const MAX_DRAINED: usize = 1024;

/// The interfaces' addresses as last read.
struct Known {
    /// `None` when they could not be read: then every address may be this machine's.
    addresses: Option<HashSet<IpAddr>>,
    read_at: Instant,
    /// The kernel's word that an address changed; `None` where it cannot be had.
    watch: Option<OwnedFd>,
}

static KNOWN: Mutex<Option<Known>> = Mutex::new(None);

/// Ports the egress proxy connects from, each with how many of its sockets hold it (keyed by
/// family: an IPv4 and an IPv6 socket may hold the same number).
static TUNNELS: Mutex<Option<HashMap<(bool, u16), usize>>> = Mutex::new(None);

/// Whether `ip` is an address of this machine: loopback, unspecified or an interface's. Reads
/// the interfaces when they changed (see the module's comment); one that cannot be read
/// counts as this machine's, which refuses rather than trusts.
pub fn is_this_machine(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let mut known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    let current = match known.take() {
        Some(mut known) => match known.stale() {
            false => known,
            true => Known::read(known.watch),
        },
        // The watch is opened before the list is read, so that no change falls between.
        None => Known::read(watch()),
    };
    let ours = current.addresses.as_ref().is_none_or(|addresses| addresses.contains(&ip));
    *known = Some(current);
    ours
}

/// Whether `peer`, an address of this machine, is the local end of a connection the egress
/// proxy made for a server.
pub fn is_a_tunnel(peer: SocketAddr) -> bool {
    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
    TUNNELS.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|held| held.contains_key(&key(peer)))
}

/// A local port the egress proxy connects from for a server, held until the connection ends.
#[derive(Debug)]
pub struct Tunnel {
    key: (bool, u16),
}

impl Tunnel {
    /// Holds `local` (the proxy's bound, not yet connected socket): from now on a connection
    /// from it to any of this machine's listeners is the server's.
    #[must_use]
    pub fn hold(local: SocketAddr) -> Tunnel {
        let key = key(local);
        let mut held = TUNNELS.lock().unwrap_or_else(PoisonError::into_inner);
        *held.get_or_insert_with(HashMap::new).entry(key).or_insert(0) += 1;
        Tunnel { key }
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        let mut held = TUNNELS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = held.as_mut()
            && let Some(count) = held.get_mut(&self.key)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

fn key(address: SocketAddr) -> (bool, u16) {
    (address.ip().to_canonical().is_ipv6(), address.port())
}

impl Known {
    fn read(watch: Option<OwnedFd>) -> Known {
        Known { addresses: interface_addresses(), read_at: Instant::now(), watch }
    }

    /// Whether the list may be out of date: never read, the kernel said an address changed (or
    /// lost some of what it said), or, with no word from it, a second passed.
    fn stale(&mut self) -> bool {
        if self.addresses.is_none() {
            return true;
        }
        match &self.watch {
            Some(watch) => drained(watch).unwrap_or_else(|_| {
                self.watch = None;
                true
            }),
            None => self.read_at.elapsed() >= UNWATCHED_AGE,
        }
    }
}

/// Every interface's address, canonical.
fn interface_addresses() -> Option<HashSet<IpAddr>> {
    let interfaces = nix::ifaddrs::getifaddrs().ok()?;
    let ip = |address: nix::sys::socket::SockaddrStorage| match (address.as_sockaddr_in(), address.as_sockaddr_in6()) {
        (Some(v4), _) => Some(IpAddr::V4(v4.ip())),
        (None, Some(v6)) => Some(IpAddr::V6(v6.ip())),
        (None, None) => None,
    };
    Some(interfaces.filter_map(|interface| interface.address).filter_map(ip).map(|address| address.to_canonical()).collect())
}

/// A route netlink socket told of every address added or removed, which never blocks.
fn watch() -> Option<OwnedFd> {
    use nix::sys::socket::{AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, socket};
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let socket = socket(AddressFamily::Netlink, SockType::Raw, flags, SockProtocol::NetlinkRoute).ok()?;
    bind(socket.as_raw_fd(), &NetlinkAddr::new(0, ADDRESS_GROUPS)).ok()?;
    Some(socket)
}

/// Whether the watch said anything since it was last drained (a lost notification, `ENOBUFS`,
/// says so too); an error if it no longer works.
fn drained(watch: &OwnedFd) -> nix::Result<bool> {
    use nix::errno::Errno;
    let mut buffer = [0u8; 8192];
    let mut changed = false;
    for _ in 0..MAX_DRAINED {
        match nix::sys::socket::recv(watch.as_raw_fd(), &mut buffer, nix::sys::socket::MsgFlags::MSG_DONTWAIT) {
            Ok(_) | Err(Errno::ENOBUFS) => changed = true,
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return Ok(changed),
            Err(error) => return Err(error),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_address_of_this_machine_in_every_form_is_this_machines() {
        let interfaces: Vec<IpAddr> = interface_addresses().expect("getifaddrs").into_iter().collect();
        assert!(!interfaces.is_empty(), "at least loopback");
        for address in interfaces {
            assert!(is_this_machine(address), "{address}");
            if let IpAddr::V4(v4) = address {
                assert!(is_this_machine(IpAddr::V6(v4.to_ipv6_mapped())), "{address} v4-mapped");
            }
        }
        for address in ["127.0.0.1", "127.3.2.1", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"] {
            assert!(is_this_machine(address.parse().unwrap()), "{address}");
        }
        // Documentation ranges no test machine holds.
        for address in ["203.0.113.9", "2001:db8::9", "::ffff:203.0.113.9"] {
            assert!(!is_this_machine(address.parse().unwrap()), "{address}");
        }
    }

    #[test]
    fn a_tunnels_port_is_held_while_any_socket_holds_it() {
        let (v4, v6): (SocketAddr, SocketAddr) = ("0.0.0.0:61111".parse().unwrap(), "[::]:61111".parse().unwrap());
        let peer: SocketAddr = "192.0.2.7:61111".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:61111".parse().unwrap();
        assert!(!is_a_tunnel(peer));
        let first = Tunnel::hold(v4);
        let second = Tunnel::hold(v4);
        assert!(is_a_tunnel(peer) && is_a_tunnel(mapped), "in either form");
        assert!(!is_a_tunnel("[2001:db8::7]:61111".parse().unwrap()), "the other family's port is another");
        drop(first);
        assert!(is_a_tunnel(peer), "the second still holds it");
        drop(second);
        assert!(!is_a_tunnel(peer));
        let six = Tunnel::hold(v6);
        assert!(is_a_tunnel("[2001:db8::7]:61111".parse().unwrap()) && !is_a_tunnel(peer));
        drop(six);
    }
}
