//! The nouns the front doors speak, named once: who is calling, what a call is and how it came
//! out, the catalog's records, what a task and an approval are, and the doors' own settings.
//! The verbs are [`Door`](super::Door)'s (the agent side) and [`Operator`](super::operator::Operator)'s
//! (the operator side); what a door shows of the live catalog is [`view`](super::view)'s, not
//! the registry's. A front door names nothing below `door` but through here, which
//! `.ci/door-face` checks. What is re-exported is data a door reads and converts to its wire,
//! each group for the reason its comment gives; two carry live handles by design, because a
//! door passes them on untouched: the admitted [`Caller`] (its entry's slots, rate and quotas)
//! and a [`CallRequest`]'s progress channel.

// Admission: the caller a door admits, the identity it reads off its connection, the refusal.
pub use crate::access::{Caller, Identity, PeerInfo, Policy, Refusal, TlsPeerInfo, UnixPeer};

// The call's vocabulary, shared by every door so that a call is judged and named alike.
pub use crate::calls::{Answer, CallError, CallRequest, CallResult, ContinuationError, RaceKind, StaleTool, ToolRef};
/// How many progress updates of one call may wait for the door to pass them on.
pub use crate::upstream::session::PROGRESS_QUEUE;

// Catalog records a door prints as they are: definitions, names, holds, history, change events.
pub use crate::catalog::integrity::{Approval, Hold, confusable, is_invisible};
pub use crate::catalog::model::ToolDef;
pub use crate::catalog::names;
pub use crate::catalog::record::{EnumerationRecord, GenerationSummary};
pub use crate::registry::{CatalogChange, CatalogEvent, ConfigChange, ServerState};

// Tasks, approvals, the audit trail: the records and filters the operator side answers with.
pub use crate::audit::{is_call, refused};
pub use crate::catalog::record::AuditRecord;
pub use crate::store::audit::AuditFilter;
pub use crate::store::audit_chain::{Span, Verdict};
pub use crate::store::call_approvals::{ApprovalRecord, ApprovalStatus};
pub use crate::store::fleet::FROM_FLEET;
pub use crate::store::tasks::{TaskFilter, TaskStatus};
pub use crate::supervisor::ServerAction;
pub use crate::supervisor::integrity::DefinitionDiff;

// The doors' own settings, as the configuration gives them.
pub use crate::config::{ConsoleConfig, ListenAddr, Listener, McpConfig, TlsFiles};

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
