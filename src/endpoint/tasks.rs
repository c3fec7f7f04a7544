//! Tasks over MCP, in both eras' shapes, for the tasks the door runs (`door::tasks`).
//!
//! 2025-11-25 (experimental tasks): a `tools/call` with `params.task` answers `{"task": …}`;
//! `tasks/get`, `tasks/result` (waits for the end, then answers as the call would have),
//! `tasks/list`, `tasks/cancel`; `ttl` and `pollInterval`. 2026-07-28 (the
//! `io.modelcontextprotocol/tasks` extension): a client that declares the extension in a
//! `tools/call`'s capabilities gets a task handle (`resultType: "task"`, the task's fields
//! inline); `tasks/get` carries the result or the error once the task has ended; `ttlMs` and
//! `pollIntervalMs`. Either way, a task is its caller's alone: another caller's id is unknown.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::message::Params;
use super::{Endpoint, Era, View, reply};
use crate::door::error::DoorError;
use crate::door::model::{TaskStatus, deadline_after};
use crate::door::tasks::{MAX_PAGE, POLL_INTERVAL, Task, TaskCall, TaskError, failure_of};
use crate::mcp::jsonrpc::code::{INTERNAL_ERROR, INVALID_PARAMS};

pub(super) use crate::mcp::tasks::{METHOD_CANCEL, METHOD_GET, METHOD_LIST, METHOD_RESULT, METHOD_UPDATE};
/// Whether `method` names a task in `params.taskId` (and so, over HTTP, in `Mcp-Name`).
pub(super) fn names_a_task(method: &str) -> bool {
    matches!(method, METHOD_GET | METHOD_CANCEL | METHOD_UPDATE)
}
/// The longest `tasks/result` waits in one request; the client asks again after.
const RESULT_WAIT: Duration = Duration::from_secs(300);

impl Endpoint {
    /// Starts `call` as a task and answers with its handle. In 2026 the server decides: a tool
    /// its server calls task-supporting is always a task; any other call answers plainly if it
    /// ends within `[tasks] answer_within`, else with the handle of the task it goes on as.
    pub(super) async fn start_task(&self, view: &View, id: &RawValue, call: TaskCall, era: Era) -> String {
        let supporting = self.door.runs_as_task(&call.tool);
        let task = match self.door.start_task(&view.caller, call).await {
            Ok(task) => task,
            Err(error) => return task_error(id, error),
        };
        if era == Era::Modern && !supporting {
            let ended = self.door.tasks().wait(&view.caller, &task.id, deadline_after(self.door.tasks().answer_within())).await;
            if let Ok(ended) = ended {
                let answer = match (failure_of(&ended), ended.result.as_deref().and_then(|raw| RawValue::from_string(raw.to_owned()).ok()))
                {
                    (Some(error), _) => Some(reply::call_error(id, &error)),
                    (None, Some(raw)) => Some(reply::call_result(id, &raw, era)),
                    (None, None) => None,
                };
                if let Some(answer) = answer {
                    // Answered plainly: the task was never handed out.
                    self.door.tasks().discard(&ended.id).await;
                    return answer;
                }
            }
        }
        reply::result(id, &created(&task, era))
    }

    /// `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`; in 2026 only for a client that
    /// declares the extension, and without `tasks/result` and `tasks/list` (the extension has none).
    pub(super) async fn task_request(&self, view: &View, id: &RawValue, method: &str, params: &Params<'_>, era: Era) -> String {
        if era == Era::Modern {
            if matches!(method, METHOD_RESULT | METHOD_LIST) {
                let message = format!("{method} is not part of the 2026-07-28 tasks extension: tasks/get carries the result");
                return reply::error(id, crate::mcp::jsonrpc::code::METHOD_NOT_FOUND, &message, None);
            }
            if !super::message::declares_tasks(params.meta.as_ref().and_then(|meta| meta.client_capabilities)) {
                let data =
                    serde_json::json!({ "requiredCapabilities": { "extensions": { crate::mcp::tasks::EXTENSION: {} } } }).to_string();
                return reply::error(
                    id,
                    crate::mcp::modern::MISSING_CAPABILITY,
                    "Missing required client capability: declare the io.modelcontextprotocol/tasks extension",
                    RawValue::from_string(data).ok().as_deref(),
                );
            }
        } else if method == METHOD_UPDATE {
            return reply::error(
                id,
                crate::mcp::jsonrpc::code::METHOD_NOT_FOUND,
                "tasks/update belongs to the 2026-07-28 tasks extension",
                None,
            );
        }
        let tasks = self.door.tasks();
        if method == METHOD_LIST {
            return match tasks.page(&view.caller, params.cursor.as_deref(), MAX_PAGE).await {
                Ok((listed, next)) => {
                    let mut result = Map::new();
                    result.insert("tasks".into(), Value::Array(listed.iter().map(|task| Value::Object(fields(task, era))).collect()));
                    if let Some(next) = next {
                        result.insert("nextCursor".into(), Value::from(next));
                    }
                    reply::result(id, &complete(result, era))
                }
                Err(error) => task_error(id, error),
            };
        }
        let Some(task_id) = params.task_id.as_deref() else {
            return reply::error(id, INVALID_PARAMS, &format!("{method} needs params.taskId"), None);
        };
        let found = match method {
            // 2026: an empty acknowledgement, the same for a task that already ended.
            METHOD_CANCEL if era == Era::Modern => {
                return match self.door.cancel_task(&view.caller, task_id).await {
                    Ok(_) | Err(TaskError::Ended { .. }) => reply::result(id, r#"{"resultType":"complete"}"#),
                    Err(error) => task_error(id, error),
                };
            }
            // toolhost's tasks never ask for input (a call that needs some fails its task).
            METHOD_UPDATE => match tasks.get(&view.caller, task_id).await {
                Ok(_) => return reply::error(id, INVALID_PARAMS, "this task does not wait for input", None),
                Err(error) => return task_error(id, error),
            },
            METHOD_CANCEL => self.door.cancel_task(&view.caller, task_id).await,
            METHOD_RESULT => tasks.wait(&view.caller, task_id, deadline_after(RESULT_WAIT)).await,
            _ => tasks.get(&view.caller, task_id).await,
        };
        let task = match found {
            Ok(task) => task,
            Err(error) => return task_error(id, error),
        };
        match method {
            METHOD_RESULT => task_result(id, &task),
            _ => reply::result(id, &complete(detailed(&task, era), era)),
        }
    }
}

/// The answer to a task-augmented `tools/call`.
fn created(task: &Task, era: Era) -> String {
    let fields = fields(task, era);
    match era {
        Era::Legacy => {
            let mut result = Map::new();
            result.insert("task".into(), Value::Object(fields));
            Value::Object(result).to_string()
        }
        Era::Modern => {
            let mut result = Map::new();
            result.insert("resultType".into(), Value::from("task"));
            result.extend(fields);
            Value::Object(result).to_string()
        }
    }
}

/// A task's fields in `era`'s names.
fn fields(task: &Task, era: Era) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("taskId".into(), Value::from(task.id.as_str()));
    // 2025 fails a task whose tool reported an error; 2026 completes it (with `isError`), and
    // keeps "failed" for a call that produced no result.
    let status = match (task.status, era, task.result.is_some()) {
        (TaskStatus::Failed, Era::Modern, true) => "completed",
        (status, _, _) => status.as_str(),
    };
    fields.insert("status".into(), Value::from(status));
    if let Some(message) = &task.status_message {
        fields.insert("statusMessage".into(), Value::from(message.as_str()));
    }
    fields.insert("createdAt".into(), Value::from(timestamp(task.created_at_ms)));
    fields.insert("lastUpdatedAt".into(), Value::from(timestamp(task.updated_at_ms)));
    let poll = u64::try_from(POLL_INTERVAL.as_millis()).unwrap_or(u64::MAX);
    let (ttl, poll_interval) = match era {
        Era::Legacy => ("ttl", "pollInterval"),
        Era::Modern => ("ttlMs", "pollIntervalMs"),
    };
    fields.insert(ttl.into(), Value::from(task.ttl_ms));
    if !task.status.is_terminal() {
        fields.insert(poll_interval.into(), Value::from(poll));
    }
    fields
}

/// A task as `tasks/get` and `tasks/cancel` show it: in 2026, with its result or error once
/// it has ended.
fn detailed(task: &Task, era: Era) -> Map<String, Value> {
    let mut fields = fields(task, era);
    if era == Era::Modern {
        if let Some(result) = task.result.as_deref().and_then(|raw| serde_json::from_str::<Value>(raw).ok()) {
            fields.insert("result".into(), result);
        } else if let Some(error) = failure_of(task) {
            let line = reply::call_error(&null_id(), &error);
            if let Some(error) = serde_json::from_str::<Value>(&line).ok().and_then(|mut line| line.get_mut("error").map(Value::take)) {
                fields.insert("error".into(), error);
            }
        }
    }
    fields
}

/// `tasks/result`: what the call would have answered, tied to its task; a task still working
/// after the wait, or cancelled, is an error that says so.
fn task_result(id: &RawValue, task: &Task) -> String {
    if let Some(error) = failure_of(task) {
        return reply::call_error(id, &error);
    }
    let related = || serde_json::json!({ "taskId": task.id });
    match (task.status, task.result.as_deref()) {
        (_, Some(raw)) => {
            let mut result: Map<String, Value> = serde_json::from_str(raw).unwrap_or_default();
            let meta = result.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert(crate::mcp::tasks::RELATED_TASK.into(), related());
            }
            reply::result(id, &Value::Object(result).to_string())
        }
        (TaskStatus::Cancelled, None) => {
            let data = reply::reason_data("TASK_CANCELLED", &[("task_id", task.id.clone())]);
            reply::error(id, reply::SERVER_ERROR, "the task was cancelled before it ended", Some(&data))
        }
        (_, None) => {
            let data = reply::reason_data("TASK_WORKING", &[("task_id", task.id.clone())]);
            reply::error(id, reply::SERVER_ERROR, "the task is still working; ask again", Some(&data))
        }
    }
}

/// A result object, with `resultType` in 2026.
fn complete(mut result: Map<String, Value>, era: Era) -> String {
    if era == Era::Modern {
        result.insert("resultType".into(), Value::from("complete"));
    }
    Value::Object(result).to_string()
}

/// The JSON-RPC error for a refused task operation: the door's reason and facts, in JSON-RPC's
/// codes (what names no task is the caller's invalid params).
fn task_error(id: &RawValue, error: TaskError) -> String {
    let code = match &error {
        TaskError::Call(error) => return reply::call_error(id, error),
        TaskError::Unknown(_) | TaskError::Ended { .. } => INVALID_PARAMS,
        TaskError::NoRandom | TaskError::Store(_) => INTERNAL_ERROR,
        TaskError::TooManyForAgent { .. } | TaskError::TooMany { .. } | TaskError::StorageFull { .. } | TaskError::ShuttingDown => {
            reply::SERVER_ERROR
        }
    };
    let told = DoorError::from(error);
    let data = (!told.is_internal()).then(|| reply::reason_data(told.reason, &told.facts));
    reply::error(id, code, &told.message, data.as_deref())
}

fn timestamp(unix_ms: i64) -> String {
    let at = UNIX_EPOCH.checked_add(Duration::from_millis(u64::try_from(unix_ms).unwrap_or(0))).unwrap_or(UNIX_EPOCH);
    humantime::format_rfc3339_millis(at).to_string()
}

fn null_id() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_default()
}
