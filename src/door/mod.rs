//! The one face of the front doors (the gRPC API, the MCP endpoint, the console): they name
//! nothing below it (`.ci/door-face`). [`Door`] is the agent side: around a tool call, the
//! access decision, the refusal that looks exactly like absence, the request's fields
//! normalised, the call itself and its audit record ([`call`]: one file per step); search and every read of
//! the catalog under the caller's policy. [`operator::Operator`] is the operator side. The doors
//! read the catalog through [`view`]'s types ([`reads`]: search, one tool, history), speak
//! [`model`]'s nouns, fail with [`error::DoorError`] and build their spans with
//! [`observe::DoorSpan`]. One implementation, so that the doors cannot drift apart.

pub mod approvals;
mod call;
pub mod changes;
pub mod error;
pub mod limits;
pub mod model;
pub mod observe;
pub mod operator;
pub mod paging;
pub mod reads;
pub mod reload;
pub mod tasks;
pub mod view;

pub use reads::{Hit, SearchError, ServerHistory};

use std::sync::Arc;
use std::time::Instant;

use crate::access::{Access, Caller, Identity, Refusal};
use crate::audit::Auditor;
use crate::calls::{CallError, Calls, Continuations, ToolRef};
use crate::catalog::integrity::Hold;
use crate::catalog::names::{self, ToolName};
use crate::registry::{CatalogSnapshot, Registry, ServerView};
use crate::store::Store;

/// The call gate shared by every front door. Cheap to clone.
#[derive(Clone)]
pub struct Door {
    registry: Arc<Registry>,
    calls: Calls,
    access: Arc<Access>,
    auditor: Auditor,
    store: Store,
    /// Calls waiting for their callers' answers to a server's input requests; in memory only.
    continuations: Continuations,
    /// Calls run as tasks; in the store.
    tasks: tasks::Tasks,
    /// Calls waiting for, or bound by, a person's approval; in the store.
    approvals: approvals::Approvals,
}

impl Door {
    pub fn new(
        registry: Arc<Registry>,
        calls: Calls,
        access: Arc<Access>,
        auditor: Auditor,
        store: Store,
        tasks: tasks::Tasks,
        approvals: approvals::Approvals,
    ) -> Door {
        Door { registry, calls, access, auditor, store, continuations: Continuations::default(), tasks, approvals }
    }

    /// The approval requests (of `status`, or all), newest first: an operator's to read.
    ///
    /// # Errors
    /// Not an operator; the store.
    pub async fn list_approvals(
        &self,
        operator: &Caller,
        status: Option<crate::store::call_approvals::ApprovalStatus>,
    ) -> Result<Vec<crate::store::call_approvals::ApprovalRecord>, error::DoorError> {
        operator.require_admin()?;
        Ok(self.approvals.list(status).await?)
    }

    /// One approval request: an operator's to read.
    ///
    /// # Errors
    /// Not an operator; no such request; the store.
    pub async fn approval(&self, operator: &Caller, id: &str) -> Result<crate::store::call_approvals::ApprovalRecord, error::DoorError> {
        operator.require_admin()?;
        let record = self.approvals.get(id).await?;
        Ok(record.ok_or_else(|| approvals::DecideError::Unknown(truncate(id.to_owned(), 128)))?)
    }

    /// The definition an approval request binds, while it is still its tool's current one.
    pub fn bound_definition(&self, record: &crate::store::call_approvals::ApprovalRecord) -> Option<crate::catalog::model::ToolDef> {
        let tool = ToolRef::Qualified(record.qualified_name.clone());
        self.with_current_definition(&tool, |tool| (tool.hash == record.definition_hash).then(|| tool.clone())).flatten()
    }

    /// `read` of the current definition of the tool `tool` names, if its server offers it now.
    fn with_current_definition<T>(&self, tool: &ToolRef, read: impl FnOnce(&crate::catalog::model::ToolDef) -> T) -> Option<T> {
        let (view, idx) = crate::calls::locate(&self.registry.snapshot().servers, tool)?;
        view.generation()?.tools.get(idx).map(read)
    }

    /// An operator approves or denies a pending call (with a reason); audited.
    ///
    /// # Errors
    /// [`approvals::DecideError`]; a caller that is no operator is told the request does not exist.
    pub async fn decide_approval(
        &self,
        operator: &Caller,
        id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<crate::store::call_approvals::ApprovalRecord, approvals::DecideError> {
        if !operator.agent.admin {
            return Err(approvals::DecideError::Unknown(truncate(id.to_owned(), 128)));
        }
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let record = self.approvals.decide(operator, id, approve, reason).await?;
        let decision = if approve { "approved" } else { "denied" };
        self.metrics().record_approval_decision(names::server_of(&record.qualified_name).unwrap_or_default(), decision);
        call::record::event(self, operator, &record.qualified_name, format!("approval_decided:{}:{decision}", record.id), started);
        Ok(record)
    }

    /// The daemon's tasks (reading, waiting, cancelling; [`Door::start_task`] starts one).
    pub fn tasks(&self) -> &tasks::Tasks {
        &self.tasks
    }

    /// Starts `call` as a task of `caller`'s: refused (and audited) exactly as the call would be
    /// before anything is sent; else the call runs on the daemon's own task and is audited when
    /// it ends.
    ///
    /// # Errors
    /// [`tasks::TaskError`].
    pub async fn start_task(&self, caller: &Caller, call: tasks::TaskCall) -> Result<tasks::Task, tasks::TaskError> {
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let sent = call::Given {
            arguments: call.arguments.as_deref(),
            expected_hash: call.expected_hash.as_deref(),
            expected_revision: call.expected_revision,
        }
        .normalised();
        let call = tasks::TaskCall {
            arguments: sent.arguments.map(str::to_owned),
            expected_hash: sent.expected_hash.map(str::to_owned),
            expected_revision: sent.expected_revision,
            ttl: call.ttl.filter(|ttl| !ttl.is_zero()),
            tool: call.tool,
        };
        let task = self.tasks.start(self, caller, call).await?;
        // The start in the trail (the call's end follows when it ends, as any call's does).
        call::record::event(self, caller, &task.qualified_name, format!("task_started:{}", task.id), started);
        Ok(task)
    }

    /// Cancels `caller`'s working task, and the task its server runs for it, if any.
    ///
    /// # Errors
    /// [`tasks::TaskError`].
    pub async fn cancel_task(&self, caller: &Caller, id: &str) -> Result<tasks::Task, tasks::TaskError> {
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let task = self.tasks.cancel(caller, id).await?;
        call::record::event(self, caller, &task.qualified_name, format!("task_cancelled:{}", task.id), started);
        if let (Some(upstream), Some(server)) = (&task.upstream, names::server_of(&task.qualified_name)) {
            self.calls.cancel_upstream_task(server, upstream).await;
        }
        Ok(task)
    }

    /// An operator cancels anyone's working task, and the task its server runs for it, if any.
    ///
    /// # Errors
    /// [`tasks::TaskError`].
    pub async fn cancel_task_as_operator(&self, caller: &Caller, id: &str) -> Result<tasks::Task, tasks::TaskError> {
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let task = self.tasks.cancel_as_operator(caller, id).await?;
        // Whose task it was is in the record's tool and the task's own; who cancelled is the caller.
        call::record::event(self, caller, &task.qualified_name, format!("task_cancelled:{}:{}", task.id, task.agent), started);
        if let (Some(upstream), Some(server)) = (&task.upstream, names::server_of(&task.qualified_name)) {
            self.calls.cancel_upstream_task(server, upstream).await;
        }
        Ok(task)
    }

    /// At start: follows again the tasks a previous daemon left running whose servers keep
    /// them; the others ended with it (see [`tasks::Tasks::recover`]).
    ///
    /// # Errors
    /// [`crate::store::StoreError`].
    pub async fn recover_tasks(&self) -> Result<u64, crate::store::StoreError> {
        self.tasks.recover(self).await
    }

    pub(in crate::door) fn calls(&self) -> &Calls {
        &self.calls
    }

    /// Whether the tool `tool` names supports running as a task, as its current definition says
    /// (`execution.taskSupport`): a 2026 door then answers with a task's handle at once.
    pub fn runs_as_task(&self, tool: &ToolRef) -> bool {
        self.with_current_definition(tool, |definition| definition.fields().task_supporting).unwrap_or(false)
    }

    /// The access policy now: a reload replaces it for the next request.
    pub fn policy(&self) -> Arc<crate::access::Policy> {
        self.access.policy()
    }

    /// Whether the catalog store cannot be written now, and why (the daemon serves on).
    pub fn degraded(&self) -> Option<Arc<str>> {
        self.store.degraded()
    }

    /// `caller`'s own limits now (in flight, rate, quotas).
    ///
    /// # Errors
    /// The store.
    pub async fn own_limits(&self, caller: &Caller) -> Result<limits::AgentLimits, error::DoorError> {
        Ok(limits::read(&self.store, &caller.agent, crate::catalog::record::now_ms()).await?)
    }

    /// The limits of every agent entry `caller` may see (an operator every one, anyone else
    /// their own), each with its calls that ran and were refused lately.
    ///
    /// # Errors
    /// The store.
    pub async fn limits_overview(
        &self,
        caller: &Caller,
        now_ms: i64,
    ) -> Result<Vec<(limits::AgentLimits, limits::Recent)>, error::DoorError> {
        let mut agents = Vec::new();
        for agent in limits::entries_for(caller, &self.access) {
            agents.push((limits::read(&self.store, &agent, now_ms).await?, limits::recent(&self.store, &agent.name, now_ms).await?));
        }
        Ok(agents)
    }

    pub fn metrics(&self) -> &crate::telemetry::metrics::Metrics {
        self.calls.metrics()
    }

    /// The agent entry that admits `identity`.
    ///
    /// # Errors
    /// The [`Refusal`] that turns the caller away.
    pub fn admit(&self, identity: Identity) -> Result<Caller, Refusal> {
        let transport = identity.transport;
        let admitted = self.access.admit(identity);
        // A server's process knocking is an attack, or a server misconfigured to call back:
        // either way the operator reads it in the audit trail.
        if let Err(Refusal::ServerProcess { identity }) = &admitted {
            call::record::server_process(self, identity, transport);
        }
        admitted
    }
}

/// How a door presents tools: with their state (the gRPC API marks a tool held), or as the
/// list of what may be called (MCP, whose clients know no state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presentation {
    WithState,
    Callable,
}

/// The one rule for whether `caller` sees tool `idx` of `view`, used by every listing, search,
/// history and watch path of both doors: a tool its policy lets it use, and, when the tool is
/// held, only an operator, only where the door can mark it held. A held definition has not
/// been reviewed: its description is exactly what must not reach an agent's model.
pub(in crate::door) fn shows_tool(caller: &Caller, view: &ServerView, idx: usize, presentation: Presentation) -> bool {
    caller.agent.may_use(&tool_name(view, idx))
        && (view.held(idx).is_none() || (presentation == Presentation::WithState && caller.agent.admin))
}

/// [`shows_tool`] for a qualified name, judged by the current generation of its server in
/// `snapshot`: names in history and change events, whose tools may have moved since.
pub(in crate::door) fn shows_name(caller: &Caller, snapshot: &CatalogSnapshot, qualified: &str, presentation: Presentation) -> bool {
    if !may_use(caller, snapshot, &ToolRef::Qualified(qualified.to_owned())) {
        return false;
    }
    held_now(snapshot, qualified).is_none() || (presentation == Presentation::WithState && caller.agent.admin)
}

/// Whether `caller`'s policy lets it use `tool`, judged by both its names as `snapshot` holds it.
pub(in crate::door) fn may_use(caller: &Caller, snapshot: &CatalogSnapshot, tool: &ToolRef) -> bool {
    judge(snapshot, tool, |name| caller.agent.may_use(name))
}

/// The names the policy judges tool `idx` of `view` by ([`ToolName`]).
pub(in crate::door) fn tool_name(view: &ServerView, idx: usize) -> ToolName<'_> {
    let qualified = view.qualified().name(idx);
    match view.generation().and_then(|generation| generation.tools.get(idx)) {
        Some(tool) => ToolName::new(view.name(), &tool.name, qualified),
        None => ToolName::unresolved(qualified),
    }
}

/// `decide` applied to the names the policy judges `tool` by ([`ToolName`]): its server's, its
/// own and its qualified name in `snapshot`; a tool `snapshot` does not hold, by the reference.
pub(in crate::door) fn judge<R>(snapshot: &CatalogSnapshot, tool: &ToolRef, decide: impl FnOnce(&ToolName<'_>) -> R) -> R {
    if let Some((view, idx)) = crate::calls::locate(&snapshot.servers, tool)
        && let Some(own) = view.generation().and_then(|generation| generation.tools.get(idx))
    {
        return decide(&ToolName::new(view.name(), &own.name, view.qualified().name(idx)));
    }
    let qualified = tool.qualified();
    match tool {
        ToolRef::ServerTool { server, name } => decide(&ToolName::new(server, name, &qualified)),
        ToolRef::Qualified(_) => decide(&ToolName::unresolved(&qualified)),
    }
}

/// Why the tool `qualified` is held in its server's current generation in `snapshot`, if it is.
pub(in crate::door) fn held_now(snapshot: &CatalogSnapshot, qualified: &str) -> Option<Hold> {
    let view = snapshot.servers.get(names::server_of(qualified)?)?;
    view.held(view.qualified().position(qualified)?)
}

/// Whether a non-operator may know that this server exists: it shows the agent at least one
/// tool. Operators see every server.
pub(in crate::door) fn server_visible(caller: &Caller, view: &ServerView) -> bool {
    if caller.agent.admin {
        return true;
    }
    view.generation()
        .is_some_and(|generation| (0..generation.tools.len()).any(|idx| shows_tool(caller, view, idx, Presentation::WithState)))
}

/// The error a caller gets for a tool it may not use: for an operator, the truth; for anyone
/// else, exactly what a tool (or server) that does not exist would give.
pub(in crate::door) fn refused_tool(caller: &Caller, snapshot: &CatalogSnapshot, target: &ToolRef) -> CallError {
    let (server, shown) = match target {
        ToolRef::Qualified(qualified) => (names::server_of(qualified).unwrap_or_default(), qualified.clone()),
        ToolRef::ServerTool { server, name } => (server.as_str(), name.clone()),
    };
    if caller.agent.admin {
        return CallError::NotAllowed { agent: caller.agent.name.to_string(), tool: shown };
    }
    let visible = snapshot.servers.get(server).is_some_and(|view| server_visible(caller, view));
    match target {
        ToolRef::ServerTool { server, .. } if !visible => CallError::UnknownServer(server.clone()),
        ToolRef::ServerTool { server, name } => CallError::UnknownTool { server: Some(server.clone()), tool: name.clone() },
        ToolRef::Qualified(qualified) => CallError::UnknownTool { server: None, tool: qualified.clone() },
    }
}

/// `text` cut to at most `max` bytes on a character boundary, marked when it was cut.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// `text` if it says anything.
fn given(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|text| !text.is_empty())
}
