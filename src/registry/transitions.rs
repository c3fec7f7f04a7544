//! The named ways a server's view changes. The supervisor changes a [`ServerView`] only through
//! these, inside [`Registry::update`](super::Registry::update) (which publishes the result and
//! records its history); its fields are private to `registry`, so the compiler refuses any other
//! write. Each says what happened, and keeps together the fields that change together.

use std::collections::HashMap;
use std::sync::Arc;

use crate::catalog::integrity::{Approval, ToolIntegrity};
use crate::catalog::model::Generation;
use crate::catalog::record::{EnumerationOutcome, EnumerationRecord, now_ms};
use crate::mcp::lifecycle::ServerHello;
use crate::sandbox::LimitKind;
use crate::upstream::SessionHandle;
use crate::upstream::oauth::authorizer::Authorizer;

use super::{SandboxView, ServerState, ServerView};

impl ServerView {
    /// At creation: what the server's sandbox will hold.
    pub(crate) fn sandboxed(&mut self, sandbox: SandboxView) {
        self.sandbox = Some(sandbox);
    }

    /// At creation: the generation the store holds, served until the server lists again
    /// (`revalidating` while it has yet to).
    pub(crate) fn stored(&mut self, generation: Arc<Generation>, last_verified_at_ms: Option<i64>, revalidating: bool) {
        self.generation = Some(generation);
        self.last_verified_at_ms = last_verified_at_ms;
        self.revalidating = revalidating;
    }

    /// At creation: the server's approvals as stored, handed to its (not yet shared) state.
    pub(crate) fn approvals_loaded(&mut self, approvals: HashMap<String, Approval>) {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            *shared.approvals.get_mut() = approvals;
        }
    }

    /// The worker moved the server to `state`; `why`, when given, replaces the last error.
    pub(crate) fn enter(&mut self, state: ServerState, why: Option<String>) {
        self.state = state;
        if why.is_some() {
            self.last_error = why;
        }
    }

    /// Why the server is not serving now (a start that failed, an authorization lost).
    pub(crate) fn fault(&mut self, why: String) {
        self.last_error = Some(why);
    }

    /// What explains a session's end, unless something said more already.
    pub(crate) fn fault_unless_said(&mut self, why: String) {
        if self.last_error.is_none() {
            self.last_error = Some(why);
        }
    }

    pub(crate) fn authorized_by(&mut self, authorizer: Option<Arc<Authorizer>>) {
        self.authorizer = authorizer;
    }

    /// A session is up: its handshake, its handle for calls; the last error is behind it.
    pub(crate) fn session_started(&mut self, hello: ServerHello, session: SessionHandle) {
        self.hello = Some(hello);
        self.session = Some(session);
        self.last_error = None;
    }

    /// The session ended: not callable from this moment. `reconnecting` unless toolhost stopped
    /// it; `said`, what the server said on its way out.
    pub(crate) fn session_ended(&mut self, reconnecting: bool, said: Option<String>) {
        self.session = None;
        if reconnecting {
            self.state = ServerState::Reconnecting;
        }
        if said.is_some() {
            self.last_error = said;
        }
    }

    /// The sandbox stopped the server: why, and the limit it hit, if that was it.
    pub(crate) fn stopped_by_sandbox(&mut self, why: String, limit: Option<LimitKind>) {
        self.last_error = Some(why);
        if let (Some(sandbox), Some(limit)) = (self.sandbox.as_mut(), limit) {
            sandbox.last_limit = Some(limit);
        }
    }

    /// A new session is on its way (at once, or after a backoff shown as `state`).
    pub(crate) fn restarting(&mut self, state: ServerState) {
        self.state = state;
        self.session = None;
        self.num_restarts += 1;
    }

    /// The worker panicked; the guard starts another.
    pub(crate) fn worker_panicked(&mut self, message: &str) {
        self.state = ServerState::Failed;
        self.session = None;
        self.num_worker_panics += 1;
        self.last_error = Some(format!("toolhost's worker for this server panicked ({message}); restarting it"));
    }

    /// A new generation was committed and is published, with its tools' integrity states.
    pub(crate) fn published(&mut self, generation: Arc<Generation>, integrity: Arc<[ToolIntegrity]>, record: EnumerationRecord) {
        let number = generation.number;
        self.generation = Some(generation);
        self.integrity = integrity;
        self.verified(EnumerationRecord { outcome: EnumerationOutcome::Committed, generation: number, ..record });
    }

    /// The server's listing matched the stored generation: it is verified now.
    pub(crate) fn verified(&mut self, record: EnumerationRecord) {
        self.revalidating = false;
        self.last_error = None;
        self.last_verified_at_ms = Some(now_ms());
        self.last_enumeration = Some(record);
    }

    /// A stored generation held back at start (private to another credential) is published.
    pub(crate) fn stored_generation_released(&mut self, generation: Arc<Generation>, integrity: Arc<[ToolIntegrity]>) {
        self.generation = Some(generation);
        self.integrity = integrity;
    }

    /// The tools' integrity states changed (an approval, a policy): the same generation.
    pub(crate) fn integrity_changed(&mut self, integrity: Arc<[ToolIntegrity]>) {
        self.integrity = integrity;
    }

    /// An enumeration ended without a new generation (failed, superseded, not stored): shown
    /// against the generation still current.
    pub(crate) fn enumerated(&mut self, record: EnumerationRecord) {
        let generation = self.generation.as_ref().map_or(0, |generation| generation.number);
        self.last_enumeration = Some(EnumerationRecord { generation, ..record });
    }

    /// A listing could not be stored, so it was not published: the server shows the fault
    /// until a later pass commits.
    pub(crate) fn commit_failed(&mut self, why: String, record: EnumerationRecord) {
        self.state = ServerState::Failed;
        self.last_error = Some(why.clone());
        self.enumerated(EnumerationRecord { outcome: EnumerationOutcome::Failed, error: Some(why), ..record });
    }
}
