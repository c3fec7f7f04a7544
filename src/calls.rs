//! Tool calls: resolve a tool against the live catalog, check the caller's preconditions,
//! queue behind the server's concurrency limit, and forward `tools/call` to the owning session.
//!
//! Stale-tool races are classified here and never hidden: a call is never retried silently.

pub mod continuation;
mod error;
mod hint;
mod upstream_task;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry::KeyValue;
use serde_json::value::RawValue;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use continuation::{ContinuationError, Continuations, Pending};
pub use error::{ApprovalError, CallError, Explained, RaceKind, StaleTool};

use crate::catalog::model::ToolDef;
use crate::catalog::names;
use crate::catalog::record::EnumerationReason;
use crate::mcp::jsonrpc::code::{INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::mcp::lifecycle::METHOD_TOOLS_CALL;
use crate::mcp::tools::{CallOutcome, parse_call_result};
use crate::registry::{Registry, ServerView};
use crate::store::Store;
use crate::supervisor::Refresher;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::propagation;
use crate::upstream::UpstreamError;

/// A call with less time than this left when its turn comes is not forwarded: the server would
/// start work whose answer nobody waits for.
const MIN_FORWARD_BUDGET: Duration = Duration::from_millis(10);

/// Which tool a caller means.
#[derive(Debug, Clone)]
pub enum ToolRef {
    Qualified(String),
    ServerTool { server: String, name: String },
}

impl ToolRef {
    /// A tool named by its qualified name, or by server and name: exactly one of the two.
    pub fn from_parts(qualified: &str, server: &str, name: &str) -> Option<ToolRef> {
        match (qualified, server, name) {
            (qualified, "", "") if !qualified.is_empty() => Some(ToolRef::Qualified(qualified.to_owned())),
            ("", server, name) if !server.is_empty() && !name.is_empty() => {
                Some(ToolRef::ServerTool { server: server.to_owned(), name: name.to_owned() })
            }
            _ => None,
        }
    }

    /// The server the reference names (`None` for a qualified name without a separator).
    pub fn server(&self) -> Option<&str> {
        match self {
            ToolRef::Qualified(qualified) => names::server_of(qualified),
            ToolRef::ServerTool { server, .. } => Some(server),
        }
    }
}

impl ToolRef {
    /// The qualified name this reference means (`SERVER__TOOL`).
    #[must_use]
    pub fn qualified(&self) -> std::borrow::Cow<'_, str> {
        match self {
            ToolRef::Qualified(qualified) => std::borrow::Cow::Borrowed(qualified),
            ToolRef::ServerTool { server, name } => std::borrow::Cow::Owned(names::qualify(server, name)),
        }
    }
}

/// The server and the index of the tool `tool` names in the current generations of `servers`:
/// the one way a name becomes a tool, for calls and for reads.
pub fn locate(servers: &std::collections::BTreeMap<Arc<str>, Arc<ServerView>>, tool: &ToolRef) -> Option<(Arc<ServerView>, usize)> {
    let view = servers.get(tool.server()?)?;
    let idx = match tool {
        ToolRef::Qualified(qualified) => view.qualified().position(qualified),
        ToolRef::ServerTool { name, .. } => view.generation()?.position(name),
    }?;
    Some((view.clone(), idx))
}

/// The refusal of a held tool (its offered definition is not the approved one), if it is held.
/// Why the server's own state refuses a call of its tool `idx` before anything is sent: held
/// (never the approved definition in place of the offered one: a held tool is not called at
/// all), a tool that runs only as a task on a server that runs none, a server not callable now.
fn refusal(view: &ServerView, idx: usize) -> Option<CallError> {
    if let Some(held) = held(view, idx) {
        return Some(held);
    }
    let tool = &view.generation()?.tools[idx];
    let server_tasks = view.hello().is_some_and(|hello| hello.tasks);
    if tool.fields().task_required && !server_tasks {
        return Some(CallError::TaskRequired { server: view.name().to_string(), tool: tool.name.clone() });
    }
    if !view.is_available() {
        let reason = view.last_error().map(str::to_owned);
        return Some(CallError::Unavailable { server: view.name().to_string(), tool: tool.name.clone(), state: view.state(), reason });
    }
    None
}

fn held(view: &ServerView, idx: usize) -> Option<CallError> {
    let hold = view.held(idx)?;
    let tool = &view.generation()?.tools[idx];
    Some(CallError::DefinitionHeld {
        server: view.name().to_string(),
        tool: tool.name.clone(),
        hold,
        approved_hash: view.integrity_at(idx).and_then(|state| state.approved(&tool.hash)).map(str::to_owned),
        offered_hash: tool.hash.clone(),
    })
}

/// A call as the API hands it over.
#[derive(Debug)]
pub struct CallRequest<'a> {
    pub tool: ToolRef,
    /// Whose line the call waits in when the server's slots are taken: the agent entry.
    pub queue_as: Arc<str>,
    /// A JSON object as text; `None` means `{}`.
    pub arguments: Option<&'a str>,
    pub expected_hash: Option<&'a str>,
    pub expected_revision: Option<u64>,
    /// The caller's deadline; the server's request timeout applies when it has none.
    pub timeout: Option<Duration>,
    /// Where the server's `notifications/progress` for this call go (their `params`, with
    /// toolhost's own progress token); `None` asks the server for no progress.
    pub progress: Option<tokio::sync::mpsc::Sender<Box<RawValue>>>,
    /// The caller's answers to an `input_required` outcome, with the token that came with it.
    pub answer: Option<Answer<'a>>,
    /// What kinds of input request the caller can answer (MCP client capabilities, a JSON
    /// object), told to a 2026-07-28 server; `None` declares none.
    pub client_capabilities: Option<&'a RawValue>,
    /// Run it as a task on a server that runs tasks, and say the server's task id here once it
    /// has one (a toolhost task keeps it, to resume after a restart). A tool whose server runs
    /// it only as a task is always run so, for any caller.
    pub upstream_task: Option<UpstreamTask>,
}

/// Asks for a call to run as a task on its server.
#[derive(Debug)]
pub struct UpstreamTask {
    /// How long the server should keep the task.
    pub ttl: Duration,
    /// Told the server's task id once the server made one.
    pub started: Option<tokio::sync::oneshot::Sender<String>>,
}

/// A caller's answers to a server's input requests.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The continuation token of the `input_required` outcome being answered.
    pub token: &'a str,
    /// A JSON object keyed like the input requests (`inputResponses`).
    pub responses: &'a str,
}

/// A completed call: the tool's result (which may itself report a failure) and what it ran against.
#[derive(Debug)]
pub struct CallResult {
    pub outcome: CallOutcome,
    /// The server's whole `result` object, byte for byte; only a sandbox's refused write adds
    /// toolhost's hint, as one more text item of its `content` (see `hint`).
    pub raw: Box<RawValue>,
    pub server: Arc<str>,
    pub name: String,
    pub generation: u64,
    pub definition_hash: String,
    /// For an `input_required` outcome: the token the caller answers with, and when it expires
    /// (milliseconds since the epoch). Set by the [`crate::door::Door`] that keeps it.
    pub continuation: Option<(String, i64)>,
}

/// A call on its way: what its answer is read against.
struct Sent<'a> {
    view: &'a ServerView,
    tool: &'a ToolDef,
    generation: u64,
    timeout: Duration,
    deadline: tokio::time::Instant,
    /// Sent as a task upstream: a task handle is followed to its end.
    as_task: bool,
    upstream_task: Option<UpstreamTask>,
    upstream_span: tracing::Span,
}

/// Routes calls. Cheap to clone.
#[derive(Clone)]
pub struct Calls {
    registry: Arc<Registry>,
    store: Store,
    refresher: Refresher,
    metrics: Metrics,
}

// === impl Calls ===

impl Calls {
    pub fn new(registry: Arc<Registry>, store: Store, refresher: Refresher, metrics: Metrics) -> Calls {
        Calls { registry, store, refresher, metrics }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Calls a tool. The current span (the API's call span) gets the attributes the trace
    /// needs: the server, the generation and definition hash the call ran against, what the
    /// caller had listed, and a `toolhost.stale_tool` event for a race.
    ///
    /// # Errors
    /// [`CallError`]; a tool's own failure is an `Ok` result with `is_error` set.
    pub async fn call(&self, request: CallRequest<'_>, resumed: Option<&Pending>) -> Result<CallResult, CallError> {
        let span = tracing::Span::current();
        if let Some(hash) = request.expected_hash.filter(|h| !h.is_empty()) {
            // A real hash is 64 characters; anything longer is a caller's noise, cut short.
            span.set_attribute("toolhost.listed.definition_hash", hash.chars().take(80).collect::<String>());
        }
        if let Some(revision) = request.expected_revision.filter(|r| *r > 0) {
            span.set_attribute("toolhost.listed.catalog_revision", revision as i64);
        }
        let result = self.call_inner(request, resumed).await;
        // The door's span gets `error.type` from the door ([`crate::door::observe_call`]).
        let outcome = result.as_ref().map_or("error", |result| result.outcome.label());
        // Metric attributes name configured servers only: a caller's made-up name must not
        // create a new time series.
        let server = match &result {
            Ok(result) => result.server.to_string(),
            Err(CallError::UnknownServer(_) | CallError::UnknownTool { .. }) => String::new(),
            Err(error) => error.server().unwrap_or_default().to_owned(),
        };
        self.metrics.record_call(&server, outcome);
        result
    }

    async fn call_inner(&self, request: CallRequest<'_>, resumed: Option<&Pending>) -> Result<CallResult, CallError> {
        let snapshot = self.registry.snapshot();
        let (view, idx) = self.resolve(&snapshot.servers, &request.tool).await?;
        let generation = view.generation().cloned().ok_or_else(|| unknown(&request.tool))?;
        let tool = &generation.tools[idx];
        let span = tracing::Span::current();
        if crate::telemetry::traces_exported() {
            span.set_attribute("toolhost.server", view.name().to_string());
            span.set_attribute("toolhost.generation", generation.number as i64);
            span.set_attribute("toolhost.definition_hash", tool.hash.clone());
            span.set_attribute("toolhost.catalog.revision", snapshot.revision as i64);
        }
        self.callable_as_asked(&view, idx, &generation, &request, resumed)?;
        let server_tasks = view.hello().is_some_and(|hello| hello.tasks);
        let arguments = check_arguments(request.arguments)?;
        let responses = match request.answer {
            Some(answer) => Some(continuation::check_responses(answer.responses)?),
            None => None,
        };
        let timeout = request.timeout.unwrap_or(view.shared().request_timeout);
        let deadline = crate::deadline::after(timeout);
        let expired = || Failure::Expired.into_error(&view, tool, generation.number, timeout);
        // Calls beyond the server's limit wait here, in their agent's line (served round-robin);
        // the wait counts against the caller's deadline.
        let permit = match tokio::time::timeout_at(deadline, view.shared().call_queue.acquire(&request.queue_as)).await {
            Ok(slot) => slot,
            Err(_) => return Err(expired()),
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        // A call that could not even reach the server before its deadline is not sent at all.
        if remaining < MIN_FORWARD_BUDGET {
            return Err(expired());
        }
        // The wait may have been long: what was checked before it is checked again now, with
        // nothing awaited between this check and the request leaving for the server. A tool held,
        // changed or removed while the call waited is not called.
        let (view, session) = self.still_callable(&request.tool, tool).await?;
        // From here the request goes to the server: its client span and duration start.
        let mut operation = session.operation(METHOD_TOOLS_CALL, Some(&tool.name));
        operation.tool(&tool.name);
        let upstream_span = operation.span().clone();
        upstream_span.set_attribute("toolhost.generation", generation.number as i64);
        let trace_meta = upstream_span.in_scope(propagation::current_meta);
        let progress = request.progress.map(|sink| session.route_progress(sink));
        let modern = view.hello().is_some_and(|hello| hello.era == crate::mcp::lifecycle::Era::Modern);
        // As a task upstream: asked for (and the server runs tasks), or the only way the tool runs.
        let upstream_task = request.upstream_task;
        let as_task = server_tasks && (tool.fields().task_required || upstream_task.is_some());
        let task_ttl = match &upstream_task {
            Some(asked) => asked.ttl,
            None => timeout,
        };
        // A 2026 server is told the caller (toolhost) takes task handles, in the capabilities.
        let capabilities = match (as_task && modern, request.client_capabilities) {
            (true, capabilities) => Some(upstream_task::declare_extension(capabilities)),
            (false, _) => None,
        };
        let extra = CallExtras {
            progress_token: progress.as_ref().map(|route| route.token),
            // Only a 2026-07-28 server reads capabilities per request.
            capabilities: capabilities.as_deref().or(request.client_capabilities).filter(|_| modern),
            responses,
            state: resumed.and_then(|pending| pending.request_state.as_deref()),
            task_ttl: (as_task && !modern).then_some(task_ttl),
        };
        let params = call_params(&tool.name, arguments, &trace_meta, &extra)?;
        // The slot stays taken until the server answers, even if the caller gives up first.
        let result = session.request_holding(METHOD_TOOLS_CALL, Some(&params), remaining, permit).instrument(upstream_span.clone()).await;
        crate::upstream::session::judge(&mut operation, &result);
        let sent = Sent { view: &view, tool, generation: generation.number, timeout, deadline, as_task, upstream_task, upstream_span };
        self.answered(sent, operation, result).await
    }

    /// What is checked of the tool before the call waits for a slot: a continued round answers
    /// the same server, tool and definition (a tool changed in between is a stale-tool race like
    /// any other), the caller's expectations hold, and the server can take the call now.
    fn callable_as_asked(
        &self,
        view: &ServerView,
        idx: usize,
        generation: &crate::catalog::model::Generation,
        request: &CallRequest<'_>,
        resumed: Option<&Pending>,
    ) -> Result<(), CallError> {
        let tool = &generation.tools[idx];
        let span = tracing::Span::current();
        // A continuation answers one call of one tool: the same server and name, and the same
        // definition (a tool that changed in between is a stale-tool race like any other).
        let mut expected_hash = request.expected_hash;
        if let Some(pending) = resumed {
            if *pending.server != **view.name() || pending.tool != tool.name {
                return Err(ContinuationError::OtherTool { server: pending.server.to_string(), tool: pending.tool.clone() }.into());
            }
            span.set_attribute("toolhost.mrtr.resumed_generation", pending.generation as i64);
            expected_hash = Some(&pending.definition_hash);
        }
        self.check_preconditions(view, tool, generation.number, expected_hash, request.expected_revision)?;
        if let Some(refused) = refusal(view, idx) {
            if let CallError::DefinitionHeld { hold, .. } = &refused {
                span.set_attribute("toolhost.hold", hold.as_str());
            }
            return Err(refused);
        }
        Ok(())
    }

    /// The server's answer to a sent call, as its caller gets it: a task handle followed to its
    /// end, a result read, a failure typed (a tool the server does not know is a stale-tool race:
    /// counted, and the server's tools listed again at once).
    async fn answered(
        &self,
        mut sent: Sent<'_>,
        mut operation: crate::telemetry::mcp::Operation,
        result: Result<Box<RawValue>, UpstreamError>,
    ) -> Result<CallResult, CallError> {
        // A task handle instead of a result: followed to its end within the deadline.
        let result = match result {
            Ok(answer) if sent.as_task => match crate::mcp::tasks::created(&answer) {
                Some(created) => {
                    if let Some(started) = sent.upstream_task.as_mut().and_then(|asked| asked.started.take()) {
                        let _ = started.send(created.id.clone());
                    }
                    sent.upstream_span.set_attribute("toolhost.upstream_task", created.id.clone());
                    let follow = upstream_task::Follow {
                        registry: &self.registry,
                        server: sent.view.name(),
                        tool: &sent.tool.name,
                        generation: sent.generation,
                        timeout: sent.timeout,
                    };
                    return follow
                        .to_end(created, sent.deadline)
                        .await
                        .and_then(|raw| self.finish(sent.view, sent.tool, sent.generation, raw));
                }
                None => Ok(answer),
            },
            other => other,
        };
        let error = match result {
            Ok(result) => {
                let done = self.finish(sent.view, sent.tool, sent.generation, result)?;
                if done.outcome.is_error {
                    operation.tool_error();
                }
                if done.outcome.input_required.is_some() {
                    sent.upstream_span.set_attribute("mcp.result_type", "input_required");
                }
                return Ok(done);
            }
            Err(error) => error,
        };
        let failure = Failure::of(error, &sent.tool.name);
        if matches!(failure, Failure::UnknownTool { .. }) {
            sent.view.shared().races.upstream_unknown_tool.fetch_add(1, Ordering::Relaxed);
            self.race_event(sent.view, RaceKind::UpstreamUnknownTool, &sent.tool.name, sent.generation, None);
            sent.upstream_span.set_attribute("toolhost.race.kind", RaceKind::UpstreamUnknownTool.as_str());
            // The server knows better than the catalog: look again, at once. The enumeration
            // that follows links back to this call.
            self.refresher.refresh_linked(
                sent.view.name(),
                EnumerationReason::StaleTool,
                crate::telemetry::span_context(&tracing::Span::current()),
            );
            tracing::warn!(server = %sent.view.name(), tool = %sent.tool.name, generation = sent.generation, "stale tool: the server does not know a listed tool");
        }
        Err(failure.into_error(sent.view, sent.tool, sent.generation, sent.timeout))
    }

    /// A server's answer to a call, read.
    fn finish(&self, view: &ServerView, tool: &ToolDef, generation: u64, raw: Box<RawValue>) -> Result<CallResult, CallError> {
        let outcome = parse_call_result(&raw).map_err(|message| CallError::InvalidResult {
            server: view.name().to_string(),
            tool: tool.name.clone(),
            generation,
            message: message.to_string(),
        })?;
        // A write its sandbox refused is named with the grant that allows it, for every door.
        let (raw, outcome) = hint::hinted_result(view, raw, outcome);
        Ok(CallResult {
            outcome,
            raw,
            server: view.name().clone(),
            name: tool.name.clone(),
            generation,
            definition_hash: tool.hash.clone(),
            continuation: None,
        })
    }

    /// Follows a task a server runs for a call toolhost made before it stopped (its id kept
    /// with toolhost's own task) to its end, once the server is back, within `deadline`.
    ///
    /// # Errors
    /// [`CallError`]: the server lost the task (its outcome unknown), failed it, or did not end
    /// it in time.
    pub async fn resume_upstream_task(&self, tool: &ToolRef, id: String, deadline: tokio::time::Instant) -> Result<CallResult, CallError> {
        let Some(server) = tool.server().map(Arc::<str>::from) else { return Err(unknown(tool)) };
        let view = upstream_task::available(&self.registry, &server, deadline).await.ok_or_else(|| CallError::SessionLost {
            server: server.to_string(),
            tool: tool.qualified().into_owned(),
            generation: 0,
            detail: Some("the server did not come back before the task's time ran out".to_owned()),
        })?;
        let (view, idx) = locate(&self.registry.snapshot().servers, tool).unwrap_or((view, usize::MAX));
        let generation = view.generation().cloned().ok_or_else(|| unknown(tool))?;
        let tool = generation.tools.get(idx).ok_or_else(|| unknown(tool))?;
        let state = crate::mcp::tasks::TaskState {
            id,
            status: crate::mcp::tasks::Status::Working,
            message: None,
            poll_interval_ms: None,
            result: None,
            error: None,
        };
        let follow = upstream_task::Follow {
            registry: &self.registry,
            server: view.name(),
            tool: &tool.name,
            generation: generation.number,
            timeout: deadline.saturating_duration_since(tokio::time::Instant::now()),
        };
        let raw = follow.to_end(state, deadline).await?;
        self.finish(&view, tool, generation.number, raw)
    }

    /// Asks `server` to cancel its task `id` (best effort, briefly): toolhost's own task of it
    /// was cancelled.
    pub async fn cancel_upstream_task(&self, server: &str, id: &str) {
        upstream_task::cancel(&self.registry, server, id).await;
    }

    /// What a call of `tool` would be refused for before anything is sent (an unknown or
    /// removed tool, a definition that changed since the caller listed it, a held tool): the
    /// stale-tool rules of a call, applied when a task starts.
    ///
    /// # Errors
    /// The [`CallError`] the call would get.
    pub async fn preflight(&self, tool: &ToolRef, expected_hash: Option<&str>, expected_revision: Option<u64>) -> Result<(), CallError> {
        let snapshot = self.registry.snapshot();
        let (view, idx) = self.resolve(&snapshot.servers, tool).await?;
        let generation = view.generation().cloned().ok_or_else(|| unknown(tool))?;
        self.check_preconditions(&view, &generation.tools[idx], generation.number, expected_hash, expected_revision)?;
        held(&view, idx).map_or(Ok(()), Err)
    }

    /// The tool as the catalog shows it now, after a wait for a slot: still listed with the same
    /// definition, not held, its server available. Its view and the session to send on.
    async fn still_callable(
        &self,
        tool_ref: &ToolRef,
        waited_for: &ToolDef,
    ) -> Result<(Arc<ServerView>, crate::upstream::SessionHandle), CallError> {
        let snapshot = self.registry.snapshot();
        let (view, idx) = self.resolve(&snapshot.servers, tool_ref).await?;
        let generation = view.generation().ok_or_else(|| unknown(tool_ref))?;
        let current = &generation.tools[idx];
        // Held first: that is what the caller (or its operator) has to act on.
        if let Some(held) = held(&view, idx) {
            return Err(held);
        }
        if current.hash != waited_for.hash {
            return Err(self.changed_since(&view, current, generation.number, "while the call waited for the server"));
        }
        let session = view.session().cloned().filter(|_| view.is_available());
        let Some(session) = session else {
            return Err(CallError::Unavailable {
                server: view.name().to_string(),
                tool: current.name.clone(),
                state: view.state(),
                reason: view.last_error().map(str::to_owned),
            });
        };
        Ok((view.clone(), session))
    }

    /// Finds the server view and the tool's index in its current generation, or explains why not.
    async fn resolve(
        &self,
        servers: &std::collections::BTreeMap<Arc<str>, Arc<ServerView>>,
        tool: &ToolRef,
    ) -> Result<(Arc<ServerView>, usize), CallError> {
        if let Some(found) = locate(servers, tool) {
            return Ok(found);
        }
        let server_name = tool.server().ok_or_else(|| unknown(tool))?;
        let Some(view) = servers.get(server_name).cloned() else {
            return Err(match tool {
                ToolRef::Qualified(_) => unknown(tool),
                ToolRef::ServerTool { server, .. } => CallError::UnknownServer(server.clone()),
            });
        };
        // Not current. If history shows the tool, this is a race, not a typo.
        let original = match tool {
            ToolRef::ServerTool { name, .. } => Some(name.clone()),
            ToolRef::Qualified(qualified) => {
                let history =
                    self.store.generations().names_in_history(server_name).await.map_err(|err| CallError::Store(err.to_string()))?;
                history.into_iter().find(|name| names::qualify(server_name, name) == *qualified)
            }
        };
        let Some(original) = original else { return Err(unknown(tool)) };
        let removed_in =
            self.store.generations().removed_in(server_name, &original).await.map_err(|err| CallError::Store(err.to_string()))?;
        let Some(removed_in) = removed_in else { return Err(unknown(tool)) };
        view.shared().races.removed_before_call.fetch_add(1, Ordering::Relaxed);
        self.race_event(&view, RaceKind::RemovedBeforeCall, &original, view.generation_number(), Some(removed_in));
        tracing::warn!(server = server_name, tool = %original, removed_in, "stale tool: called after its removal");
        Err(CallError::Stale(Box::new(StaleTool {
            kind: RaceKind::RemovedBeforeCall,
            server: server_name.to_owned(),
            tool: original,
            current_generation: view.generation_number(),
            removed_in_generation: Some(removed_in),
            current_hash: None,
            detail: format!("removed in generation {removed_in}"),
        })))
    }

    fn check_preconditions(
        &self,
        view: &ServerView,
        tool: &ToolDef,
        generation: u64,
        expected_hash: Option<&str>,
        expected_revision: Option<u64>,
    ) -> Result<(), CallError> {
        let stale = |listed: &str| self.changed_since(view, tool, generation, &format!("since {listed}"));
        if let Some(expected) = expected_hash.filter(|hash| !hash.is_empty())
            && expected != tool.hash
        {
            return Err(stale("the hash the caller sent"));
        }
        if let Some(revision) = expected_revision.filter(|revision| *revision > 0) {
            let listed = self.registry.snapshot_at(revision).ok_or(CallError::RevisionNotKept(revision))?;
            let listed_hash =
                listed.servers.get(view.name()).and_then(|v| v.generation()).and_then(|g| g.tool(&tool.name)).map(|t| &t.hash);
            if listed_hash != Some(&tool.hash) {
                return Err(stale(&format!("catalog revision {revision}")));
            }
        }
        Ok(())
    }
}

impl Calls {
    /// The race of a tool whose definition changed `when` ("since the hash the caller sent",
    /// "while the call waited for the server"): counted, recorded on the span, logged, and the
    /// caller's error, with the current hash.
    fn changed_since(&self, view: &ServerView, tool: &ToolDef, generation: u64, when: &str) -> CallError {
        view.shared().races.changed_since_listed.fetch_add(1, Ordering::Relaxed);
        self.race_event(view, RaceKind::ChangedSinceListed, &tool.name, generation, Some(generation));
        tracing::warn!(server = %view.name(), tool = %tool.name, generation, when, "stale tool: changed since the caller listed it");
        CallError::Stale(Box::new(StaleTool {
            kind: RaceKind::ChangedSinceListed,
            server: view.name().to_string(),
            tool: tool.name.clone(),
            current_generation: generation,
            removed_in_generation: None,
            current_hash: Some(tool.hash.clone()),
            detail: format!("the definition changed {when}; the current hash is {}", tool.hash),
        }))
    }

    /// Records a race on the call span: an event, a link to the enumeration that published the
    /// generation in question (the one that removed or changed the tool), and the metric.
    fn race_event(&self, view: &ServerView, kind: RaceKind, tool: &str, current_generation: u64, link_generation: Option<u64>) {
        let span = tracing::Span::current();
        span.add_event(
            "toolhost.stale_tool",
            vec![
                KeyValue::new("toolhost.race.kind", kind.as_str()),
                KeyValue::new("toolhost.server", view.name().to_string()),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                KeyValue::new("toolhost.generation", current_generation as i64),
            ],
        );
        span.set_attribute("toolhost.race.kind", kind.as_str());
        if let Some(context) = link_generation.and_then(|g| view.shared().generation_span(g)) {
            span.add_link_with_attributes(context, vec![KeyValue::new("toolhost.link", "enumeration that published the generation")]);
        }
        self.metrics.record_race(view.name(), kind.as_str());
    }
}

fn unknown(tool: &ToolRef) -> CallError {
    match tool {
        ToolRef::Qualified(qualified) => CallError::UnknownTool { server: None, tool: qualified.clone() },
        ToolRef::ServerTool { server, name } => CallError::UnknownTool { server: Some(server.clone()), tool: name.clone() },
    }
}

/// What a call's params carry besides the name, the arguments and the trace context.
#[derive(Default)]
struct CallExtras<'a> {
    progress_token: Option<u64>,
    /// `_meta` `io.modelcontextprotocol/clientCapabilities`: the caller's, on a modern session.
    capabilities: Option<&'a RawValue>,
    /// `inputResponses`: the caller's answers, on a retry.
    responses: Option<&'a RawValue>,
    /// `requestState`: the server's own, echoed byte for byte on a retry.
    state: Option<&'a RawValue>,
    /// `task`: run it as a task kept this long (2025-11-25; a 2026 server reads the extension in
    /// the capabilities instead).
    task_ttl: Option<Duration>,
}

/// The call's arguments as the JSON object text they must be (`{}` when none were given).
///
/// # Errors
/// [`CallError::InvalidArguments`].
pub fn check_arguments(arguments: Option<&str>) -> Result<&RawValue, CallError> {
    let arguments = arguments.map(str::trim).filter(|a| !a.is_empty()).unwrap_or("{}");
    let raw: &RawValue = serde_json::from_str(arguments).map_err(|err| CallError::InvalidArguments(err.to_string()))?;
    if !raw.get().starts_with('{') {
        return Err(CallError::InvalidArguments("expected an object, like {\"key\": \"value\"}".to_owned()));
    }
    Ok(raw)
}

/// `{"name": ..., "arguments": ..., "_meta": {...}}`, with the arguments checked to be one JSON
/// object but not parsed into a tree: they are forwarded byte for byte. `_meta` carries the W3C
/// trace context when a trace is recorded. A retry of an `input_required` call adds
/// `inputResponses` and (only when the server sent one) `requestState`.
fn call_params(name: &str, raw: &RawValue, meta: &HashMap<String, String>, extra: &CallExtras<'_>) -> Result<Box<RawValue>, CallError> {
    let progress_token = extra.progress_token;
    let name = serde_json::to_string(name).map_err(|err| CallError::InvalidArguments(err.to_string()))?;
    let mut params = format!(r#"{{"name":{name},"arguments":{}"#, raw.get());
    if let Some(responses) = extra.responses {
        params.push_str(r#","inputResponses":"#);
        params.push_str(responses.get());
    }
    if let Some(state) = extra.state {
        params.push_str(r#","requestState":"#);
        params.push_str(state.get());
    }
    if let Some(ttl) = extra.task_ttl {
        params.push_str(&format!(r#","task":{{"ttl":{}}}"#, ttl.as_millis()));
    }
    if !meta.is_empty() || progress_token.is_some() || extra.capabilities.is_some() {
        let mut members: Vec<String> = Vec::with_capacity(meta.len() + 2);
        if let Some(token) = progress_token {
            members.push(format!(r#""progressToken":{token}"#));
        }
        if let Some(capabilities) = extra.capabilities {
            members.push(format!(r#""io.modelcontextprotocol/clientCapabilities":{}"#, capabilities.get()));
        }
        for (key, value) in meta {
            let (key, value) = (serde_json::to_string(key), serde_json::to_string(value));
            let (Ok(key), Ok(value)) = (key, value) else { continue };
            members.push(format!("{key}:{value}"));
        }
        params.push_str(r#","_meta":{"#);
        params.push_str(&members.join(","));
        params.push('}');
    }
    params.push('}');
    RawValue::from_string(params).map_err(|err| CallError::InvalidArguments(err.to_string()))
}

/// -32601 always means the tool (or method) is unknown. -32602 also means "invalid arguments"
/// ("unknown field", "not found in enum"), so it counts as an unknown tool only when the message
/// names this tool and says that a *tool* is unknown: a stale-tool race triggers a
/// re-enumeration, and an argument error must not.
/// What an upstream failure of a sent call means for its caller. Decided from the failure
/// alone (pure, table-tested); `call_inner` acts on it (a race is also counted, logged and
/// starts a re-enumeration).
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// The server does not know a tool the catalog lists: a stale-tool race.
    UnknownTool { code: i64, message: String },
    /// The server refused the arguments.
    InvalidParams(String),
    /// Any other JSON-RPC error the server answered.
    Upstream { code: i64, message: String },
    /// No answer within the caller's deadline.
    Expired,
    /// The server is not reading its input.
    Overloaded,
    /// It never reached the server: nothing ran, and the caller may try again.
    NotSent(String),
    /// The session ended, or the exchange broke after the request was sent: the server may have
    /// run it, so it is never retried, and the caller is told exactly that.
    Lost(Option<String>),
}

impl Failure {
    fn of(error: UpstreamError, tool: &str) -> Failure {
        match error {
            UpstreamError::Rpc(error) if is_unknown_tool(error.code, &error.message, tool) => {
                Failure::UnknownTool { code: error.code, message: error.message }
            }
            UpstreamError::Rpc(error) if error.code == INVALID_PARAMS => Failure::InvalidParams(error.message),
            UpstreamError::Rpc(error) => Failure::Upstream { code: error.code, message: error.message },
            UpstreamError::Timeout { .. } => Failure::Expired,
            UpstreamError::Overloaded => Failure::Overloaded,
            UpstreamError::NotSent(reason) => Failure::NotSent(reason),
            UpstreamError::Lost(detail) => Failure::Lost(Some(detail)),
            _ => Failure::Lost(None),
        }
    }

    fn into_error(self, view: &ServerView, tool: &ToolDef, generation: u64, timeout: Duration) -> CallError {
        let (server, name) = (view.name().to_string(), tool.name.clone());
        match self {
            Failure::UnknownTool { code, message } => CallError::Stale(Box::new(StaleTool {
                kind: RaceKind::UpstreamUnknownTool,
                server,
                tool: name,
                current_generation: generation,
                removed_in_generation: None,
                current_hash: Some(tool.hash.clone()),
                detail: format!("the server answered {code} ({message}); a re-enumeration has started"),
            })),
            Failure::InvalidParams(message) => CallError::UpstreamInvalidParams { server, tool: name, generation, message },
            Failure::Upstream { code, message } => {
                let message = hint::hinted_message(view, message);
                CallError::Upstream { server, tool: name, generation, code, message }
            }
            Failure::Expired => CallError::DeadlineExceeded { server, tool: name, generation, after: timeout },
            Failure::Overloaded => CallError::Overloaded { server, tool: name },
            Failure::NotSent(reason) => CallError::Unavailable { server, tool: name, state: view.state(), reason: Some(reason) },
            Failure::Lost(detail) => CallError::SessionLost { server, tool: name, generation, detail },
        }
    }
}

fn is_unknown_tool(code: i64, message: &str, tool: &str) -> bool {
    if code == METHOD_NOT_FOUND {
        return true;
    }
    if code != INVALID_PARAMS || !message.contains(tool) {
        return false;
    }
    let message = message.to_ascii_lowercase();
    message.contains("tool") && ["unknown", "not found", "no such", "does not exist", "not exist"].iter().any(|p| message.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_cannot_take_the_call_refuses_it_saying_why() {
        use crate::catalog::model::{Generation, Listing};
        use crate::registry::ServerState;
        let tools = Listing::from_raw(vec![
            serde_json::json!({"name": "plain", "inputSchema": {"type": "object"}}),
            serde_json::json!({"name": "long", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}),
        ])
        .tools;
        let at = |name: &str| tools.iter().position(|tool| tool.name == name).unwrap();
        let (plain, long) = (at("plain"), at("long"));
        let view = |state: ServerState, error: Option<&str>| {
            let audit = crate::config::AuditArguments::None;
            let mut view = ServerView::new("s".into(), state, "stdio", 1, Duration::from_secs(1), audit, Default::default());
            view.stored(Arc::new(Generation { number: 3, committed_at_ms: 0, tools: tools.clone() }), None, false);
            view.enter(state, error.map(str::to_owned));
            view
        };
        let unavailable = |state: ServerState, reason: Option<&str>| CallError::Unavailable {
            server: "s".into(),
            tool: "plain".into(),
            state,
            reason: reason.map(str::to_owned),
        };
        let cases = [
            // Shown ready, its session gone (ended a moment ago): not callable, and not sent.
            (view(ServerState::Ready, None), plain, Some(unavailable(ServerState::Ready, None))),
            (
                view(ServerState::Reconnecting, Some("the server exited with status 1")),
                plain,
                Some(unavailable(ServerState::Reconnecting, Some("the server exited with status 1"))),
            ),
            (
                view(ServerState::Failed, Some("cannot make its home")),
                plain,
                Some(unavailable(ServerState::Failed, Some("cannot make its home"))),
            ),
            // A tool that runs only as a task, on a server that runs none, whatever its state.
            (view(ServerState::Ready, None), long, Some(CallError::TaskRequired { server: "s".into(), tool: "long".into() })),
        ];
        for (view, idx, expected) in cases {
            let refused = refusal(&view, idx);
            assert_eq!(format!("{refused:?}"), format!("{expected:?}"), "{:?} tool {idx}", view.state());
        }
    }

    #[test]
    fn an_upstream_failure_is_classified_by_what_it_says_of_the_call() {
        let rpc =
            |code: i64, message: &str| UpstreamError::Rpc(crate::mcp::jsonrpc::RpcError { code, message: message.to_owned(), data: None });
        let cases: Vec<(UpstreamError, Failure)> = vec![
            (rpc(METHOD_NOT_FOUND, "no such method"), Failure::UnknownTool { code: METHOD_NOT_FOUND, message: "no such method".into() }),
            (
                rpc(INVALID_PARAMS, "Unknown tool: echo"),
                Failure::UnknownTool { code: INVALID_PARAMS, message: "Unknown tool: echo".into() },
            ),
            // Invalid arguments that name the tool but do not say it is unknown are the caller's.
            (rpc(INVALID_PARAMS, "echo: text is required"), Failure::InvalidParams("echo: text is required".into())),
            // Another tool unknown (the server's own dispatch) is not a race of this one.
            (rpc(INVALID_PARAMS, "Unknown tool: other"), Failure::InvalidParams("Unknown tool: other".into())),
            (rpc(-32000, "backend down"), Failure::Upstream { code: -32000, message: "backend down".into() }),
            (UpstreamError::Timeout { method: "tools/call".into(), after: Duration::from_secs(1) }, Failure::Expired),
            (UpstreamError::Overloaded, Failure::Overloaded),
            (UpstreamError::NotSent("queue closed".into()), Failure::NotSent("queue closed".into())),
            (UpstreamError::Lost("reset".into()), Failure::Lost(Some("reset".into()))),
            (UpstreamError::Closed, Failure::Lost(None)),
            (UpstreamError::Exited("exited with status 1".into()), Failure::Lost(None)),
        ];
        for (error, expected) in cases {
            let said = error.to_string();
            assert_eq!(Failure::of(error, "echo"), expected, "{said}");
        }
    }

    fn params_of(arguments: Option<&str>, meta: &HashMap<String, String>, extra: &CallExtras<'_>) -> Result<Box<RawValue>, CallError> {
        call_params("t", check_arguments(arguments)?, meta, extra)
    }

    #[test]
    fn arguments_must_be_one_json_object_and_are_forwarded_verbatim() {
        let none = HashMap::new();
        assert_eq!(params_of(None, &none, &CallExtras::default()).unwrap().get(), r#"{"name":"t","arguments":{}}"#);
        let meta = HashMap::from([("traceparent".to_owned(), "00-abc-def-01".to_owned())]);
        assert_eq!(
            params_of(None, &meta, &CallExtras::default()).unwrap().get(),
            r#"{"name":"t","arguments":{},"_meta":{"traceparent":"00-abc-def-01"}}"#
        );
        assert_eq!(
            params_of(None, &meta, &CallExtras { progress_token: Some(7), ..CallExtras::default() }).unwrap().get(),
            r#"{"name":"t","arguments":{},"_meta":{"progressToken":7,"traceparent":"00-abc-def-01"}}"#
        );
        assert_eq!(
            params_of(Some(r#"{"big": 12345678901234567890}"#), &none, &CallExtras::default()).unwrap().get(),
            r#"{"name":"t","arguments":{"big": 12345678901234567890}}"#
        );
        for bad in ["[1]", "\"x\"", "{", "{} {}", "null"] {
            assert!(matches!(params_of(Some(bad), &none, &CallExtras::default()), Err(CallError::InvalidArguments(_))), "{bad}");
        }
    }

    #[test]
    fn a_retry_echoes_the_state_exactly_and_adds_the_answers() {
        let raw = |text: &str| RawValue::from_string(text.to_owned()).unwrap();
        let (responses, state, capabilities) =
            (raw(r#"{"q":{"action":"accept"}}"#), raw(r#""opaque \u00e9""#), raw(r#"{"elicitation":{}}"#));
        let extra =
            CallExtras { responses: Some(&responses), state: Some(&state), capabilities: Some(&capabilities), ..CallExtras::default() };
        assert_eq!(
            params_of(None, &HashMap::new(), &extra).unwrap().get(),
            r#"{"name":"t","arguments":{},"inputResponses":{"q":{"action":"accept"}},"requestState":"opaque \u00e9","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}"#
        );
        let without_state = CallExtras { responses: Some(&responses), ..CallExtras::default() };
        assert!(!params_of(None, &HashMap::new(), &without_state).unwrap().get().contains("requestState"));
    }

    #[test]
    fn unknown_tool_errors_are_told_apart_from_bad_arguments() {
        assert!(is_unknown_tool(-32601, "Method not found", "x"));
        assert!(is_unknown_tool(-32602, "Unknown tool: get_weather", "get_weather"));
        assert!(is_unknown_tool(-32602, "Tool get_weather not found", "get_weather"));
        assert!(is_unknown_tool(-32602, "No such tool 'get_weather'", "get_weather"));
        assert!(!is_unknown_tool(-32602, "Unknown tool: other", "get_weather"), "another tool's name");
        assert!(!is_unknown_tool(-32602, "Invalid arguments: missing field a", "a"));
        assert!(!is_unknown_tool(-32602, "unknown field `extra`, expected `text`", "echo"));
        assert!(!is_unknown_tool(-32602, "value not found in enum", "echo"));
        assert!(!is_unknown_tool(-32603, "unknown tool echo", "echo"));
    }
}
