//! The catalog's change events as one caller may see them: every change after a revision, in
//! order, judged under the policy in force when it is read (a reload applies at once), and a
//! resync instead of a silent gap when the caller fell behind the registry's event log. What
//! the gRPC `WatchCatalog` stream sends, and whatever else follows the catalog event by event.
//! Between them, each new approval request the caller may see (an operator every one, an
//! agent its own), as it is asked: a person learns at once that a call waits for them.

use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use super::{Door, Presentation, held_now, server_visible, shows_name};
use crate::access::{Caller, Identity, Refusal};
use crate::catalog::integrity::Hold;
use crate::registry::{CatalogChange, CatalogEvent, CatalogSnapshot, Lagged};
use crate::store::call_approvals::ApprovalRecord;

/// One step of a caller's change stream.
#[derive(Debug)]
pub enum Seen {
    Event(CatalogEvent),
    /// Changes after the cursor are no longer kept: list again, then follow from `revision`.
    Resync {
        revision: u64,
    },
    /// A call now waits for a person's approval (the catalog is at `revision`).
    Approval {
        revision: u64,
        record: Box<ApprovalRecord>,
    },
}

/// A caller following the catalog. Holds no lock between steps; owns its cursor.
pub struct Changes {
    door: Door,
    identity: Identity,
    /// Only these servers' changes (empty: every server's).
    servers: Vec<String>,
    revisions: watch::Receiver<u64>,
    /// New approval requests (any caller's: each is judged as it comes).
    requests: broadcast::Receiver<ApprovalRecord>,
    cursor: u64,
    /// Events read but not yet given out, oldest first, and the caller and catalog they are
    /// judged by (from when they were read); `None` before the first read.
    ready: std::collections::VecDeque<CatalogEvent>,
    judge: Option<(Caller, Arc<CatalogSnapshot>)>,
}

impl Changes {
    /// Follows the catalog after `from_revision` (0: from now).
    #[must_use]
    pub fn new(door: &Door, identity: Identity, from_revision: u64, servers: Vec<String>) -> Changes {
        let revisions = door.registry.subscribe();
        let cursor = if from_revision == 0 { door.registry.snapshot().revision } else { from_revision };
        let requests = door.approvals.requests();
        Changes {
            door: door.clone(),
            identity,
            servers,
            revisions,
            requests,
            cursor,
            ready: std::collections::VecDeque::new(),
            judge: None,
        }
    }

    /// The next change this caller may see, waiting for one; `None` when the registry is gone.
    ///
    /// # Errors
    /// The caller is no longer admitted (a reload removed its entry): the stream ends.
    pub async fn next(&mut self) -> Option<Result<Seen, Refusal>> {
        loop {
            if let Some((caller, snapshot)) = &self.judge {
                while let Some(event) = self.ready.pop_front() {
                    if !self.servers.is_empty() && !self.servers.iter().any(|server| **server == **event.change.server()) {
                        continue;
                    }
                    if let Some(event) = visible_event(caller, snapshot, event) {
                        return Some(Ok(Seen::Event(event)));
                    }
                }
                tokio::select! {
                    changed = self.revisions.changed() => if changed.is_err() { return None },
                    requested = self.requests.recv() => match requested {
                        Ok(record) if shows_request(&self.servers, caller, &record) => {
                            return Some(Ok(Seen::Approval { revision: self.cursor, record: Box::new(record) }));
                        }
                        // Missed ones are in the store's list; the next is shown.
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                }
            }
            self.revisions.borrow_and_update();
            let events = self.door.registry.events_after(self.cursor);
            // The policy in force now decides, checked at every change (a reload that removes
            // the caller ends its stream at once); judged after the events were taken, so that a
            // reload's own events (it replaces the policy first) are never shown under the
            // policy it replaced.
            let caller = match self.door.admit(self.identity.clone()) {
                Ok(caller) => caller,
                Err(refusal) => return Some(Err(refusal)),
            };
            self.judge = Some((caller, self.door.registry.snapshot()));
            match events {
                Ok(events) => {
                    self.cursor = events.iter().map(|event| event.revision).fold(self.cursor, u64::max);
                    self.ready.extend(events);
                }
                Err(Lagged) => {
                    self.cursor = self.door.registry.snapshot().revision;
                    return Some(Ok(Seen::Resync { revision: self.cursor }));
                }
            }
        }
    }
}

/// Whether `caller`, watching `servers` (empty: all), is shown request `record`: an operator
/// every one, an agent its own entry's.
fn shows_request(servers: &[String], caller: &Caller, record: &ApprovalRecord) -> bool {
    let server = crate::catalog::names::server_of(&record.qualified_name).unwrap_or_default();
    (caller.agent.admin || *caller.agent.name == *record.agent) && (servers.is_empty() || servers.iter().any(|watched| watched == server))
}

/// `event` as this caller may see it ([`shows_name`]): tool names it may not use or may not see
/// (held) removed, and nothing at all about servers it may not know of. To an agent, a tool
/// that changed and is held now has gone: it is reported removed. An agent learns that a tool
/// became held only when it could have seen an approved version of it before.
fn visible_event(caller: &Caller, snapshot: &CatalogSnapshot, event: CatalogEvent) -> Option<CatalogEvent> {
    let visible_server = |server: &str| snapshot.servers.get(server).is_some_and(|view| server_visible(caller, view));
    let shows = |name: &String| shows_name(caller, snapshot, name, Presentation::WithState);
    let may_use = |name: &String| super::may_use(caller, snapshot, &crate::calls::ToolRef::Qualified(name.clone()));
    let change = match event.change {
        CatalogChange::GenerationPublished { server, generation, previous, added, mut removed, changed } => {
            let added: Vec<String> = added.into_iter().filter(shows).collect();
            let (changed, hidden): (Vec<String>, Vec<String>) = changed.into_iter().filter(may_use).partition(shows);
            removed.retain(may_use);
            removed.extend(hidden);
            if !caller.agent.admin && added.is_empty() && removed.is_empty() && changed.is_empty() {
                return None;
            }
            CatalogChange::GenerationPublished { server, generation, previous, added, removed, changed }
        }
        CatalogChange::IntegrityChanged { server, held, released } => {
            let held: Vec<String> =
                held.into_iter().filter(|name| may_use(name) && (caller.agent.admin || was_approved(snapshot, name))).collect();
            let released: Vec<String> = released.into_iter().filter(shows).collect();
            if held.is_empty() && released.is_empty() {
                return None;
            }
            CatalogChange::IntegrityChanged { server, held, released }
        }
        CatalogChange::StateChanged { ref server, .. } | CatalogChange::ConfigChanged { ref server, .. } if !visible_server(server) => {
            return None;
        }
        other => other,
    };
    Some(CatalogEvent { revision: event.revision, change })
}

/// Whether the held tool `qualified` had an approved (or pinned) definition an agent may have
/// seen: held because it changed, not because it is new.
fn was_approved(snapshot: &CatalogSnapshot, qualified: &str) -> bool {
    held_now(snapshot, qualified).is_some_and(|hold| matches!(hold, Hold::Changed | Hold::PinMismatch))
}
