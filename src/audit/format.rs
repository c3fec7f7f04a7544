//! One audit record as it leaves the daemon (JSON Lines, syslog, OpenTelemetry logs): the core
//! fields of the draft MCP audit record (SEP-3004, "Tamper-Evident Audit Record Contract")
//! under their names there, and everything toolhost adds in its extension, `toolhost`. The
//! chain fields are toolhost's own (`previous_hash`, `event_hash`: SHA-256 over toolhost's RFC
//! 8785 form of the record, `hash_form`), so an exported trail can be checked link by link
//! without the daemon (`toolhost audit verify --export FILE`). docs/audit.md lists each field.

use std::time::Duration;

use serde_json::{Value, json};

use crate::catalog::record::AuditRecord;
use crate::store::audit_chain::ChainRecord;

/// What `event_hash` is computed over: the name of toolhost's canonical form of a record.
pub const HASH_FORM: &str = "toolhost-audit-chain/1";

/// The SEP-3004 extension key toolhost's own fields live under.
pub const EXTENSION: &str = "toolhost";

/// The record's kind: a tool call (run or refused), or a task's or an approval's event.
#[must_use]
pub fn event_type(outcome: &str) -> &'static str {
    const EVENTS: [&str; 4] = ["task_started", "task_cancelled", "approval_requested", "approval_decided"];
    let kind = outcome.split_once(':').map_or(outcome, |(kind, _)| kind);
    EVENTS.into_iter().find(|event| *event == kind).unwrap_or("tool_call")
}

/// The abstract disposition SEP-3004 records (`allowed`, `denied`, `deferred`, `error`); the
/// detailed outcome stays in the extension.
#[must_use]
pub fn disposition(outcome: &str) -> &'static str {
    let mut parts = outcome.split(':');
    let kind = parts.next().unwrap_or_default();
    match kind {
        "approval_pending" | "task_required" | "continuation" | "approval_requested" => "deferred",
        "approval_decided" if outcome.ends_with(":denied") => "denied",
        "approval_decided" | "task_started" | "task_cancelled" => "allowed",
        _ if super::refused(outcome) => "denied",
        "ok" | "tool_error" | "input_required" | "result_too_large" | "cancelled" => "allowed",
        _ => "error",
    }
}

/// The id of the approval or task an event concerns (`approval_requested:ID`, `task_started:ID`…).
fn subject_id<'a>(outcome: &'a str, prefix: &str) -> Option<&'a str> {
    outcome.strip_prefix(prefix)?.strip_prefix(':')?.split(':').next()
}

/// `at_ms` as RFC 3339 in UTC, to the millisecond.
#[must_use]
pub fn rfc3339(at_ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// One record, with its store id and chain hashes, as an exported line.
#[must_use]
pub fn record(id: i64, record: &AuditRecord, prev_hash: Option<&str>, hash: Option<&str>) -> Value {
    let outcome = record.outcome.as_str();
    json!({
        "event_id": id.to_string(),
        "occurred_at": rfc3339(record.at_ms),
        "principal_id": &*record.agent,
        "event_type": event_type(outcome),
        "tool_name": Some(record.qualified_name.as_str()).filter(|name| !name.is_empty()),
        "outcome": disposition(outcome),
        "previous_hash": prev_hash,
        "event_hash": hash,
        "extensions": {
            EXTENSION: {
                "record_id": id,
                "hash_form": HASH_FORM,
                "at_ms": record.at_ms,
                "outcome": outcome,
                "caller": record.caller,
                "transport": record.transport,
                "qualified_name": record.qualified_name,
                "server": record.server,
                "tool": record.tool,
                "generation": record.generation,
                "definition_hash": record.definition_hash,
                "duration_us": record.duration_us,
                "arguments": record.arguments,
                "approval_id": subject_id(outcome, "approval_requested").or_else(|| subject_id(outcome, "approval_decided")),
                "task_id": subject_id(outcome, "task_started").or_else(|| subject_id(outcome, "task_cancelled")),
            }
        }
    })
}

/// Why an exported line is not a record the chain covers: the field missing or mistyped.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("no {0}")]
    NoText(&'static str),
    #[error("no extensions.{}.{}", EXTENSION, .0)]
    NoNumber(&'static str),
    #[error("{0} is neither a string nor null")]
    NotTextOrNull(&'static str),
}

/// An exported line read back as the chain sees it, or why it cannot be.
///
/// # Errors
/// A field the chain covers is missing or of the wrong type.
pub fn parse(line: &Value) -> Result<ChainRecord, RecordError> {
    let ours = &line["extensions"][EXTENSION];
    let text = |value: &Value, name: &'static str| value[name].as_str().map(str::to_owned).ok_or(RecordError::NoText(name));
    let number = |name: &'static str| ours[name].as_i64().ok_or(RecordError::NoNumber(name));
    let optional = |value: &Value, name: &'static str| match &value[name] {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text.clone())),
        _ => Err(RecordError::NotTextOrNull(name)),
    };
    Ok(ChainRecord {
        id: number("record_id")?,
        at_ms: number("at_ms")?,
        agent: text(line, "principal_id")?,
        caller: text(ours, "caller")?,
        transport: text(ours, "transport")?,
        qualified_name: text(ours, "qualified_name")?,
        server: text(ours, "server")?,
        tool: text(ours, "tool")?,
        generation: number("generation")?,
        definition_hash: text(ours, "definition_hash")?,
        outcome: text(ours, "outcome")?,
        duration_us: number("duration_us")?,
        arguments: optional(ours, "arguments")?,
        prev_hash: optional(line, "previous_hash")?,
        hash: optional(line, "event_hash")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_the_drafts_dispositions() {
        let cases = [
            ("ok", "tool_call", "allowed"),
            ("tool_error", "tool_call", "allowed"),
            ("denied", "tool_call", "denied"),
            ("stale_tool:removed", "tool_call", "denied"),
            ("rate_limited", "tool_call", "denied"),
            ("approval_pending", "tool_call", "deferred"),
            ("timeout", "tool_call", "error"),
            ("upstream_error", "tool_call", "error"),
            ("approval_requested:7", "approval_requested", "deferred"),
            ("approval_decided:7:denied", "approval_decided", "denied"),
            ("approval_decided:7:approved", "approval_decided", "allowed"),
            ("task_started:ab12", "task_started", "allowed"),
            ("task_cancelled:ab12:bot", "task_cancelled", "allowed"),
        ];
        for (outcome, kind, disposition_) in cases {
            assert_eq!((event_type(outcome), disposition(outcome)), (kind, disposition_), "{outcome}");
        }
    }

    #[test]
    fn an_exported_line_reads_back_as_the_record_it_was() {
        let stored = AuditRecord {
            at_ms: 1_764_000_000_123,
            agent: "bot".into(),
            caller: "uid 1000".into(),
            transport: "unix",
            qualified_name: "demo__echo".into(),
            server: "demo".into(),
            tool: "echo".into(),
            generation: 3,
            definition_hash: "ab".repeat(32),
            outcome: "approval_requested:42".into(),
            duration_us: 17,
            arguments: Some("{\"n\":1}".into()),
        };
        let line = record(9, &stored, Some("00"), Some("11"));
        assert_eq!(line["extensions"]["toolhost"]["approval_id"], "42");
        assert_eq!(line["occurred_at"], "2025-11-24T16:00:00.123Z");
        let back = parse(&line).unwrap();
        assert_eq!(
            (back.id, back.at_ms, back.agent.as_str(), back.outcome.as_str(), back.arguments.as_deref(), back.hash.as_deref()),
            (9, stored.at_ms, "bot", "approval_requested:42", Some("{\"n\":1}"), Some("11"))
        );
    }
}
