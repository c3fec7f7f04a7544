//! The nouns the front doors speak, named once: who is calling, what a call is and how it came
//! out, what the catalog holds, what a task and an approval are, and the doors' own settings.
//! The verbs are [`Door`](super::Door)'s (the agent side) and [`Operator`](super::operator::Operator)'s
//! (the operator side); a front door names nothing below `door` but through here, which
//! `.ci/door-face` checks. The types are the lower layers' own, not copies: a door converts
//! them to its wire once, and a change below shows up here as a change of the door's face.

use std::sync::Arc;

// Who is calling, as the kernel, a token or a certificate says, and what the policy made of it.
pub use crate::access::{Caller, Identity, PeerInfo, Policy, Refusal, TlsPeerInfo, UnixPeer};

// A call, its answer to a server's questions, its result and every way it fails.
pub use crate::calls::{Answer, ApprovalError, CallError, CallRequest, CallResult, ContinuationError, RaceKind, StaleTool, ToolRef};
/// How many progress updates of one call may wait for the door to pass them on.
pub use crate::upstream::session::PROGRESS_QUEUE;

// The catalog: the servers' views, their tools and their history.
pub use crate::catalog::integrity::{Approval, Hold, ToolIntegrity, confusable, is_invisible};
pub use crate::catalog::model::ToolDef;
pub use crate::catalog::names;
pub use crate::catalog::record::{AuditRecord, EnumerationRecord, GenerationSummary};
pub use crate::registry::{CatalogChange, CatalogEvent, CatalogSnapshot, ConfigChange, ServerState, ServerView};

// Tasks, approvals, the audit trail.
pub use crate::audit::{is_call, refused};
pub use crate::store::audit::AuditFilter;
pub use crate::store::audit_chain::{Span, Verdict};
pub use crate::store::call_approvals::{ApprovalRecord, ApprovalStatus};
pub use crate::store::fleet::FROM_FLEET;
pub use crate::store::tasks::{TaskFilter, TaskStatus};
pub use crate::supervisor::ServerAction;
pub use crate::supervisor::integrity::DefinitionDiff;

// The doors' own settings.
pub use crate::config::{ConsoleConfig, ListenAddr, Listener, McpConfig, TlsFiles};

/// The server and the index of the tool `tool` names in `snapshot`'s current generations: the
/// one way a name becomes a tool, for calls and for reads.
pub fn locate(snapshot: &CatalogSnapshot, tool: &ToolRef) -> Option<(Arc<ServerView>, usize)> {
    crate::calls::locate(&snapshot.servers, tool)
}

/// Milliseconds since the Unix epoch, as every record says time.
pub fn now_ms() -> i64 {
    crate::catalog::record::now_ms()
}

/// The instant `duration` from now, saturating (a bound a caller gives cannot overflow).
pub fn deadline_after(duration: std::time::Duration) -> tokio::time::Instant {
    crate::deadline::after(duration)
}

/// `text` with anything that looks like a secret blanked: what a door shows of an error a
/// server or an upstream wrote.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    crate::secrets::redact(text)
}

/// [`redact`], owned.
pub fn redact_owned(text: String) -> String {
    crate::secrets::redact_owned(text)
}

/// An unguessable identifier (a session's), or `None` when the system's random source fails.
pub fn random_token() -> Option<String> {
    crate::secrets::random_token()
}
