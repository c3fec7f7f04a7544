//! 2025-era Streamable HTTP sessions: minted by `initialize`, bound to the caller that opened
//! them, bounded in number, ended by DELETE or after an hour unused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use super::{Origin, Profile, View};
use crate::door::Door;
use crate::door::model::random_token;
use crate::door::observe::{SessionLife, session_life};
use crate::listen::tables as share;

/// Sessions open at once; past this, the least recently used session of the caller holding
/// the most makes room.
const MAX_SESSIONS: usize = 4096;
/// Sessions one caller (principal) may hold; past this, its own least recently used one makes
/// room. One caller can never take the table from the others.
const SESSIONS_PER_CALLER: usize = MAX_SESSIONS / 16;
/// A session unused this long ends.
const IDLE: Duration = Duration::from_secs(3600);
/// How often idle sessions are looked for.
const SWEEP: Duration = Duration::from_secs(60);
/// Calls one session may have in flight.
const MAX_IN_FLIGHT: usize = 256;

#[derive(Default)]
pub(super) struct Sessions {
    open: Mutex<HashMap<String, Arc<Session>>>,
}

pub(super) struct Session {
    id: String,
    /// Who opened it: the caller's principal (its agent entry and the proof it gave: a token, a
    /// certificate, the kernel's uid), whose share of the table it uses and who alone may use
    /// it. Not the pid: a process that forks shares its sockets, and the kernel's tables then
    /// name whichever holder is found first.
    owner: String,
    profile: Option<Arc<Profile>>,
    last_used: Mutex<Instant>,
    /// Calls running, by their request id's JSON text, for `notifications/cancelled`.
    in_flight: Mutex<HashMap<Box<str>, CancellationToken>>,
    /// Cancelled when the session ends.
    ended: CancellationToken,
    /// The open GET stream's token: a new GET replaces the old stream (a message is never sent
    /// on two streams).
    stream: Mutex<CancellationToken>,
    /// Questions to the client (on a call's SSE response) and its answers (POSTed responses).
    pub(super) client: Arc<super::asking::ClientLink>,
    /// Its id and agreed version, for its requests' spans.
    origin: Arc<Origin>,
    /// Recorded in `mcp.server.session.duration` when the last reference goes: after it ended
    /// and its last request finished.
    _life: SessionLife,
}

impl Sessions {
    /// A new session for `view`'s caller, making room in its share (or, in a full table, in
    /// the biggest holder's); `None` only when no session id can be made.
    pub(super) fn open(&self, view: &View, version: &str, door: &Door) -> Option<Arc<Session>> {
        let id = session_id()?;
        let origin = Origin { wire: view.origin.wire.clone(), session: Some(Arc::from(id.as_str())), version: Some(Arc::from(version)) };
        let life = session_life(door, version, &origin.wire);
        let session = Arc::new(Session {
            id: id.clone(),
            owner: view.caller.principal(),
            profile: view.profile.clone(),
            last_used: Mutex::new(Instant::now()),
            in_flight: Mutex::default(),
            ended: CancellationToken::new(),
            stream: Mutex::new(CancellationToken::new()),
            client: Arc::default(),
            origin: Arc::new(origin),
            _life: life,
        });
        let mut open = self.lock();
        let entries = open.values().map(|s| (s.id.as_str(), s.owner.as_str(), *s.last_used.lock().unwrap_or_else(PoisonError::into_inner)));
        if let Some(evicted) = share::make_room(entries, &session.owner, SESSIONS_PER_CALLER, MAX_SESSIONS).map(str::to_owned)
            && let Some(evicted) = open.remove(&evicted)
        {
            evicted.ended.cancel();
        }
        open.insert(id, session.clone());
        Some(session)
    }

    /// The session `id`, if it exists and belongs to `view`'s caller and profile.
    pub(super) fn get(&self, id: &str, view: &View) -> Option<Arc<Session>> {
        let session = self.lock().get(id).cloned()?;
        let same_profile = session.profile.as_ref().map(|p| &p.name) == view.profile.as_ref().map(|p| &p.name);
        if session.owner != view.caller.principal() || !same_profile {
            return None;
        }
        *session.last_used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        Some(session)
    }

    /// Ends the session `id` if it belongs to `view`'s caller.
    pub(super) fn close(&self, id: &str, view: &View) -> bool {
        let Some(session) = self.get(id, view) else { return false };
        self.lock().remove(&session.id);
        session.ended.cancel();
        true
    }

    /// Ends idle sessions until `cancel`.
    pub(super) async fn expire(self: Arc<Sessions>, cancel: CancellationToken) {
        let mut sweeps = tokio::time::interval(SWEEP);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = sweeps.tick() => {
                    self.lock().retain(|_, session| {
                        let keep = session.idle_for() < IDLE;
                        if !keep {
                            session.ended.cancel();
                        }
                        keep
                    });
                }
            }
        }
        for session in self.lock().drain().map(|(_, session)| session) {
            session.ended.cancel();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Session {
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    pub(super) fn origin(&self) -> Arc<Origin> {
        self.origin.clone()
    }

    pub(super) fn profile(&self) -> Option<Arc<Profile>> {
        self.profile.clone()
    }

    pub(super) fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Registers a call; its token fires on `notifications/cancelled` or when the session ends.
    /// `None` when the session has too many calls in flight.
    pub(super) fn start(&self, id: &RawValue) -> Option<CancellationToken> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if in_flight.len() >= MAX_IN_FLIGHT {
            return None;
        }
        let token = self.ended.child_token();
        in_flight.insert(id.get().into(), token.clone());
        Some(token)
    }

    pub(super) fn finish(&self, id: &str) {
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// `notifications/cancelled` for one of this session's calls.
    pub(super) fn cancel(&self, params: Option<&RawValue>) {
        let Some(id) = super::message::cancelled_request(params) else { return };
        if let Some(token) = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner).remove(id) {
            token.cancel();
        }
    }

    /// A token for a new GET stream; the previous stream, if any, ends.
    pub(super) fn take_stream(&self) -> CancellationToken {
        let fresh = self.ended.child_token();
        let previous = std::mem::replace(&mut *self.stream.lock().unwrap_or_else(PoisonError::into_inner), fresh.clone());
        previous.cancel();
        fresh
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().unwrap_or_else(PoisonError::into_inner).elapsed()
    }
}

fn session_id() -> Option<String> {
    random_token()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_random_visible_ascii() {
        let (a, b) = (session_id().unwrap(), session_id().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
    }
}
