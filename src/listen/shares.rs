//! Per-peer shares of what a door holds for its callers (connections, event streams, sign-in
//! attempts): an outsider that takes all it may has taken its own share, never the others'.
//! A peer is whoever the door can tell apart: the kernel's uid for a connection, the agent
//! entry for an admitted caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most `per_peer` held at once by any one peer.
#[derive(Debug)]
pub struct Shares {
    per_peer: usize,
    held: Mutex<HashMap<String, usize>>,
}

/// One unit of a peer's share, given back when dropped.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    peer: String,
}

impl Shares {
    pub fn new(per_peer: usize) -> Arc<Shares> {
        Arc::new(Shares { per_peer, held: Mutex::new(HashMap::new()) })
    }

    /// A unit of `peer`'s share, or `None` when it holds all of it.
    pub fn take(self: &Arc<Self>, peer: &str) -> Option<Share> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(peer.to_owned()).or_insert(0);
        if *count >= self.per_peer {
            return None;
        }
        *count += 1;
        Some(Share { shares: self.clone(), peer: peer.to_owned() })
    }

    /// How many one peer may hold.
    pub fn per_peer(&self) -> usize {
        self.per_peer
    }

    /// What `peer` holds now.
    pub fn held_by(&self, peer: &str) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).get(peer).copied().unwrap_or(0)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

/// At most `per_second` attempts a second from any one peer (sign-ins): a peer that keeps
/// trying spends its own attempts only.
#[derive(Debug)]
pub struct PeerRate {
    per_second: u32,
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

/// Peers remembered at once; past it, windows that ended are forgotten, and if none has, the
/// attempt is refused (a flood of distinct peers cannot grow the table).
const MAX_PEERS: usize = 4096;
const WINDOW: Duration = Duration::from_secs(1);

impl PeerRate {
    pub fn new(per_second: u32) -> PeerRate {
        PeerRate { per_second, windows: Mutex::new(HashMap::new()) }
    }

    /// Whether `peer` may try once more now.
    pub fn admit(&self, peer: &str) -> bool {
        let now = Instant::now();
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        if windows.len() >= MAX_PEERS && !windows.contains_key(peer) {
            windows.retain(|_, (started, _)| now.duration_since(*started) < WINDOW);
            if windows.len() >= MAX_PEERS {
                return false;
            }
        }
        let (started, used) = windows.entry(peer.to_owned()).or_insert((now, 0));
        if now.duration_since(*started) >= WINDOW {
            (*started, *used) = (now, 0);
        }
        if *used >= self.per_second {
            return false;
        }
        *used += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_at_its_share_is_refused_and_the_others_are_not() {
        let shares = Shares::new(2);
        let (a1, _a2) = (shares.take("a").unwrap(), shares.take("a").unwrap());
        assert!(shares.take("a").is_none());
        assert!(shares.take("b").is_some(), "another peer's share is its own");
        drop(a1);
        assert_eq!(shares.held_by("a"), 1);
        assert!(shares.take("a").is_some(), "a unit given back is there to take again");
    }

    #[test]
    fn one_peers_attempts_leave_the_others_theirs() {
        let rate = PeerRate::new(3);
        assert_eq!((0..10).filter(|_| rate.admit("stranger")).count(), 3);
        assert!(rate.admit("operator"));
    }
}
