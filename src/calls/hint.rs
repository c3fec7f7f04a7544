//! A call's error that says the sandbox refused a write, with the grant that would allow it:
//! the one place both doors' calls pass (a result, a task's result, a JSON-RPC error), so gRPC
//! and MCP say the same. The server's own words stay as sent: a result gets one more text
//! item, "toolhost: hint: …", after its own; an error's message gets the hint after its own.

use std::path::{Path, PathBuf};

use serde_json::value::RawValue;

use crate::mcp::tools::{CallOutcome, parse_call_result, text_items, with_text_item};
use crate::registry::ServerView;
use crate::upstream::grant_hint::{Grants, for_call};

/// The hint for `texts` (a failed call's words) of `view`'s server: only a sandboxed stdio
/// server's, only for a path its sandbox shows it read-only ([`for_call`]).
pub(super) fn grant_hint<'t>(view: &ServerView, texts: impl IntoIterator<Item = &'t str>) -> Option<String> {
    let sandbox = view.sandbox().filter(|sandbox| sandbox.enabled)?;
    let writable: Vec<&Path> = sandbox.write.iter().chain(&sandbox.home).chain(&sandbox.data).map(PathBuf::as_path).collect();
    let grants = Grants { read: &sandbox.read, given: &sandbox.given, writable: &writable, has_data: sandbox.data.is_some() };
    for_call(texts, &grants)
}

/// A tool's failure (`isError`) with the hint added as its last content item, when it names
/// a refused write the hint answers; anything else exactly as it came.
pub(super) fn hinted_result(view: &ServerView, raw: Box<RawValue>, outcome: CallOutcome) -> (Box<RawValue>, CallOutcome) {
    if !outcome.is_error || outcome.input_required.is_some() {
        return (raw, outcome);
    }
    let texts = text_items(&outcome.content);
    let Some(hint) = grant_hint(view, texts.iter().map(String::as_str)) else { return (raw, outcome) };
    match with_text_item(&raw, &hint).and_then(|hinted| parse_call_result(&hinted).ok().map(|outcome| (hinted, outcome))) {
        Some(hinted) => hinted,
        None => (raw, outcome),
    }
}

/// Characters of a server's message kept before the hint: the doors bound an error's message
/// (1 KiB), and the hint is what must not be cut off.
const MESSAGE_BEFORE_HINT: usize = 300;

/// A server's JSON-RPC error message with the hint after it, when it names a refused write.
pub(super) fn hinted_message(view: &ServerView, message: String) -> String {
    let Some(hint) = grant_hint(view, [message.as_str()]) else { return message };
    let mut kept: String = message.chars().take(MESSAGE_BEFORE_HINT).collect();
    if kept.len() < message.len() {
        kept.push('…');
    }
    format!("{kept}; {hint}")
}
