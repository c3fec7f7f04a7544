//! A call a server runs as a task: toolhost polls it to its end (`tasks/get`, then in 2025
//! `tasks/result`), through whatever session the server has at each look, so that a reconnect
//! (or a toolhost restart, for a task toolhost kept the id of) loses nothing a server kept.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::CallError;
use crate::mcp::lifecycle::Era;
use crate::mcp::tasks::{self, Status, TaskState};
use crate::registry::{Registry, ServerView};
use crate::upstream::UpstreamError;

/// The shortest and longest wait between two looks, whatever the server suggests.
const MIN_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_secs(5);
/// How long one look may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a cancellation is given.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(2);

/// The caller's capabilities (a JSON object, or none) with the tasks extension declared.
pub(super) fn declare_extension(capabilities: Option<&RawValue>) -> Box<RawValue> {
    let mut object: Map<String, Value> = capabilities.and_then(|raw| serde_json::from_str(raw.get()).ok()).unwrap_or_default();
    let extensions = object.entry("extensions").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(extensions) = extensions {
        extensions.insert(tasks::EXTENSION.to_owned(), Value::Object(Map::new()));
    }
    RawValue::from_string(Value::Object(object).to_string()).unwrap_or_default()
}

/// One server task being followed, for a call of `tool` at `generation`.
pub(super) struct Follow<'a> {
    pub(super) registry: &'a Registry,
    pub(super) server: &'a str,
    pub(super) tool: &'a str,
    pub(super) generation: u64,
    /// The call's whole time, for the error that says it ran out.
    pub(super) timeout: Duration,
}

impl Follow<'_> {
    /// Polls the task until it ends or `deadline` passes (the server is then asked to cancel
    /// it), and gives the call's own answer.
    pub(super) async fn to_end(&self, mut state: TaskState, deadline: tokio::time::Instant) -> Result<Box<RawValue>, CallError> {
        let id = state.id.clone();
        while !state.status.is_terminal() {
            let wait = state.poll_interval_ms.map_or(Duration::from_secs(1), Duration::from_millis).clamp(MIN_POLL, MAX_POLL);
            let Some(at) = tokio::time::Instant::now().checked_add(wait).filter(|at| *at < deadline) else {
                cancel(self.registry, self.server, &id).await;
                return Err(self.expired());
            };
            tokio::time::sleep_until(at).await;
            let answer = self.ask(tasks::METHOD_GET, &id, deadline).await?;
            state = tasks::state(&answer).ok_or_else(|| self.invalid("its tasks/get answer is not a task"))?;
        }
        match (state.status, self.era()) {
            (Status::Cancelled, _) => Err(CallError::Upstream {
                server: self.server.to_owned(),
                tool: self.tool.to_owned(),
                generation: self.generation,
                code: crate::mcp::jsonrpc::code::INTERNAL_ERROR,
                message: format!("the server cancelled its task {id}{}", state.message.map(|m| format!(": {m}")).unwrap_or_default()),
            }),
            // 2026: the end is inline.
            (_, Era::Modern) => match (state.result, state.error) {
                (Some(result), _) => Ok(result),
                (None, Some((code, message))) => Err(self.upstream(code, message)),
                (None, None) => Err(self.invalid("its ended task carries neither a result nor an error")),
            },
            // 2025: the call's own answer, from tasks/result.
            (_, Era::Legacy) => self.ask(tasks::METHOD_RESULT, &id, deadline).await,
        }
    }

    /// One request about the task, on the server's current session.
    async fn ask(&self, method: &str, id: &str, deadline: tokio::time::Instant) -> Result<Box<RawValue>, CallError> {
        let Some(view) = available(self.registry, self.server, deadline).await else { return Err(self.expired()) };
        let Some(session) = view.session().cloned() else { return Err(self.expired()) };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now()).min(LOOK_TIMEOUT);
        match session.request(method, Some(&tasks::params(id)), left, false).await {
            Ok(answer) => Ok(answer),
            Err(UpstreamError::Rpc(error)) if error.code == crate::mcp::jsonrpc::code::INVALID_PARAMS => Err(CallError::SessionLost {
                server: self.server.to_owned(),
                tool: self.tool.to_owned(),
                generation: self.generation,
                detail: Some(format!("the server no longer knows its task {id} ({})", error.message)),
            }),
            Err(UpstreamError::Rpc(error)) => Err(self.upstream(error.code, error.message)),
            // The session went (a reconnect): the next look uses the next session.
            Err(_) if tokio::time::Instant::now() < deadline => Box::pin(self.ask(method, id, deadline)).await,
            Err(_) => Err(self.expired()),
        }
    }

    fn era(&self) -> Era {
        self.registry.server(self.server).and_then(|view| view.hello().map(|hello| hello.era)).unwrap_or(Era::Legacy)
    }

    fn expired(&self) -> CallError {
        CallError::DeadlineExceeded {
            server: self.server.to_owned(),
            tool: self.tool.to_owned(),
            generation: self.generation,
            after: self.timeout,
        }
    }

    fn invalid(&self, message: &str) -> CallError {
        CallError::InvalidResult {
            server: self.server.to_owned(),
            tool: self.tool.to_owned(),
            generation: self.generation,
            message: message.to_owned(),
        }
    }

    fn upstream(&self, code: i64, message: String) -> CallError {
        CallError::Upstream { server: self.server.to_owned(), tool: self.tool.to_owned(), generation: self.generation, code, message }
    }
}

/// The server as soon as it has a session, or `None` if that takes past `deadline`.
pub(super) async fn available(registry: &Registry, server: &str, deadline: tokio::time::Instant) -> Option<Arc<ServerView>> {
    let mut updates = registry.subscribe_status();
    loop {
        updates.borrow_and_update();
        if let Some(view) = registry.server(server).filter(|view| view.is_available() && view.session().is_some()) {
            return Some(view);
        }
        tokio::select! {
            changed = updates.changed() => changed.ok()?,
            () = tokio::time::sleep_until(deadline) => return None,
        }
    }
}

/// Asks `server` to cancel its task `id`, briefly; a server that cannot is left to the task's
/// own TTL.
pub(super) async fn cancel(registry: &Registry, server: &str, id: &str) {
    let Some(session) = registry.server(server).and_then(|view| view.session().cloned()) else { return };
    if let Err(error) = session.request(tasks::METHOD_CANCEL, Some(&tasks::params(id)), CANCEL_TIMEOUT, false).await {
        tracing::debug!(%server, task = %id, %error, "the server did not cancel its task");
    }
}
