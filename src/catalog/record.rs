//! What toolhost remembers about each enumeration and each committed generation.

/// Why an enumeration ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnumerationReason {
    /// The first enumeration of a server since toolhost started.
    Initial,
    /// The server sent `notifications/tools/list_changed`.
    ListChanged,
    /// A new session after the previous one ended.
    Reconnect,
    /// An operator asked for it.
    Manual,
    /// A call hit a tool the server no longer knows.
    StaleTool,
    /// The last listing's `ttlMs` (2026-07-28) ran out.
    Ttl,
}

/// How an enumeration ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnumerationOutcome {
    /// Complete, and the tool set differed: a new generation was committed.
    Committed,
    /// Complete, and identical to the current generation.
    Unchanged,
    /// Cut short by an error or a bound; nothing was committed.
    Failed,
    /// Discarded because the server announced a change while it ran; a fresh pass follows.
    Superseded,
}

/// One enumeration, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumerationRecord {
    pub started_at_ms: i64,
    pub duration_ms: i64,
    pub reason: EnumerationReason,
    pub outcome: EnumerationOutcome,
    pub pages: u32,
    pub tools: u32,
    pub bytes: u64,
    /// The server's current generation after this enumeration.
    pub generation: u64,
    pub error: Option<String>,
    pub diagnostics: Vec<String>,
}

impl EnumerationRecord {
    /// A record of an enumeration for `reason` with nothing measured yet: what
    /// [`crate::store::Generations::commit`] fills in (outcome, generation) when a listing
    /// arrives without a pass behind it (tests, benchmarks).
    pub fn unmeasured(reason: EnumerationReason) -> EnumerationRecord {
        EnumerationRecord {
            started_at_ms: 0,
            duration_ms: 0,
            reason,
            outcome: EnumerationOutcome::Committed,
            pages: 0,
            tools: 0,
            bytes: 0,
            generation: 0,
            error: None,
            diagnostics: Vec::new(),
        }
    }
}

/// A committed generation's summary, for history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationSummary {
    pub generation: u64,
    pub committed_at_ms: i64,
    pub reason: EnumerationReason,
    pub tool_count: u32,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

// === impl EnumerationReason ===

impl EnumerationReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EnumerationReason::Initial => "initial",
            EnumerationReason::ListChanged => "list_changed",
            EnumerationReason::Reconnect => "reconnect",
            EnumerationReason::Manual => "manual",
            EnumerationReason::StaleTool => "stale_tool",
            EnumerationReason::Ttl => "ttl",
        }
    }

    pub fn parse(text: &str) -> Option<EnumerationReason> {
        [
            EnumerationReason::Initial,
            EnumerationReason::ListChanged,
            EnumerationReason::Reconnect,
            EnumerationReason::Manual,
            EnumerationReason::StaleTool,
            EnumerationReason::Ttl,
        ]
        .into_iter()
        .find(|reason| reason.as_str() == text)
    }
}

// === impl EnumerationOutcome ===

impl EnumerationOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            EnumerationOutcome::Committed => "committed",
            EnumerationOutcome::Unchanged => "unchanged",
            EnumerationOutcome::Failed => "failed",
            EnumerationOutcome::Superseded => "superseded",
        }
    }

    pub fn parse(text: &str) -> Option<EnumerationOutcome> {
        [EnumerationOutcome::Committed, EnumerationOutcome::Unchanged, EnumerationOutcome::Failed, EnumerationOutcome::Superseded]
            .into_iter()
            .find(|outcome| outcome.as_str() == text)
    }
}

/// Milliseconds since the Unix epoch, for stored timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One audited call, as the store keeps it ([`crate::audit`] records them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub at_ms: i64,
    pub agent: std::sync::Arc<str>,
    /// The caller as the kernel or its token identified it (never the token).
    pub caller: String,
    pub transport: &'static str,
    pub qualified_name: String,
    pub server: String,
    pub tool: String,
    pub generation: u64,
    pub definition_hash: String,
    pub outcome: String,
    pub duration_us: u64,
    pub arguments: Option<String>,
}
