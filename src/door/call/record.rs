//! Step 6, record: the one place a call is written to the audit trail. A [`CallRecord`] is
//! begun when the call is admitted and finished exactly once with its outcome, whatever the
//! exit (refused, limited, stale, waiting for approval, failed, done); a call whose future is
//! dropped before it ends (its client went away, an MCP cancellation, a task cancelled or
//! stopped at shutdown) is written as `cancelled` when its record is dropped. What a caller did about a
//! call that is not the call itself (a task started or cancelled, an approval requested or
//! decided) is an [`event`]; a server's process knocking is [`server_process`]. Nothing else in
//! the door builds an [`AuditRecord`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::access::Caller;
use crate::audit::AuditRecord;
use crate::calls::{CallError, CallResult, ToolRef};
use crate::catalog::names;
use crate::config::AuditArguments;
use crate::door::{Door, truncate};

/// Longest tool name and server name an audit record keeps of what a caller sent.
const AUDIT_NAME_BYTES: usize = 256;
const AUDIT_SERVER_BYTES: usize = 64;

/// A call's audit record from its admission on: who, what, with which arguments, since when.
/// Consumed by [`CallRecord::finish`], so that it is written once; dropped unfinished (the
/// call's future was dropped), written as `cancelled`.
pub(in crate::door) struct CallRecord<'a> {
    door: &'a Door,
    caller: &'a Caller,
    target: ToolRef,
    /// As the caller sent them (an approval's arguments replace them only for the send).
    arguments: &'a str,
    started: (i64, Instant),
    /// Refused by the caller's policy: recorded as `denied`, whatever the caller was told.
    denied: bool,
    /// The generation and definition the call was handed to, once known: what a cancelled
    /// call's record says it may have run against.
    sent: Option<(u64, String)>,
    /// Written: dropping it writes nothing more.
    written: bool,
    /// A task's call the next start follows again when the daemon stops under it: set, the
    /// dropped call is that start's to record, not a cancellation.
    handed_on: Option<&'a AtomicBool>,
}

impl<'a> CallRecord<'a> {
    pub(in crate::door) fn begin(door: &'a Door, caller: &'a Caller, target: &ToolRef, arguments: Option<&'a str>) -> CallRecord<'a> {
        CallRecord::begin_at(door, caller, target, arguments, (crate::catalog::record::now_ms(), Instant::now()))
    }

    /// A record of a call that started at `started` (a task's check, recorded only if refused).
    pub(in crate::door) fn begin_at(
        door: &'a Door,
        caller: &'a Caller,
        target: &ToolRef,
        arguments: Option<&'a str>,
        started: (i64, Instant),
    ) -> CallRecord<'a> {
        CallRecord {
            door,
            caller,
            target: target.clone(),
            arguments: arguments.unwrap_or("{}"),
            started,
            denied: false,
            sent: None,
            written: false,
            handed_on: None,
        }
    }

    /// The call is handed to `generation` of its server, to the definition `hash`.
    pub(in crate::door) fn sending(&mut self, generation: u64, hash: String) {
        self.sent = Some((generation, hash));
    }

    /// A task's call: dropped while `handed_on` is set, it writes no record.
    pub(in crate::door) fn handed_on_by(&mut self, handed_on: &'a AtomicBool) {
        self.handed_on = Some(handed_on);
    }

    /// The call is refused by its caller's policy (the error it gets may say "unknown tool").
    pub(in crate::door) fn denied(&mut self) {
        self.denied = true;
    }

    /// When the call started: its events (an approval requested) carry the same time.
    pub(in crate::door) fn started(&self) -> (i64, Instant) {
        self.started
    }

    /// The call's one record, with how it ended.
    pub(in crate::door) fn finish(mut self, outcome: &Result<CallResult, CallError>) {
        let (generation, definition_hash, outcome_text) = match outcome {
            Ok(result) => (result.generation, result.definition_hash.clone(), result.outcome.label().to_owned()),
            Err(CallError::Stale(stale)) => (stale.current_generation, String::new(), format!("stale_tool:{}", stale.kind.as_str())),
            Err(_) if self.denied => (0, String::new(), "denied".to_owned()),
            Err(error) => (0, String::new(), error.kind().to_owned()),
        };
        let tool = outcome.as_ref().ok().map(|result| result.name.clone());
        self.put(tool, generation, definition_hash, outcome_text);
    }

    /// Writes the record (once): `tool`, the server's own name for it when the answer gave it.
    fn put(&mut self, tool: Option<String>, generation: u64, definition_hash: String, outcome: String) {
        if std::mem::replace(&mut self.written, true) {
            return;
        }
        let door = self.door;
        let (qualified, server, named) = match &self.target {
            ToolRef::Qualified(qualified) => (qualified.clone(), names::server_of(qualified).unwrap_or_default().to_owned(), String::new()),
            ToolRef::ServerTool { server, name } => (names::qualify(server, name), server.clone(), name.clone()),
        };
        let tool = tool.unwrap_or(named);
        let audit_arguments = door.registry.server(&server).map_or(AuditArguments::None, |view| view.shared().audit_arguments);
        let arguments = match audit_arguments {
            AuditArguments::None => None,
            AuditArguments::Hash => Some(format!("sha256:{}", crate::catalog::model::sha256_hex(self.arguments.as_bytes()))),
            AuditArguments::Full => Some(crate::secrets::redact_owned(self.arguments.to_owned())),
        };
        write(
            door,
            AuditRecord {
                at_ms: self.started.0,
                agent: self.caller.agent.name.clone(),
                caller: self.caller.identity.describe(),
                transport: self.caller.identity.transport,
                qualified_name: truncate(qualified, AUDIT_NAME_BYTES),
                server: truncate(server, AUDIT_SERVER_BYTES),
                tool: truncate(tool, AUDIT_NAME_BYTES),
                generation,
                definition_hash,
                outcome,
                duration_us: elapsed_us(self.started.1),
                arguments,
            },
        );
    }
}

impl Drop for CallRecord<'_> {
    /// A call dropped before it ended: its future was dropped (its client went away, an MCP
    /// cancellation, a task cancelled or stopped). Recorded with what is known of where it went.
    fn drop(&mut self) {
        if self.handed_on.is_some_and(|handed_on| handed_on.load(Ordering::Acquire)) {
            return;
        }
        // Unwinding: the call ended in toolhost's own failure, not the caller's cancellation.
        let outcome = if std::thread::panicking() { "error" } else { "cancelled" };
        let (generation, hash) = self.sent.take().unwrap_or_default();
        self.put(None, generation, hash, outcome.to_owned());
    }
}

/// What `caller` did about a call of `qualified` that is not the call itself (a task's start
/// or cancellation, an approval's request or decision), in the trail.
pub(in crate::door) fn event(door: &Door, caller: &Caller, qualified: &str, outcome: String, started: (i64, Instant)) {
    let server = names::server_of(qualified).unwrap_or_default().to_owned();
    write(
        door,
        AuditRecord {
            at_ms: started.0,
            agent: caller.agent.name.clone(),
            caller: caller.identity.describe(),
            transport: caller.identity.transport,
            qualified_name: truncate(qualified.to_owned(), AUDIT_NAME_BYTES),
            server: truncate(server, AUDIT_SERVER_BYTES),
            tool: String::new(),
            generation: 0,
            definition_hash: String::new(),
            outcome,
            duration_us: elapsed_us(started.1),
            arguments: None,
        },
    );
}

/// A server's process knocking: an attack, or a server misconfigured to call back; either way
/// the operator reads it in the trail.
pub(in crate::door) fn server_process(door: &Door, identity: &str, transport: &'static str) {
    write(
        door,
        AuditRecord {
            at_ms: crate::catalog::record::now_ms(),
            agent: Arc::from("(a server's process)"),
            caller: identity.to_owned(),
            transport,
            qualified_name: String::new(),
            server: String::new(),
            tool: String::new(),
            generation: 0,
            definition_hash: String::new(),
            outcome: "server_process".to_owned(),
            duration_us: 0,
            arguments: None,
        },
    );
}

/// The door's one audit write (queued off the call path; the writer stores it in a batch).
fn write(door: &Door, record: AuditRecord) {
    door.auditor.record(record);
}

fn elapsed_us(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}
