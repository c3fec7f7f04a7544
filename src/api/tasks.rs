//! The task RPCs: `StartTask`, `GetTask`, `GetTaskResult`, `WatchTask`, `CancelTask`,
//! `ListTasks`. The tasks themselves are the door's (`door::tasks`); this is their gRPC shape.

use std::time::Duration;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::{ToolHostService, grpc_deadline};
use crate::door::error::DoorError;
use crate::door::model::{TaskStatus, ToolRef, deadline_after, names};
use crate::door::tasks::{MAX_PAGE, POLL_INTERVAL, Task, TaskCall, expires_at, failure_of};

/// How long `GetTaskResult` waits for a task's end when the caller set no deadline.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The longest a `WatchTask` stream waits between two looks (the task's TTL ends it anyway).
const WATCH_LOOK: Duration = Duration::from_secs(3600);

impl ToolHostService {
    pub(crate) async fn start_task_in(&self, request: Request<pb::StartTaskRequest>) -> Result<pb::Task, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let call = request.call.unwrap_or_default();
        let Some(tool) = ToolRef::from_parts(&call.qualified_name, &call.server, &call.name) else {
            return Err(DoorError::invalid("name the tool by call.qualified_name, or by call.server and call.name").into());
        };
        if !call.continuation_token.is_empty() || !call.input_responses_json.is_empty() {
            return Err(DoorError::invalid("a task starts a call; answer input requests with CallTool").into());
        }
        let call = TaskCall {
            tool,
            // Empty fields are "not given": the door normalises every door's request alike.
            arguments: Some(call.arguments_json),
            expected_hash: Some(call.expected_definition_hash),
            expected_revision: Some(call.expected_catalog_revision),
            ttl: Some(Duration::from_millis(request.ttl_ms)),
        };
        let task = self.door.start_task(&caller, call).await?;
        Ok(task_message(&task))
    }

    pub(crate) async fn get_task_in(&self, request: Request<pb::TaskRequest>) -> Result<pb::Task, Status> {
        let caller = self.admit(&request)?;
        Ok(task_message(&self.door.tasks().get(&caller, &request.get_ref().task_id).await?))
    }

    pub(crate) async fn get_task_result_in(&self, request: Request<pb::TaskRequest>) -> Result<pb::TaskResult, Status> {
        let caller = self.admit(&request)?;
        let wait = grpc_deadline(request.metadata()).map_or(DEFAULT_WAIT, |deadline| deadline.saturating_sub(deadline / 10));
        let until = deadline_after(wait);
        let task = self.door.tasks().wait(&caller, &request.get_ref().task_id, until).await?;
        if let Some(error) = failure_of(&task) {
            return Err(error.into());
        }
        let result = task.result.as_deref().map(|raw| call_response(&task, raw)).transpose()?;
        Ok(pb::TaskResult { task: Some(task_message(&task)), result })
    }

    pub(crate) async fn cancel_task_in(&self, request: Request<pb::TaskRequest>) -> Result<pb::Task, Status> {
        let caller = self.admit(&request)?;
        Ok(task_message(&self.door.cancel_task(&caller, &request.get_ref().task_id).await?))
    }

    pub(crate) async fn list_tasks_in(&self, request: Request<pb::ListTasksRequest>) -> Result<pb::ListTasksResponse, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let size = if request.page_size == 0 { MAX_PAGE } else { request.page_size };
        let after = Some(request.page_token.as_str()).filter(|token| !token.is_empty());
        let (tasks, next) = self.door.tasks().page(&caller, after, size).await?;
        Ok(pb::ListTasksResponse { tasks: tasks.iter().map(task_message).collect(), next_page_token: next.unwrap_or_default() })
    }

    pub(crate) async fn watch_task_in(
        &self,
        request: Request<pb::TaskRequest>,
    ) -> Result<ReceiverStream<Result<pb::Task, Status>>, Status> {
        let caller = self.admit(&request)?;
        let id = request.into_inner().task_id;
        let tasks = self.door.tasks().clone();
        let first = tasks.get(&caller, &id).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let cancel = self.watchers.cancel.clone();
        self.watchers.tracker.spawn(async move {
            let mut task = first;
            loop {
                let ended = task.status.is_terminal();
                if tx.send(Ok(task_message(&task))).await.is_err() || ended {
                    return;
                }
                let next = tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tx.closed() => return,
                    next = tasks.wait(&caller, &id, deadline_after(WATCH_LOOK)) => next,
                };
                task = match next {
                    Ok(task) => task,
                    Err(error) => {
                        let _ = tx.send(Err(error.into())).await;
                        return;
                    }
                };
            }
        });
        Ok(ReceiverStream::new(rx))
    }
}

fn task_message(task: &Task) -> pb::Task {
    let status = match task.status {
        TaskStatus::Working => pb::TaskStatus::Working,
        TaskStatus::Completed => pb::TaskStatus::Completed,
        TaskStatus::Failed => pb::TaskStatus::Failed,
        TaskStatus::Cancelled => pb::TaskStatus::Cancelled,
    };
    pb::Task {
        task_id: task.id.clone(),
        status: status.into(),
        status_message: task.status_message.clone().unwrap_or_default(),
        qualified_name: task.qualified_name.clone(),
        created_at_unix_ms: task.created_at_ms,
        updated_at_unix_ms: task.updated_at_ms,
        ttl_ms: task.ttl_ms,
        expires_at_unix_ms: expires_at(task),
        poll_interval_ms: u64::try_from(POLL_INTERVAL.as_millis()).unwrap_or(u64::MAX),
        outcome: task.outcome.clone().unwrap_or_default(),
        result_bytes: task.result_bytes,
    }
}

/// The kept result as CallTool would have answered it.
fn call_response(task: &Task, raw: &str) -> Result<pb::CallToolResponse, Status> {
    let raw: Box<serde_json::value::RawValue> =
        serde_json::from_str(raw).map_err(|error| DoorError::internal(&format!("a kept task result is unreadable: {error}")))?;
    let outcome =
        crate::mcp::tools::parse_call_result(&raw).map_err(|error| DoorError::internal(&format!("a kept task result: {error}")))?;
    let (generation, definition_hash) = task.ran_against.clone().unwrap_or_default();
    Ok(pb::CallToolResponse {
        content_json: outcome.content.get().to_owned(),
        structured_content_json: outcome.structured_content.map(|s| s.get().to_owned()).unwrap_or_default(),
        is_error: outcome.is_error,
        server: names::server_of(&task.qualified_name).unwrap_or_default().to_owned(),
        name: String::new(),
        generation,
        definition_hash,
        input_required: None,
    })
}
