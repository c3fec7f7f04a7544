//! The one face of the front doors (the gRPC API, the MCP endpoint, the console): they name
//! nothing below it (`.ci/door-face`). [`Door`] is the agent side: around a tool call, the
//! access decision, the refusal that looks exactly like absence, the request's fields
//! normalised, the call itself through [`Calls`] and the audit record; search and every read of
//! the catalog under the caller's policy. [`operator::Operator`] is the operator side. The doors
//! speak [`model`]'s nouns, fail with [`error::DoorError`] and build their spans with
//! [`observe::DoorSpan`]. One implementation, so that the doors cannot drift apart.

pub mod approvals;
pub mod changes;
pub mod error;
pub mod limits;
pub mod model;
pub mod observe;
pub mod operator;
pub mod paging;
pub mod reload;
pub mod tasks;

use std::sync::Arc;
use std::time::Instant;

use crate::access::{Access, Caller, Identity, Limited, Refusal};
use crate::audit::{AuditRecord, Auditor};
use crate::calls::{ApprovalError, CallError, CallRequest, CallResult, Calls, ContinuationError, Continuations, Pending, ToolRef};
use crate::catalog::integrity::Hold;
use crate::catalog::names::{self, ToolName};
use crate::config::AuditArguments;
use crate::registry::{CatalogSnapshot, Registry, ServerView};
use crate::store::Store;

/// Search hits fetched beyond the limit, for those the caller's policy then hides.
const SEARCH_OVERFETCH: usize = 4;
/// How long a call waits for a person's approval when neither it nor its server sets a deadline.
const DEFAULT_APPROVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Longest tool name and server name an audit record keeps of what a caller sent.
const AUDIT_NAME_BYTES: usize = 256;
const AUDIT_SERVER_BYTES: usize = 64;

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

/// One search hit: a tool of one server in the searched snapshot, and its score (higher first).
pub struct Hit {
    pub view: Arc<ServerView>,
    pub idx: usize,
    pub score: f64,
}

/// Why a search was refused.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
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
        self.audit_event(operator, &record.qualified_name, format!("approval_decided:{}:{decision}", record.id), started);
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
        let call = tasks::TaskCall {
            arguments: given(call.arguments.as_deref()).map(str::to_owned),
            expected_hash: given(call.expected_hash.as_deref()).map(str::to_owned),
            expected_revision: call.expected_revision.filter(|revision| *revision > 0),
            ttl: call.ttl.filter(|ttl| !ttl.is_zero()),
            ..call
        };
        let task = self.tasks.start(self, caller, call).await?;
        // The start in the trail (the call's end follows when it ends, as any call's does).
        self.audit_event(caller, &task.qualified_name, format!("task_started:{}", task.id), started);
        Ok(task)
    }

    /// What `caller` did about a call of `qualified` that is not the call itself (a task's start
    /// or cancellation, an approval's request or decision), in the trail.
    fn audit_event(&self, caller: &Caller, qualified: &str, outcome: String, started: (i64, Instant)) {
        let server = names::server_of(qualified).unwrap_or_default().to_owned();
        self.auditor.record(AuditRecord {
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
            duration_us: u64::try_from(started.1.elapsed().as_micros()).unwrap_or(u64::MAX),
            arguments: None,
        });
    }

    /// Cancels `caller`'s working task, and the task its server runs for it, if any.
    ///
    /// # Errors
    /// [`tasks::TaskError`].
    pub async fn cancel_task(&self, caller: &Caller, id: &str) -> Result<tasks::Task, tasks::TaskError> {
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let task = self.tasks.cancel(caller, id).await?;
        self.audit_event(caller, &task.qualified_name, format!("task_cancelled:{}", task.id), started);
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
        self.audit_event(caller, &task.qualified_name, format!("task_cancelled:{}:{}", task.id, task.agent), started);
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

    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// What a call of `tool` would be refused for before anything is sent: the caller's policy
    /// (a tool it may not use answers like one that does not exist), the arguments, an unknown,
    /// removed, changed or held tool. A refusal is audited as the call's would be.
    async fn preflight(
        &self,
        caller: &Caller,
        tool: &ToolRef,
        expected_hash: Option<&str>,
        expected_revision: Option<u64>,
        arguments: Option<&str>,
    ) -> Result<(), CallError> {
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let denied = !may_use(caller, &self.registry.snapshot(), tool);
        let checked = if denied {
            Err(refused_tool(caller, &self.registry.snapshot(), tool))
        } else {
            match crate::calls::check_arguments(arguments) {
                Ok(_) => self.calls.preflight(tool, expected_hash, expected_revision).await,
                Err(error) => Err(error),
            }
        };
        if let Err(error) = checked {
            let refused = Err(error);
            self.audit_call(caller, tool, arguments.unwrap_or("{}"), started, &refused, denied);
            return refused.map(|_: CallResult| ());
        }
        Ok(())
    }

    /// Full-text search over exactly the generations one snapshot publishes, in `servers` (all
    /// when empty), keeping at most `limit` hits that the caller sees ([`shows_tool`]) and that
    /// `also` (a profile) lets through. A server the caller may not know of is an unknown server.
    ///
    /// # Errors
    /// [`SearchError`].
    pub async fn search(
        &self,
        caller: &Caller,
        query: &str,
        servers: &[String],
        limit: usize,
        presentation: Presentation,
        also: impl Fn(&ServerView, usize) -> bool,
    ) -> Result<(Arc<CatalogSnapshot>, Vec<Hit>), SearchError> {
        let snapshot = self.registry.snapshot();
        for server in servers {
            if !snapshot.servers.get(server.as_str()).is_some_and(|view| server_visible(caller, view)) {
                return Err(SearchError::UnknownServer(server.clone()));
            }
        }
        // The generation of each server in this snapshot: the index answers for exactly those.
        let generations: Vec<(&str, u64)> = snapshot
            .servers
            .values()
            .filter(|view| servers.is_empty() || servers.iter().any(|s| **s == **view.name()))
            .filter_map(|view| view.generation().map(|generation| (&**view.name(), generation.number)))
            .collect();
        let fetch = u32::try_from(limit.saturating_mul(SEARCH_OVERFETCH)).unwrap_or(u32::MAX);
        let found = self.store.generations().search_words(query, &generations, fetch).await?;
        let mut hits = Vec::with_capacity(limit);
        for (server, name, score) in found {
            let Some(view) = snapshot.servers.get(server.as_str()) else { continue };
            let Some(idx) = view.generation().and_then(|generation| generation.position(&name)) else { continue };
            if !shows_tool(caller, view, idx, presentation) || !also(view, idx) {
                continue;
            }
            hits.push(Hit { view: view.clone(), idx, score });
            if hits.len() == limit {
                break;
            }
        }
        Ok((snapshot, hits))
    }

    /// The catalog now.
    pub fn snapshot(&self) -> Arc<CatalogSnapshot> {
        self.registry.snapshot()
    }

    /// Whether the tool `tool` names supports running as a task, as its current definition says
    /// (`execution.taskSupport`): a 2026 door then answers with a task's handle at once.
    pub fn runs_as_task(&self, tool: &ToolRef) -> bool {
        self.with_current_definition(tool, |definition| definition.fields().task_supporting).unwrap_or(false)
    }

    /// One server's view now.
    pub fn server(&self, name: &str) -> Option<Arc<ServerView>> {
        self.registry.server(name)
    }

    /// The tools `server` offered in `generation`, from the store (a past generation's).
    ///
    /// # Errors
    /// The store.
    pub async fn tools_at(&self, server: &str, generation: u64) -> Result<Vec<crate::catalog::model::ToolDef>, error::DoorError> {
        Ok(self.store.generations().tools_at(server, generation).await?)
    }

    /// The catalog as it was at `revision`, while it is kept (page tokens refer to one).
    pub fn snapshot_at(&self, revision: u64) -> Option<Arc<CatalogSnapshot>> {
        self.registry.snapshot_at(revision)
    }

    /// The catalog's revision, as it changes.
    pub fn revisions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.registry.subscribe()
    }

    /// The access policy now: a reload replaces it for the next request.
    pub fn policy(&self) -> Arc<crate::access::Policy> {
        self.access.policy()
    }

    /// Whether the catalog store cannot be written now, and why (the daemon serves on).
    pub fn degraded(&self) -> Option<Arc<str>> {
        self.store.degraded()
    }

    /// `server`'s generations, newest first, and its latest enumerations, if `caller` may see
    /// the server (else `None`: it answers as one that does not exist).
    ///
    /// # Errors
    /// The store.
    pub async fn server_history(
        &self,
        caller: &Caller,
        server: &str,
        generations: u32,
        enumerations: u32,
    ) -> Result<Option<(Vec<crate::catalog::record::GenerationSummary>, Vec<crate::catalog::record::EnumerationRecord>)>, error::DoorError>
    {
        if !self.registry.server(server).is_some_and(|view| server_visible(caller, &view)) {
            return Ok(None);
        }
        Ok(Some((
            self.store.generations().history(server, generations).await?,
            self.store.generations().enumerations(server, enumerations).await?,
        )))
    }

    /// The definitions `server` offered as tool `name`: `(first generation, last generation if
    /// it is gone, hash)`, newest first. The caller has seen the tool.
    ///
    /// # Errors
    /// The store.
    pub async fn tool_history(&self, server: &str, name: &str, limit: u32) -> Result<Vec<(u64, Option<u64>, String)>, error::DoorError> {
        Ok(self.store.generations().tool_history(server, name, limit).await?)
    }

    /// The definition approvals of `server`'s tools, newest first, those `visible` lets through.
    ///
    /// # Errors
    /// The store.
    pub async fn approval_history(
        &self,
        server: &str,
        limit: u32,
        visible: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, crate::catalog::integrity::Approval)>, error::DoorError> {
        let history = self.store.approvals().history(server, limit).await?;
        Ok(history.into_iter().filter(|(name, _)| visible(name)).collect())
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
            self.auditor.record(AuditRecord {
                at_ms: crate::catalog::record::now_ms(),
                agent: Arc::from("(a server's process)"),
                caller: identity.clone(),
                transport,
                qualified_name: String::new(),
                server: String::new(),
                tool: String::new(),
                generation: 0,
                definition_hash: String::new(),
                outcome: "server_process".to_owned(),
                duration_us: 0,
                arguments: None,
            });
        }
        admitted
    }

    /// A call refused at one of its agent entry's limits: audited and counted.
    fn limited(
        &self,
        caller: &Caller,
        target: &ToolRef,
        arguments: &str,
        started: (i64, Instant),
        refused: &Result<CallResult, CallError>,
    ) {
        if let Err(error @ (CallError::CallerBusy { .. } | CallError::RateLimited { .. } | CallError::QuotaExhausted { .. })) = refused {
            self.calls.metrics().record_limited(&caller.agent.name, error.kind());
        }
        self.audit_call(caller, target, arguments, started, refused, false);
    }

    /// Counts the call against every quota of the caller's entry that covers the tool, in the
    /// store; fails closed when the count cannot be written.
    async fn take_quotas(&self, caller: &Caller, target: &ToolRef) -> Result<(), CallError> {
        if caller.agent.quotas.is_empty() {
            return Ok(());
        }
        let qualified = target.qualified();
        let snapshot = self.registry.snapshot();
        let applies: Vec<_> = judge(&snapshot, target, |tool| caller.agent.quotas.iter().filter(|quota| quota.applies_to(tool)).collect());
        for quota in applies {
            let taken = quota.take(&self.store, &caller.agent.name, crate::catalog::record::now_ms()).await.map_err(|error| {
                CallError::Store(format!("cannot count the call against agent {:?}'s quota: {error}", caller.agent.name))
            })?;
            if let Some(retry_after) = taken {
                return Err(CallError::QuotaExhausted {
                    agent: caller.agent.name.to_string(),
                    tool: qualified.into_owned(),
                    calls: quota.calls,
                    per: quota.per,
                    retry_after,
                });
            }
        }
        Ok(())
    }

    /// Calls a tool for `caller`: refused (and audited as refused) when its policy excludes the
    /// tool, else routed through [`Calls`] and audited with its outcome.
    ///
    /// # Errors
    /// [`CallError`]; a refusal is the error a missing tool would give (operators get the truth).
    pub async fn call(&self, caller: &Caller, request: CallRequest<'_>) -> Result<CallResult, CallError> {
        self.call_following(caller, request, None).await
    }

    /// [`Door::call`] for a task's call, which `following` tells where the call is (each step
    /// kept in the task first) and which follows the approval request it names.
    async fn call_following(
        &self,
        caller: &Caller,
        request: CallRequest<'_>,
        following: Option<&tasks::Following>,
    ) -> Result<CallResult, CallError> {
        let started = (crate::catalog::record::now_ms(), Instant::now());
        let request = normalise(request);
        let target = request.tool.clone();
        let arguments = request.arguments.unwrap_or("{}");
        // Every decision of the policy is made on one snapshot: a tool it did not hold is called
        // only if the call finds it unchanged there (else a stale-tool race), so that nothing
        // published meanwhile runs undecided.
        let snapshot = self.registry.snapshot();
        let (allowed, needs_approval) = judge(&snapshot, &target, |tool| (caller.agent.may_use(tool), caller.agent.needs_approval(tool)));
        // The same decision as listing: a tool this agent may not use answers like one that does not exist.
        if !allowed {
            let refused = Err(refused_tool(caller, &self.registry.snapshot(), &target));
            self.audit_call(caller, &target, arguments, started, &refused, true);
            return refused;
        }
        // A call a person approves first: it waits here, holding no slot, and runs (once, with
        // exactly the approved arguments and definition) only once approved.
        let mut request = shorten(request);
        if matches!(target, ToolRef::Qualified(_)) && crate::calls::locate(&snapshot.servers, &target).is_none() {
            request.expected_revision = Some(snapshot.revision);
        }
        let approved = self.approval_for(caller, &request, arguments, following, needs_approval, started).await?;
        if let Some(approved) = &approved {
            request.arguments = Some(&approved.record.arguments);
            request.expected_hash = Some(&approved.record.definition_hash);
        }
        // One agent's flood waits behind no one but itself.
        let _in_flight = match caller.agent.begin_call() {
            Ok(in_flight) => in_flight,
            Err(limited) => {
                let agent = caller.agent.name.to_string();
                let refused = Err(match limited {
                    Limited::Concurrency { limit } => CallError::CallerBusy { agent, limit },
                    Limited::Rate { calls, per, retry_after } => CallError::RateLimited { agent, calls, per, retry_after },
                });
                self.limited(caller, &target, arguments, started, &refused);
                return refused;
            }
        };
        if let Err(exhausted) = self.take_quotas(caller, &target).await {
            let refused = Err(exhausted);
            self.limited(caller, &target, arguments, started, &refused);
            return refused;
        }
        let answer = request.answer;
        let resumed = match self.ready_to_send(caller, answer.as_ref(), following, &target).await {
            Ok(resumed) => resumed,
            Err(error) => {
                let refused = Err(error);
                self.audit_call(caller, &target, arguments, started, &refused, false);
                return refused;
            }
        };
        let mut result = self.calls.call(request, resumed.as_ref()).await;
        match (&mut result, resumed) {
            (Ok(done), _) if done.outcome.input_required.is_some() => {
                if let Err(error) = self.keep_continuation(caller, done) {
                    result = Err(error.into());
                }
            }
            // The retry never reached the server: the caller may send the same answers again.
            (Err(CallError::Unavailable { .. } | CallError::Overloaded { .. } | CallError::DefinitionHeld { .. }), Some(pending)) => {
                if let Some(answer) = answer {
                    self.continuations.restore(answer.token, pending);
                }
            }
            _ => {}
        }
        self.audit_call(caller, &target, arguments, started, &result, false);
        result
    }

    /// The last steps before a call is sent: the pending round a 2026 client's answers continue
    /// (bad answers do not use up the token: the caller may correct them), and for a task, its
    /// call kept as sent (and to which generation) before it is, so that a restart knows whether
    /// it may have run.
    async fn ready_to_send(
        &self,
        caller: &Caller,
        answer: Option<&crate::calls::Answer<'_>>,
        following: Option<&tasks::Following>,
        target: &ToolRef,
    ) -> Result<Option<Pending>, CallError> {
        let resumed = match answer {
            Some(answer) => {
                crate::calls::continuation::check_responses(answer.responses)?;
                Some(self.continuations.take(caller, answer.token)?)
            }
            None => None,
        };
        if let Some(following) = following {
            let generation =
                crate::calls::locate(&self.registry.snapshot().servers, target).map_or(0, |(view, _)| view.generation_number());
            following.sending(generation).await?;
        }
        Ok(resumed)
    }

    /// The approval a call needs, once given: `None` when it needs none. A task following a
    /// request after a restart waits for it whatever the policy is now. A call that does not
    /// run for want of one is audited here.
    async fn approval_for(
        &self,
        caller: &Caller,
        request: &CallRequest<'_>,
        arguments: &str,
        following: Option<&tasks::Following>,
        needed: bool,
        started: (i64, Instant),
    ) -> Result<Option<approvals::Approved>, CallError> {
        if !needed && following.is_none_or(|following| following.request.is_none()) {
            return Ok(None);
        }
        match self.await_approval(caller, request, arguments, following, started).await {
            Ok(found) => Ok(found),
            Err(error) => {
                let refused = Err(error);
                self.audit_call(caller, &request.tool, arguments, started, &refused, false);
                refused.map(|_: CallResult| None)
            }
        }
    }

    /// Waits, holding no slot, for a person's decision on a call that needs one (or on the
    /// request a task follows): a task until its deadline, a plain call for `answer_after` at
    /// most, and always a little before the caller's deadline. A plain call that stops waiting
    /// leaves a task following its request, named in the error with the commands that approve
    /// it and print its result, so the person at the terminal learns at once that something
    /// waits for them and a caller that can follow a task loses nothing.
    async fn await_approval(
        &self,
        caller: &Caller,
        request: &CallRequest<'_>,
        arguments: &str,
        following: Option<&tasks::Following>,
        started: (i64, Instant),
    ) -> Result<Option<approvals::Approved>, CallError> {
        let target = &request.tool;
        let deadline = request.timeout.unwrap_or_else(|| {
            target
                .server()
                .and_then(|server| self.registry.server(server))
                .map_or(DEFAULT_APPROVAL_WAIT, |view| view.shared().request_timeout)
        });
        // Stop waiting a little before the caller's deadline, so that the answer naming the
        // request (and the task that follows it) reaches the caller before its own timer.
        let mut wait = deadline.saturating_sub((deadline / 4).min(std::time::Duration::from_secs(2)));
        if following.is_none() && request.upstream_task.is_none() {
            wait = wait.min(self.approvals.answer_after());
        }
        let asked = approvals::Asked { caller, tool: target, arguments, wait, progress: request.progress.as_ref(), following };
        let requested = |record: &crate::store::call_approvals::ApprovalRecord| {
            self.audit_event(caller, &record.qualified_name, format!("approval_requested:{}", record.id), started);
        };
        let gated = self.approvals.gate(asked, &self.registry, requested).await;
        let ended = match &gated {
            Ok(Some(_)) => Some("approved"),
            Ok(None) => None,
            Err(CallError::Approval(refusal)) => Some(approvals::outcome(refusal)),
            Err(_) => Some("error"),
        };
        if let Some(ended) = ended {
            let server = target.server().unwrap_or_default();
            self.metrics().record_approval_wait(server, ended, started.1.elapsed());
            tracing::info!(agent = %caller.agent.name, tool = %target.qualified(), outcome = ended, "toolhost.approval");
        }
        match gated {
            Err(CallError::Approval(ApprovalError::Pending { id, expires_at_ms, task: None })) if request.upstream_task.is_none() => {
                let task = self.follow_approval(caller, target, arguments, &id).await;
                Err(CallError::Approval(ApprovalError::Pending { id, expires_at_ms, task }))
            }
            other => other,
        }
    }

    /// The task that follows approval request `id` for `caller`'s plain call of `tool`: the one
    /// already following it while it works, else a new one (its call finds the same request and
    /// waits for it). `None` when no task can be started (the caller's task limits).
    async fn follow_approval(&self, caller: &Caller, tool: &ToolRef, arguments: &str, id: &str) -> Option<String> {
        let record = self.approvals.get(id).await.ok()??;
        if let Some(follower) = &record.task_id
            && self.tasks.get(caller, follower).await.is_ok_and(|task| !task.status.is_terminal())
        {
            return Some(follower.clone());
        }
        let call = tasks::TaskCall {
            tool: tool.clone(),
            arguments: Some(arguments.to_owned()),
            expected_hash: None,
            expected_revision: None,
            ttl: None,
        };
        let task = self.start_task(caller, call).await.ok()?;
        match self.approvals.follow(id, record.task_id.as_deref(), &task.id).await {
            Ok(true) => Some(task.id),
            // Another call of the same request made its own follower first: that one is followed.
            _ => {
                let _ = self.cancel_task(caller, &task.id).await;
                self.approvals.get(id).await.ok()?.and_then(|record| record.task_id)
            }
        }
    }

    /// Keeps the server's `requestState` of an `input_required` outcome for `caller`, and hands
    /// the caller a token for it instead.
    fn keep_continuation(&self, caller: &Caller, result: &mut CallResult) -> Result<(), ContinuationError> {
        let Some(input) = result.outcome.input_required.as_mut() else { return Ok(()) };
        let pending = Pending::new(
            result.server.clone(),
            result.name.clone(),
            result.generation,
            result.definition_hash.clone(),
            input.request_state.take(),
        );
        let (token, expires) = self.continuations.issue(caller, pending)?;
        let left = expires.saturating_duration_since(Instant::now());
        let expires_at_ms = crate::catalog::record::now_ms().saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX));
        result.continuation = Some((token, expires_at_ms));
        Ok(())
    }

    /// Records a finished (or refused) call in the audit trail.
    fn audit_call(
        &self,
        caller: &Caller,
        target: &ToolRef,
        arguments: &str,
        started: (i64, Instant),
        outcome: &Result<CallResult, CallError>,
        denied: bool,
    ) {
        let (qualified, server, tool) = match target {
            ToolRef::Qualified(qualified) => (qualified.clone(), names::server_of(qualified).unwrap_or_default().to_owned(), String::new()),
            ToolRef::ServerTool { server, name } => (names::qualify(server, name), server.clone(), name.clone()),
        };
        let (generation, definition_hash, outcome_text) = match outcome {
            Ok(result) => (result.generation, result.definition_hash.clone(), result.outcome.label().to_owned()),
            Err(CallError::Stale(stale)) => (stale.current_generation, String::new(), format!("stale_tool:{}", stale.kind.as_str())),
            Err(_) if denied => (0, String::new(), "denied".to_owned()),
            Err(error) => (0, String::new(), error.kind().to_owned()),
        };
        let tool = match outcome {
            Ok(result) => result.name.clone(),
            Err(_) => tool,
        };
        let audit_arguments = self.registry.server(&server).map_or(AuditArguments::None, |view| view.shared().audit_arguments);
        let arguments = match audit_arguments {
            AuditArguments::None => None,
            AuditArguments::Hash => Some(format!("sha256:{}", crate::catalog::model::sha256_hex(arguments.as_bytes()))),
            AuditArguments::Full => Some(crate::secrets::redact_owned(arguments.to_owned())),
        };
        self.auditor.record(AuditRecord {
            at_ms: started.0,
            agent: caller.agent.name.clone(),
            caller: caller.identity.describe(),
            transport: caller.identity.transport,
            qualified_name: truncate(qualified, AUDIT_NAME_BYTES),
            server: truncate(server, AUDIT_SERVER_BYTES),
            tool: truncate(tool, AUDIT_NAME_BYTES),
            generation,
            definition_hash,
            outcome: outcome_text,
            duration_us: u64::try_from(started.1.elapsed().as_micros()).unwrap_or(u64::MAX),
            arguments,
        });
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
pub fn shows_tool(caller: &Caller, view: &ServerView, idx: usize, presentation: Presentation) -> bool {
    caller.agent.may_use(&tool_name(view, idx))
        && (view.held(idx).is_none() || (presentation == Presentation::WithState && caller.agent.admin))
}

/// [`shows_tool`] for a qualified name, judged by the current generation of its server in
/// `snapshot`: names in history and change events, whose tools may have moved since.
pub fn shows_name(caller: &Caller, snapshot: &CatalogSnapshot, qualified: &str, presentation: Presentation) -> bool {
    if !may_use(caller, snapshot, &ToolRef::Qualified(qualified.to_owned())) {
        return false;
    }
    held_now(snapshot, qualified).is_none() || (presentation == Presentation::WithState && caller.agent.admin)
}

/// Whether `caller`'s policy lets it use `tool`, judged by both its names as `snapshot` holds it.
pub fn may_use(caller: &Caller, snapshot: &CatalogSnapshot, tool: &ToolRef) -> bool {
    judge(snapshot, tool, |name| caller.agent.may_use(name))
}

/// The names the policy judges tool `idx` of `view` by ([`ToolName`]).
pub fn tool_name(view: &ServerView, idx: usize) -> ToolName<'_> {
    let qualified = view.qualified().name(idx);
    match view.generation().and_then(|generation| generation.tools.get(idx)) {
        Some(tool) => ToolName::new(view.name(), &tool.name, qualified),
        None => ToolName::unresolved(qualified),
    }
}

/// `decide` applied to the names the policy judges `tool` by ([`ToolName`]): its server's, its
/// own and its qualified name in `snapshot`; a tool `snapshot` does not hold, by the reference.
pub fn judge<R>(snapshot: &CatalogSnapshot, tool: &ToolRef, decide: impl FnOnce(&ToolName<'_>) -> R) -> R {
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
pub fn held_now(snapshot: &CatalogSnapshot, qualified: &str) -> Option<Hold> {
    let view = snapshot.servers.get(names::server_of(qualified)?)?;
    view.held(view.qualified().position(qualified)?)
}

/// Whether a non-operator may know that this server exists: it shows the agent at least one
/// tool. Operators see every server.
pub fn server_visible(caller: &Caller, view: &ServerView) -> bool {
    if caller.agent.admin {
        return true;
    }
    view.generation()
        .as_ref()
        .is_some_and(|generation| (0..generation.tools.len()).any(|idx| shows_tool(caller, view, idx, Presentation::WithState)))
}

/// The error a caller gets for a tool it may not use: for an operator, the truth; for anyone
/// else, exactly what a tool (or server) that does not exist would give.
pub fn refused_tool(caller: &Caller, snapshot: &CatalogSnapshot, target: &ToolRef) -> CallError {
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

/// The one normalisation of what a caller sent, whichever door it came through: an empty or
/// blank string, a zero revision and an absent field all mean "not given". (A zero timeout is
/// a deadline already spent, not an absent one.)
fn normalise(mut request: CallRequest<'_>) -> CallRequest<'_> {
    request.arguments = given(request.arguments);
    request.expected_hash = given(request.expected_hash);
    request.expected_revision = request.expected_revision.filter(|revision| *revision > 0);
    request
}

/// `text` if it says anything.
fn given(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|text| !text.is_empty())
}

/// A call request borrowed for less long: what the door substitutes (an approval's arguments)
/// lives only as long as the call.
fn shorten<'short, 'long: 'short>(request: CallRequest<'long>) -> CallRequest<'short> {
    request
}
