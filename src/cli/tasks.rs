//! `toolhost call --task`, `toolhost tasks`, `toolhost task ID [--wait]`, `toolhost cancel ID`.

use std::time::Duration;

use serde_json::json;

use super::output::{Printer, rfc3339};
use super::{Client, ClientError, tool_call};
use crate::api::pb;

/// How long one `GetTaskResult` waits before `--wait` asks again.
const WAIT_STEP: Duration = Duration::from_secs(60);

pub(super) async fn start(
    client: &mut Client,
    out: &mut Printer,
    name: &str,
    args: Option<String>,
    hash: Option<String>,
    ttl: Option<&str>,
) -> Result<(), ClientError> {
    let ttl = match ttl {
        Some(text) => crate::config::parse_duration(text, Duration::from_secs(30 * 24 * 3600))
            .map_err(|problem| ClientError::Usage(format!("--ttl: {problem}")))?,
        None => Duration::ZERO,
    };
    let request = pb::StartTaskRequest {
        call: Some(tool_call(name.to_owned(), args, hash)?),
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    };
    let task = client.start_task(request).await?.into_inner();
    if out.is_json() {
        out.json_line(&task_json(&task))?;
    } else {
        out.line(&format!(
            "task {} started ({}); `toolhost task {} --wait` prints its result",
            task.task_id, task.qualified_name, task.task_id
        ))?;
    }
    Ok(())
}

pub(super) async fn list(client: &mut Client, out: &mut Printer) -> Result<(), ClientError> {
    let mut tasks = Vec::new();
    let mut request = pb::ListTasksRequest::default();
    loop {
        let page = client.list_tasks(request.clone()).await?.into_inner();
        tasks.extend(page.tasks);
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    if out.is_json() {
        out.json_line(&json!({ "tasks": tasks.iter().map(task_json).collect::<Vec<_>>() }))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|task| {
            vec![
                task.task_id.clone(),
                status_name(task.status).to_owned(),
                task.qualified_name.clone(),
                rfc3339(task.created_at_unix_ms),
                task.outcome.clone(),
            ]
        })
        .collect();
    out.table(&["TASK", "STATUS", "TOOL", "CREATED", "OUTCOME"], &rows)?;
    Ok(())
}

pub(super) async fn show(client: &mut Client, out: &mut Printer, id: &str, wait: bool) -> Result<(), ClientError> {
    if !wait {
        let task = client.get_task(pb::TaskRequest { task_id: id.to_owned() }).await?.into_inner();
        return print_task(out, &task);
    }
    loop {
        let mut request = tonic::Request::new(pb::TaskRequest { task_id: id.to_owned() });
        request.set_timeout(WAIT_STEP);
        let answer = client.get_task_result(request).await?.into_inner();
        let task = answer.task.unwrap_or_default();
        match (answer.result, task.status()) {
            (Some(result), _) => {
                out.call(&result)?;
                return if result.is_error { Err(ClientError::ToolError) } else { Ok(()) };
            }
            (None, pb::TaskStatus::Working) => {}
            (None, _) => return print_task(out, &task),
        }
    }
}

pub(super) async fn cancel(client: &mut Client, out: &mut Printer, id: &str) -> Result<(), ClientError> {
    let task = client.cancel_task(pb::TaskRequest { task_id: id.to_owned() }).await?.into_inner();
    print_task(out, &task)
}

fn print_task(out: &mut Printer, task: &pb::Task) -> Result<(), ClientError> {
    if out.is_json() {
        out.json_line(&task_json(task))?;
    } else {
        let outcome = if task.outcome.is_empty() { String::new() } else { format!(", outcome {}", task.outcome) };
        out.line(&format!(
            "task {}: {} ({}{outcome}): {}",
            task.task_id,
            status_name(task.status),
            task.qualified_name,
            task.status_message
        ))?;
    }
    Ok(())
}

fn task_json(task: &pb::Task) -> serde_json::Value {
    json!({
        "taskId": task.task_id, "status": status_name(task.status), "statusMessage": task.status_message,
        "tool": task.qualified_name, "createdAtUnixMs": task.created_at_unix_ms, "updatedAtUnixMs": task.updated_at_unix_ms,
        "ttlMs": task.ttl_ms, "expiresAtUnixMs": task.expires_at_unix_ms, "outcome": task.outcome, "resultBytes": task.result_bytes,
    })
}

fn status_name(status: i32) -> &'static str {
    match pb::TaskStatus::try_from(status).unwrap_or_default() {
        pb::TaskStatus::Working => "working",
        pb::TaskStatus::Completed => "completed",
        pb::TaskStatus::Failed => "failed",
        pb::TaskStatus::Cancelled => "cancelled",
        pb::TaskStatus::Unspecified => "unknown",
    }
}
