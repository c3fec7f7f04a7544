//! Browser sessions: a random id in an `HttpOnly; SameSite=Strict` cookie, the CSRF token its
//! forms carry, and the bearer token a caller signed in with (never sent back to the browser).
//! In memory only: a restarted daemon asks token callers to sign in again. Bounded: past
//! [`MAX_SESSIONS`], the session that would expire first goes, one nobody signed in to before
//! any signed-in one.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};

/// Sessions kept at once.
pub(super) const MAX_SESSIONS: usize = 4096;

/// One browser's session.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) id: String,
    /// Every form of this session carries it; an action without it is refused.
    pub(super) csrf: String,
    /// The token the caller signed in with, if it signed in.
    pub(super) token: Option<Vec<u8>>,
    /// What the last action did, said once by the next page.
    pub(super) flash: Option<String>,
    expires: Instant,
}

pub(super) struct Sessions {
    table: Mutex<HashMap<String, Session>>,
    ttl: Duration,
    random: SystemRandom,
}

impl Sessions {
    pub(super) fn new(ttl: Duration) -> Sessions {
        Sessions { table: Mutex::new(HashMap::new()), ttl, random: SystemRandom::new() }
    }

    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The live session with this id.
    pub(super) fn get(&self, id: &str) -> Option<Session> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        match table.get(id) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                table.remove(id);
                None
            }
            None => None,
        }
    }

    /// A new session (new id, new CSRF token) holding `token`; `None` only if the system's
    /// random number generator fails.
    pub(super) fn create(&self, token: Option<Vec<u8>>) -> Option<Session> {
        let now = Instant::now();
        let session = Session {
            id: self.random_text()?,
            csrf: self.random_text()?,
            token,
            flash: None,
            expires: now.checked_add(self.ttl).unwrap_or(now),
        };
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= MAX_SESSIONS {
            table.retain(|_, session| session.expires > now);
        }
        // Room is made from the sessions nobody signed in to first: any stranger can make
        // those by the thousand, and they must never push out an operator's.
        if table.len() >= MAX_SESSIONS
            && let Some(first) =
                table.values().min_by_key(|session| (session.token.is_some(), session.expires)).map(|session| session.id.clone())
        {
            table.remove(&first);
        }
        table.insert(session.id.clone(), session.clone());
        Some(session)
    }

    /// Keeps `text` for the session's next page.
    pub(super) fn flash(&self, id: &str, text: String) {
        if let Some(session) = self.table.lock().unwrap_or_else(PoisonError::into_inner).get_mut(id) {
            session.flash = Some(text);
        }
    }

    /// The session's flash, once.
    pub(super) fn take_flash(&self, id: &str) -> Option<String> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner).get_mut(id).and_then(|session| session.flash.take())
    }

    pub(super) fn remove(&self, id: &str) {
        self.table.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// 256 random bits, base64url: unguessable, and safe in a cookie and a form.
    fn random_text(&self) -> Option<String> {
        let mut bytes = [0u8; 32];
        self.random.fill(&mut bytes).ok()?;
        Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_sessions_nobody_signed_in_to_never_pushes_out_a_signed_in_one() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let signed = sessions.create(Some(b"operator".to_vec())).unwrap();
        for _ in 0..MAX_SESSIONS * 2 {
            sessions.create(None);
        }
        assert!(sessions.get(&signed.id).is_some());
    }

    #[test]
    fn sessions_are_random_expire_and_stay_bounded() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let (a, b) = (sessions.create(None).unwrap(), sessions.create(Some(b"t".to_vec())).unwrap());
        assert_ne!(a.id, b.id);
        assert_ne!(a.csrf, a.id);
        assert_eq!(a.id.len(), 43);
        assert_eq!(sessions.get(&b.id).and_then(|s| s.token), Some(b"t".to_vec()));
        sessions.remove(&b.id);
        assert!(sessions.get(&b.id).is_none());
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.create(None);
        }
        assert_eq!(sessions.table.lock().unwrap().len(), MAX_SESSIONS);
        let expired = Sessions::new(Duration::ZERO);
        let gone = expired.create(None).unwrap();
        assert!(expired.get(&gone.id).is_none());
    }
}
