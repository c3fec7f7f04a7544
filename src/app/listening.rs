//! The daemon's listeners, per front door, as reloads change them. Each listener is served with
//! its own cancellation token (a child of the API's), so that a reload closes one without
//! touching the others, and opens new ones on the services already running: one set of watch
//! limits, sessions and health for all of a door's listeners, old and new.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ListenAddr, Listener};
use crate::console::{self, Console};
use crate::door::reload::{NotApplied, ReloadReport};
use crate::endpoint::{self, Endpoint};
use crate::listen::{BoundAddr, SocketFile};

/// How long a reload waits for an address it just closed to be free again, and how often it
/// tries: the closed listener's task drops its socket as soon as it runs.
const REBIND_WAIT: Duration = Duration::from_secs(2);
const REBIND_STEP: Duration = Duration::from_millis(20);

/// A front door that listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Front {
    Grpc,
    Mcp,
    Console,
}

impl Front {
    /// The setting as the configuration file names it.
    fn setting(self) -> &'static str {
        match self {
            Front::Grpc => "[grpc] listen",
            Front::Mcp => "[mcp] listen",
            Front::Console => "[console] listen",
        }
    }
}

/// One listener being served: as configured, how to close it, and its socket file.
struct Served {
    config: Listener,
    stop: CancellationToken,
    socket: Option<SocketFile>,
}

/// One door's listeners. `addrs` is kept beside `served`, index for index.
#[derive(Default)]
pub(super) struct Listeners {
    served: Vec<Served>,
    addrs: Vec<BoundAddr>,
}

impl Listeners {
    pub(super) fn addrs(&self) -> &[BoundAddr] {
        &self.addrs
    }

    /// The listeners as configured, in the order served.
    pub(super) fn configured(&self) -> Vec<Listener> {
        self.served.iter().map(|served| served.config.clone()).collect()
    }

    fn push(&mut self, config: Listener, addr: BoundAddr, stop: CancellationToken) {
        let socket = match &addr {
            BoundAddr::Unix(path) => Some(SocketFile::bound(path)),
            BoundAddr::Tcp(_) => None,
        };
        self.served.push(Served { config, stop, socket });
        self.addrs.push(addr);
    }

    /// Stops accepting on a listener (its connections finish) and removes its socket file at
    /// once, so that the path is free for whatever this reload opens there.
    fn close(&mut self, index: usize) -> BoundAddr {
        let served = self.served.remove(index);
        served.stop.cancel();
        if let Some(socket) = &served.socket {
            socket.remove();
        }
        self.addrs.remove(index)
    }
}

/// What a reload changes in one door's listeners, by address as configured.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Changes {
    /// Wanted, at an address not served now.
    pub open: Vec<Listener>,
    /// Served now (their indices), at an address no longer wanted.
    pub close: Vec<usize>,
    /// Wanted at an address served now, with other settings (socket access, TLS).
    pub in_place: Vec<Listener>,
}

/// Compares the listeners served with those wanted, by the address as configured (port 0 is
/// "any port", the same address each time).
pub(super) fn changes(served: &[Listener], wanted: &[Listener]) -> Changes {
    let mut changes = Changes::default();
    for listener in wanted {
        match served.iter().find(|old| old.addr == listener.addr) {
            None => changes.open.push(listener.clone()),
            Some(old) if old != listener => changes.in_place.push(listener.clone()),
            Some(_) => {}
        }
    }
    for (index, old) in served.iter().enumerate() {
        if !wanted.iter().any(|listener| listener.addr == old.addr) {
            changes.close.push(index);
        }
    }
    changes
}

/// How each door serves a listener: the services built at start.
pub(super) struct Fronts {
    pub api: crate::api::Api,
    pub endpoint: Arc<Endpoint>,
    pub console: Arc<Console>,
    pub tracker: TaskTracker,
    /// The API's token: every listener's is a child of it, so a shutdown closes them all.
    pub cancel: CancellationToken,
    pub grpc: Listeners,
    pub mcp: Listeners,
    pub consoles: Listeners,
}

impl Fronts {
    pub(super) fn listeners(&self, front: Front) -> &Listeners {
        match front {
            Front::Grpc => &self.grpc,
            Front::Mcp => &self.mcp,
            Front::Console => &self.consoles,
        }
    }

    fn listeners_mut(&mut self, front: Front) -> &mut Listeners {
        match front {
            Front::Grpc => &mut self.grpc,
            Front::Mcp => &mut self.mcp,
            Front::Console => &mut self.consoles,
        }
    }

    /// Serves `front` on listeners already bound (at start), each closable on its own.
    pub(super) fn serve_bound(&mut self, front: Front, configs: &[Listener], addrs: Vec<BoundAddr>, bound: Bound) {
        let pairs = configs.iter().cloned().zip(addrs).zip(bound.each());
        for ((config, addr), one) in pairs {
            let stop = self.cancel.child_token();
            self.serve_one(one, &stop);
            self.listeners_mut(front).push(config, addr, stop);
        }
    }

    fn serve_one(&self, bound: Bound, stop: &CancellationToken) {
        match bound {
            Bound::Grpc(listeners) => self.api.serve(listeners, &self.tracker, stop.clone()),
            Bound::Mcp(listeners) => endpoint::serve(listeners, self.endpoint.clone(), &self.tracker, stop.clone()),
            Bound::Console(listeners) => console::serve(listeners, self.console.clone(), &self.tracker, stop),
        }
    }

    /// Closes `front`'s listeners at addresses `wanted` no longer names, and names in `report`
    /// those whose settings changed in place. Returns the addresses closed, as bound.
    pub(super) fn close_unwanted(&mut self, front: Front, wanted: &[Listener], report: &mut ReloadReport) -> Vec<BoundAddr> {
        let served = self.listeners(front).configured();
        let Changes { mut close, in_place, .. } = changes(&served, wanted);
        // From the last, so that the indices stay true.
        close.sort_unstable();
        let mut closed = Vec::with_capacity(close.len());
        for index in close.into_iter().rev() {
            let addr = self.listeners_mut(front).close(index);
            report.applied.push(format!("{} {}: closed", front.setting(), addr));
            closed.push(addr);
        }
        for listener in in_place {
            report.not_applied.push(NotApplied {
                setting: format!("{} {}", front.setting(), listener.addr),
                why: "its socket access or TLS changed; a listener's settings change in place at the next restart \
                      (or remove it, reload, add it back, reload)"
                    .to_owned(),
            });
        }
        closed
    }

    /// Opens `front`'s listeners at addresses `wanted` names and it does not serve yet. A TCP
    /// address this reload just closed (another door's, say; a port it was given for `:0`) may
    /// take a moment to be free.
    pub(super) async fn open_wanted(&mut self, front: Front, wanted: &[Listener], closed: &[BoundAddr], report: &mut ReloadReport) {
        let served = self.listeners(front).configured();
        for listener in changes(&served, wanted).open {
            let mut bound = bind(front, &listener).await;
            let mut waited = Duration::ZERO;
            let just_closed = closed.iter().any(|addr| match (addr, &listener.addr) {
                (BoundAddr::Tcp(bound), ListenAddr::Tcp(asked)) => bound == asked,
                (BoundAddr::Unix(bound), ListenAddr::Unix(asked)) => bound == asked,
                _ => false,
            });
            while bound.is_err() && just_closed && waited < REBIND_WAIT {
                tokio::time::sleep(REBIND_STEP).await;
                waited = waited.saturating_add(REBIND_STEP);
                bound = bind(front, &listener).await;
            }
            match bound {
                Ok((addr, bound)) => {
                    let stop = self.cancel.child_token();
                    self.serve_one(bound, &stop);
                    report.applied.push(format!("{} {}: listening", front.setting(), addr));
                    tracing::info!(?addr, front = front.setting(), "listening, opened by a reload");
                    self.listeners_mut(front).push(listener, addr, stop);
                }
                Err(problem) => report.not_applied.push(NotApplied {
                    setting: format!("{} {}", front.setting(), listener.addr),
                    why: format!("cannot listen there: {problem}"),
                }),
            }
        }
    }
}

/// Listeners of one door, bound and not yet served.
pub(super) enum Bound {
    Grpc(crate::api::BoundListeners),
    Mcp(endpoint::BoundListeners),
    Console(console::BoundListeners),
}

impl Bound {
    fn each(self) -> Vec<Bound> {
        match self {
            Bound::Grpc(listeners) => listeners.each().map(Bound::Grpc).collect(),
            Bound::Mcp(listeners) => listeners.each().map(Bound::Mcp).collect(),
            Bound::Console(listeners) => listeners.each().map(Bound::Console).collect(),
        }
    }
}

/// Why a reload could not open a listener.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenError {
    #[error(transparent)]
    Api(#[from] crate::api::ApiStartError),
    #[error(transparent)]
    Bind(#[from] crate::listen::BindError),
    #[error("nothing was bound")]
    Nothing,
}

/// Binds one listener for `front`.
async fn bind(front: Front, listener: &Listener) -> Result<(BoundAddr, Bound), OpenError> {
    let one = std::slice::from_ref(listener);
    let (addrs, bound) = match front {
        Front::Grpc => crate::api::bind(one).await.map(|(addrs, bound)| (addrs, Bound::Grpc(bound)))?,
        Front::Mcp => endpoint::bind(one).await.map(|(addrs, bound)| (addrs, Bound::Mcp(bound)))?,
        Front::Console => console::bind(one).await.map(|(addrs, bound)| (addrs, Bound::Console(bound)))?,
    };
    let addr = addrs.into_iter().next().ok_or(OpenError::Nothing)?;
    Ok((addr, bound))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SocketAccess;

    fn tcp(addr: &str) -> Listener {
        Listener { addr: ListenAddr::Tcp(addr.parse().unwrap()), socket: SocketAccess::default(), tls: None }
    }

    #[test]
    fn a_reload_opens_new_addresses_closes_old_ones_and_names_changed_settings() {
        let served = [tcp("127.0.0.1:1"), tcp("127.0.0.1:2"), tcp("127.0.0.1:3")];
        let mut changed = tcp("127.0.0.1:2");
        changed.tls = Some(crate::config::TlsFiles { cert: "/c".into(), key: "/k".into(), client_ca: None });
        let wanted = [tcp("127.0.0.1:3"), changed.clone(), tcp("127.0.0.1:4")];
        let found = changes(&served, &wanted);
        assert_eq!(found, Changes { open: vec![tcp("127.0.0.1:4")], close: vec![0], in_place: vec![changed] });
        assert_eq!(changes(&served, &served), Changes::default());
        assert_eq!(changes(&[], &[]), Changes::default());
    }
}
