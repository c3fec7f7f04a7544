//! What the endpoint writes: response lines, the one table from a call error to a JSON-RPC
//! error (its reason and facts come from `CallError::explain`, as the gRPC statuses' do), and
//! progress notifications carrying the client's own token.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::door::error::DoorError;
use crate::door::model::{CallError, Refusal, redact_owned};
use crate::mcp::jsonrpc::code::{INTERNAL_ERROR, INVALID_PARAMS};
use crate::mcp::lifecycle::METHOD_TOOLS_LIST_CHANGED;
use crate::mcp::modern::{METHOD_ACKNOWLEDGED, SUBSCRIPTION_ID};

/// Implementation-defined JSON-RPC server error: the call could not be carried out now
/// (server unavailable, overloaded, timed out, outcome unknown) or the caller is not admitted.
pub(super) const SERVER_ERROR: i64 = -32000;
/// Longest message an error carries, and longest echo of a client's input.
const MAX_MESSAGE_BYTES: usize = 1024;
const MAX_ECHO_BYTES: usize = 128;

/// A success response line.
pub(super) fn result(id: &RawValue, result: &str) -> String {
    let mut line = String::with_capacity(40 + id.get().len() + result.len());
    line.push_str(r#"{"jsonrpc":"2.0","id":"#);
    line.push_str(id.get());
    line.push_str(r#","result":"#);
    line.push_str(result);
    line.push_str("}\n");
    line
}

/// An error response line; `data` is raw JSON.
pub(super) fn error(id: &RawValue, code: i64, message: &str, data: Option<&RawValue>) -> String {
    let message = crate::door::truncate(redact_owned(message.to_owned()), MAX_MESSAGE_BYTES);
    let mut error = Map::new();
    error.insert("code".into(), Value::from(code));
    error.insert("message".into(), Value::from(message));
    let mut line = format!(r#"{{"jsonrpc":"2.0","id":{},"error":"#, id.get());
    let mut encoded = Value::Object(error).to_string();
    if let Some(data) = data {
        encoded.pop();
        encoded.push_str(r#","data":"#);
        encoded.push_str(data.get());
        encoded.push('}');
    }
    line.push_str(&encoded);
    line.push_str("}\n");
    line
}

/// The code and message of an error line [`error`] made for request `id`; `None` for any other
/// line. Read only on the error path, for the request's span.
pub(super) fn error_of(line: &str, id: &RawValue) -> Option<(i64, String)> {
    #[derive(serde::Deserialize)]
    struct ErrorObject {
        code: i64,
        message: String,
    }
    let object = line.strip_prefix(r#"{"jsonrpc":"2.0","id":"#)?.strip_prefix(id.get())?.strip_prefix(r#","error":"#)?;
    let object = object.trim_end().strip_suffix('}')?;
    let error: ErrorObject = serde_json::from_str(object).ok()?;
    Some((error.code, error.message))
}

/// An error answered to a message whose id could not be read.
pub(super) fn unreadable(code: i64, message: &str) -> String {
    let null = RawValue::from_string("null".to_owned()).ok();
    match null {
        Some(null) => error(&null, code, message, None),
        None => String::new(),
    }
}

/// `{"reason": REASON, "domain": "toolhost", …facts}` as raw JSON. Facts that are generation
/// numbers become numbers.
pub(super) fn reason_data(reason: &str, facts: &[(&str, String)]) -> Box<RawValue> {
    let mut data = Map::new();
    data.insert("reason".into(), Value::from(reason));
    data.insert("domain".into(), Value::from("toolhost"));
    for (key, value) in facts {
        let clean = crate::door::truncate(redact_owned(value.clone()), 256);
        let value = match (key.ends_with("generation") || *key == "retry_after_ms", clean.parse::<u64>()) {
            (true, Ok(number)) => Value::from(number),
            _ => Value::from(clean),
        };
        // When to retry, under the name MCP clients look for.
        let key = if *key == "retry_after_ms" { "retryAfterMs" } else { key };
        data.insert(key.to_owned(), value);
    }
    RawValue::from_string(Value::Object(data).to_string()).unwrap_or_else(|_| RawValue::from_string("null".to_owned()).unwrap_or_default())
}

/// The JSON-RPC error for a failed call. An unknown tool is -32602, as MCP says; a race is
/// -32602 too, with `data.reason` naming which (removed in generation N, changed since
/// listed, unknown upstream) so that the agent lists again instead of retrying blindly.
pub(super) fn call_error(id: &RawValue, failure: &CallError) -> String {
    let code = match failure {
        CallError::InvalidArguments(_)
        | CallError::UnknownTool { .. }
        | CallError::UnknownServer(_)
        | CallError::Stale(_)
        | CallError::UpstreamInvalidParams { .. }
        | CallError::NotAllowed { .. }
        | CallError::Continuation(_) => INVALID_PARAMS,
        CallError::Upstream { code, .. } => *code,
        CallError::Store(detail) => {
            // Logged (paced) where the door makes it; the caller is told generically.
            let told = DoorError::internal(detail);
            return error(id, INTERNAL_ERROR, &told.message, None);
        }
        CallError::Unavailable { .. }
        | CallError::RevisionNotKept(_)
        | CallError::DeadlineExceeded { .. }
        | CallError::SessionLost { .. }
        | CallError::Overloaded { .. }
        | CallError::CallerBusy { .. }
        | CallError::RateLimited { .. }
        | CallError::QuotaExhausted { .. }
        | CallError::InvalidResult { .. }
        | CallError::TaskRequired { .. }
        | CallError::Approval(_)
        | CallError::DefinitionHeld { .. } => SERVER_ERROR,
    };
    let explained = failure.explain();
    let data = reason_data(explained.reason, &explained.details);
    error(id, code, &failure.to_string(), Some(&data))
}

/// The error for a caller the policy turns away.
pub(super) fn refusal(id: &RawValue, refusal: &Refusal) -> String {
    let reason = match refusal {
        Refusal::Unauthenticated => "UNAUTHENTICATED",
        Refusal::NoMatchingAgent { .. } => "NO_MATCHING_AGENT",
        Refusal::NotAdmin { .. } => "ADMIN_REQUIRED",
        Refusal::ServerProcess { .. } => "SERVER_PROCESS",
    };
    error(id, SERVER_ERROR, &refusal.to_string(), Some(&reason_data(reason, &[])))
}

/// A `notifications/progress` line for the client: the server's progress `params` with the
/// client's own token in place of toolhost's.
pub(super) fn progress(update: &RawValue, client_token: &RawValue) -> Option<String> {
    let mut params: Map<String, Value> = serde_json::from_str(update.get()).ok()?;
    let token: Value = serde_json::from_str(client_token.get()).ok()?;
    params.insert("progressToken".into(), token);
    Some(format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{}}}"#, Value::Object(params)) + "\n")
}

/// A result as a 2026 client must see it: with `resultType` (a 2025 server's result has none,
/// and absent means complete). Every other byte stays as the server wrote it.
pub(super) fn complete(result: &RawValue) -> std::borrow::Cow<'_, str> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "resultType", default)]
        result_type: Option<serde::de::IgnoredAny>,
    }
    let text = result.get();
    let typed = serde_json::from_str::<Typed>(text).is_ok_and(|typed| typed.result_type.is_some());
    match (typed, text.strip_prefix('{')) {
        (false, Some(rest)) if rest.trim_start().starts_with('}') => std::borrow::Cow::Owned(r#"{"resultType":"complete"}"#.to_owned()),
        (false, Some(rest)) => std::borrow::Cow::Owned(format!(r#"{{"resultType":"complete",{rest}"#)),
        _ => std::borrow::Cow::Borrowed(text),
    }
}

/// The acknowledgement of the `subscriptions/listen` with this id: the accepted subset.
pub(super) fn listen_acknowledged(id: &RawValue, tools: bool) -> String {
    let accepted = if tools { r#"{"toolsListChanged":true}"# } else { "{}" };
    let params = format!(r#"{{"_meta":{{"{SUBSCRIPTION_ID}":{}}},"notifications":{accepted}}}"#, id.get());
    notification(METHOD_ACKNOWLEDGED, Some(&params))
}

/// A `list_changed` on the subscription with this id.
pub(super) fn listen_tools_changed(id: &RawValue) -> String {
    let params = format!(r#"{{"_meta":{{"{SUBSCRIPTION_ID}":{}}}}}"#, id.get());
    notification(METHOD_TOOLS_LIST_CHANGED, Some(&params))
}

/// A call's result as the client's era wants it (see [`complete`]).
pub(super) fn call_result(id: &RawValue, result: &RawValue, era: super::Era) -> String {
    match era {
        super::Era::Modern => self::result(id, &complete(result)),
        super::Era::Legacy => self::result(id, result.get()),
    }
}

/// A 2026 `input_required` result: the server's questions, and toolhost's continuation token
/// as the `requestState` the client echoes (the server's own state stays in toolhost).
pub(super) fn input_required(id: &RawValue, requests: &RawValue, token: &str) -> String {
    result(id, &format!(r#"{{"resultType":"input_required","inputRequests":{},"requestState":"{token}"}}"#, requests.get()))
}

/// A notification line with raw params.
pub(super) fn notification(method: &str, params: Option<&str>) -> String {
    match params {
        Some(params) => format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params}}}"#) + "\n",
        None => format!(r#"{{"jsonrpc":"2.0","method":"{method}"}}"#) + "\n",
    }
}

/// A client's text, cut short for an echo in a message or a span name.
pub(super) fn clip(text: &str) -> &str {
    if text.len() <= MAX_ECHO_BYTES {
        return text;
    }
    let mut end = MAX_ECHO_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::door::model::{RaceKind, StaleTool};

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_removed_tool_is_invalid_params_naming_the_generation() {
        let stale = CallError::Stale(Box::new(StaleTool {
            kind: RaceKind::RemovedBeforeCall,
            server: "files".into(),
            tool: "read".into(),
            current_generation: 4,
            removed_in_generation: Some(4),
            current_hash: None,
            detail: "removed in generation 4".into(),
        }));
        let line: Value = serde_json::from_str(&call_error(&raw("\"r1\""), &stale)).unwrap();
        assert_eq!(line["id"], "r1");
        assert_eq!(line["error"]["code"], -32602);
        assert_eq!(line["error"]["data"]["reason"], "STALE_TOOL_REMOVED");
        assert_eq!(line["error"]["data"]["removed_in_generation"], 4);
        assert_eq!(line["error"]["data"]["server"], "files");
    }

    #[test]
    fn progress_carries_the_clients_token_and_everything_else_verbatim() {
        let line = progress(&raw(r#"{"progressToken":17,"progress":0.5,"total":1,"message":"half"}"#), &raw(r#""mine""#)).unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["params"]["progressToken"], "mine");
        assert_eq!(value["params"]["progress"], 0.5);
        assert_eq!(value["params"]["message"], "half");
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
    }

    #[test]
    fn a_2026_result_always_says_it_is_complete() {
        assert_eq!(complete(&raw(r#"{"content":[]}"#)), r#"{"resultType":"complete","content":[]}"#);
        assert_eq!(complete(&raw("{ }")), r#"{"resultType":"complete"}"#);
        assert_eq!(complete(&raw(r#"{"resultType":"complete","content":[]}"#)), r#"{"resultType":"complete","content":[]}"#);
    }

    #[test]
    fn errors_are_one_line_and_cut() {
        let long = "x".repeat(5000);
        let line = error(&raw("1"), -32601, &long, None);
        assert!(line.len() < 1200 && line.ends_with("}\n"));
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["error"]["code"], -32601);
        assert_eq!(clip(&"é".repeat(100)).len(), 128);
    }
}
