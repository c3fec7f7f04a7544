//! MCP tasks on the wire, without I/O: what toolhost reads when a server runs a `tools/call` as
//! a task. 2025-11-25 (experimental): `params.task` asks, the answer is `{"task": Task}`,
//! `tasks/get` polls, `tasks/result` gives the call's own answer. 2026-07-28 (the
//! `io.modelcontextprotocol/tasks` extension): the client declares the extension, the answer is
//! `{"resultType": "task", …Task}`, and `tasks/get` carries the result or error once done.

use serde::Deserialize;
use serde_json::value::RawValue;

pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
pub const METHOD_GET: &str = "tasks/get";
pub const METHOD_RESULT: &str = "tasks/result";
pub const METHOD_CANCEL: &str = "tasks/cancel";
/// 2025-11-25 only.
pub const METHOD_LIST: &str = "tasks/list";
/// 2026-07-28 only (input for a task that waits for some).
pub const METHOD_UPDATE: &str = "tasks/update";
/// The `_meta` key that ties a message to its task (2025-11-25).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A task as a server reports it.
#[derive(Debug, Clone)]
pub struct TaskState {
    pub id: String,
    pub status: Status,
    pub message: Option<String>,
    /// How long the server asks to wait before the next look.
    pub poll_interval_ms: Option<u64>,
    /// 2026-07-28: the call's result, inline once the task completed (or failed with a result).
    pub result: Option<Box<RawValue>>,
    /// 2026-07-28: the JSON-RPC error of a task that failed.
    pub error: Option<(i64, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "taskId")]
    task_id: String,
    status: &'a str,
    #[serde(rename = "statusMessage", default)]
    status_message: Option<String>,
    #[serde(rename = "pollInterval", default)]
    poll_interval: Option<u64>,
    #[serde(rename = "pollIntervalMs", default)]
    poll_interval_ms: Option<u64>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireError {
    code: i64,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct Created<'a> {
    #[serde(borrow, default)]
    task: Option<&'a RawValue>,
    #[serde(rename = "resultType", default)]
    result_type: Option<&'a str>,
}

/// The task a `tools/call` answer hands back instead of a result, if it is one.
#[must_use]
pub fn created(result: &RawValue) -> Option<TaskState> {
    let created: Created<'_> = serde_json::from_str(result.get()).ok()?;
    match (created.task, created.result_type) {
        (Some(task), _) => state(task),
        (None, Some("task")) => state(result),
        _ => None,
    }
}

/// A `tasks/get` (or `tasks/cancel`) answer.
#[must_use]
pub fn state(result: &RawValue) -> Option<TaskState> {
    let wire: Wire<'_> = serde_json::from_str(result.get()).ok()?;
    let status = match wire.status {
        "working" => Status::Working,
        "input_required" => Status::InputRequired,
        "completed" => Status::Completed,
        "failed" => Status::Failed,
        "cancelled" => Status::Cancelled,
        _ => return None,
    };
    Some(TaskState {
        id: wire.task_id,
        status,
        message: wire.status_message,
        poll_interval_ms: wire.poll_interval_ms.or(wire.poll_interval),
        result: wire.result.map(ToOwned::to_owned),
        error: wire.error.map(|error| (error.code, error.message)),
    })
}

/// `{"taskId": ID}`, the params of `tasks/get`, `tasks/result` and `tasks/cancel`.
#[must_use]
pub fn params(id: &str) -> Box<RawValue> {
    let text = serde_json::json!({ "taskId": id }).to_string();
    RawValue::from_string(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn both_eras_handles_and_states_are_read() {
        let legacy = created(&raw(
            r#"{"task":{"taskId":"t1","status":"working","createdAt":"x","lastUpdatedAt":"x","ttl":1000,"pollInterval":500}}"#,
        ))
        .unwrap();
        assert_eq!((legacy.id.as_str(), legacy.status, legacy.poll_interval_ms), ("t1", Status::Working, Some(500)));
        let modern = created(&raw(r#"{"resultType":"task","taskId":"t2","status":"working","ttlMs":5,"pollIntervalMs":250}"#)).unwrap();
        assert_eq!((modern.id.as_str(), modern.poll_interval_ms), ("t2", Some(250)));
        assert!(created(&raw(r#"{"content":[]}"#)).is_none(), "a plain result is no task");
        let done = state(&raw(r#"{"taskId":"t2","status":"completed","result":{"content":[{"type":"text","text":"ok"}]}}"#)).unwrap();
        assert!(done.status.is_terminal() && done.result.unwrap().get().contains("ok"));
        let failed = state(&raw(r#"{"taskId":"t3","status":"failed","error":{"code":-32603,"message":"boom"}}"#)).unwrap();
        assert_eq!(failed.error, Some((-32603, "boom".to_owned())));
        assert!(state(&raw(r#"{"taskId":"t4","status":"exploded"}"#)).is_none(), "an unknown status is not guessed at");
    }
}
