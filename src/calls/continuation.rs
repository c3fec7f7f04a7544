//! Multi-round-trip requests (MCP 2026-07-28, SEP-2322) passed through to the agent.
//!
//! When a server answers a call with `resultType: "input_required"`, the agent gets the server's
//! `inputRequests` and an opaque continuation token instead of a failure. toolhost keeps the
//! server's `requestState` here, in memory only, bound to the caller, the tool and the definition
//! the call ran against; the agent's retry with the token and its responses takes it back out
//! (once), and toolhost repeats the call upstream with the state echoed byte for byte.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use crate::access::Caller;
use crate::listen::tables as share;

/// How long an agent has to answer a server's questions.
pub const CONTINUATION_TTL: Duration = Duration::from_secs(600);
/// Open continuations per caller; a caller's oldest is dropped beyond this.
const MAX_PER_CALLER: usize = 256;
/// Open continuations in all; past this, the caller holding the most gives up its oldest.
const MAX_OPEN: usize = 8192;
/// Longest token accepted from a caller (toolhost's own are 32 characters).
const MAX_TOKEN_BYTES: usize = 64;

/// The server's side of an unfinished call, waiting for the agent's answers.
#[derive(Debug)]
pub struct Pending {
    owner: String,
    pub server: Arc<str>,
    pub tool: String,
    pub generation: u64,
    pub definition_hash: String,
    /// The server's `requestState`, exactly as it sent it; `None` when it sent none (and then
    /// none may be sent back).
    pub request_state: Option<Box<RawValue>>,
    issued: Instant,
    expires: Instant,
}

/// Why a continuation token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ContinuationError {
    /// Unknown, expired, already used, or another caller's: indistinguishable on purpose.
    #[error("continuation token unknown or expired (tokens are single-use and last {} s); call the tool again from the start", CONTINUATION_TTL.as_secs())]
    Unknown,
    #[error("the continuation token belongs to a call of {server}/{tool}, not of this tool")]
    OtherTool { server: String, tool: String },
    #[error("the input responses are not a JSON object keyed like the input requests: {0}")]
    InvalidResponses(String),
    #[error("a continuation token needs input responses, and input responses need a continuation token")]
    Incomplete,
    #[error("too many unfinished multi-round-trip calls ({MAX_OPEN}); answer or abandon some first")]
    TooMany,
}

/// The open continuations of the daemon. Cheap to clone.
#[derive(Clone, Default)]
pub struct Continuations {
    open: Arc<Mutex<HashMap<String, Pending>>>,
}

impl Continuations {
    /// Keeps `pending` for `caller` and returns its token and expiry.
    ///
    /// # Errors
    /// [`ContinuationError::TooMany`] when no token can be made (the system's randomness failed).
    pub fn issue(&self, caller: &Caller, mut pending: Pending) -> Result<(String, Instant), ContinuationError> {
        let token = crate::secrets::random_token().ok_or(ContinuationError::TooMany)?;
        pending.owner = caller.principal();
        let expires = pending.expires;
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        open.retain(|_, kept| kept.expires > now);
        // A caller at its share gives up its own oldest; a full table, the biggest holder's.
        let entries = open.iter().map(|(token, kept)| (token.as_str(), kept.owner.as_str(), kept.issued));
        if let Some(evicted) = share::make_room(entries, &pending.owner, MAX_PER_CALLER, MAX_OPEN).map(str::to_owned) {
            open.remove(&evicted);
        }
        open.insert(token.clone(), pending);
        Ok((token, expires))
    }

    /// Takes the continuation `token` names, if it is `caller`'s and unexpired. Taken means used:
    /// a second retry with the same token is refused, whatever became of the first.
    ///
    /// # Errors
    /// [`ContinuationError::Unknown`].
    pub fn take(&self, caller: &Caller, token: &str) -> Result<Pending, ContinuationError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(ContinuationError::Unknown);
        }
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let owner = caller.principal();
        match open.get(token) {
            Some(pending) if pending.owner == owner && pending.expires > Instant::now() => {}
            Some(pending) if pending.expires <= Instant::now() => {
                open.remove(token);
                return Err(ContinuationError::Unknown);
            }
            _ => return Err(ContinuationError::Unknown),
        }
        open.remove(token).ok_or(ContinuationError::Unknown)
    }

    /// Puts back a continuation whose retry never reached the server (it was unavailable,
    /// overloaded, held), so the agent may try the same answers again.
    pub fn restore(&self, token: &str, pending: Pending) {
        if pending.expires > Instant::now() {
            self.open.lock().unwrap_or_else(PoisonError::into_inner).insert(token.to_owned(), pending);
        }
    }

    /// How many are open (expired ones included until the next issue sweeps them).
    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Pending {
    pub fn new(server: Arc<str>, tool: String, generation: u64, definition_hash: String, request_state: Option<Box<RawValue>>) -> Pending {
        let issued = Instant::now();
        let expires = issued.checked_add(CONTINUATION_TTL).unwrap_or(issued);
        Pending { owner: String::new(), server, tool, generation, definition_hash, request_state, issued, expires }
    }
}

/// `responses` checked to be one JSON object, kept raw.
///
/// # Errors
/// [`ContinuationError::InvalidResponses`].
pub fn check_responses(responses: &str) -> Result<&RawValue, ContinuationError> {
    let raw: &RawValue = serde_json::from_str(responses.trim()).map_err(|err| ContinuationError::InvalidResponses(err.to_string()))?;
    if !raw.get().starts_with('{') {
        return Err(ContinuationError::InvalidResponses("expected an object".to_owned()));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Agent, Identity, UnixPeer};

    fn caller(name: &str, uid: u32) -> Caller {
        Caller { identity: Identity::unix(UnixPeer::new(uid, uid, 1)), agent: Arc::new(Agent::named_for_tests(name)) }
    }

    fn pending() -> Pending {
        Pending::new("s".into(), "t".into(), 1, "h".into(), RawValue::from_string(r#""st""#.into()).ok())
    }

    #[test]
    fn a_continuation_is_single_use_and_only_its_callers() {
        let open = Continuations::default();
        let (token, _) = open.issue(&caller("a", 1), pending()).unwrap();
        assert_eq!(open.take(&caller("a", 2), &token).unwrap_err(), ContinuationError::Unknown, "another uid");
        assert_eq!(open.take(&caller("b", 1), &token).unwrap_err(), ContinuationError::Unknown, "another agent");
        let taken = open.take(&caller("a", 1), &token).unwrap();
        assert_eq!(taken.request_state.unwrap().get(), r#""st""#);
        assert_eq!(open.take(&caller("a", 1), &token).unwrap_err(), ContinuationError::Unknown, "used");
        assert_eq!(open.take(&caller("a", 1), &"x".repeat(1000)).unwrap_err(), ContinuationError::Unknown);
    }

    #[test]
    fn one_caller_cannot_hold_more_than_its_share() {
        let open = Continuations::default();
        let first = open.issue(&caller("a", 1), pending()).unwrap().0;
        for _ in 0..MAX_PER_CALLER {
            open.issue(&caller("a", 1), pending()).unwrap();
        }
        assert_eq!(open.len(), MAX_PER_CALLER);
        assert!(open.take(&caller("a", 1), &first).is_err(), "the oldest made room");
    }

    #[test]
    fn responses_must_be_an_object() {
        assert!(check_responses(r#"{"confirm":{"action":"accept"}}"#).is_ok());
        assert!(check_responses("[1]").is_err());
        assert!(check_responses("{").is_err());
    }
}
