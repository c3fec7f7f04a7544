//! The MCP endpoint: the resolved catalog and call routing served over MCP itself, so that any
//! agent framework can use toolhost by pointing its MCP client at it.
//!
//! `Endpoint::answer` is the whole protocol, for both eras, without I/O: it reads one request
//! and produces its response line. The transports only move messages: `socket` (a Unix socket
//! speaking newline-delimited JSON-RPC, also what `toolhost mcp` bridges stdio to) and `http`
//! (Streamable HTTP at `/mcp`, sessions for the 2025 era, stateless for 2026-07-28). Listing
//! reads one registry snapshot (`listing`); calling goes through the same [`Door`] as the gRPC
//! API; errors take their reasons from `CallError::explain` (`reply`).

mod asking;
mod http;
mod lazy;
mod listing;
mod message;
mod reply;
mod sessions;
mod socket;
mod tasks;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tracing::Instrument;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::door::Door;
use crate::door::model::{
    Answer, CallError, CallRequest, CallResult, Caller, ContinuationError, Identity, Listener, McpConfig, PROGRESS_QUEUE, Policy, Refusal,
    ToolRef, names,
};
use crate::door::observe::{DoorSpan, Front, REQUEST_ID, Throttle, Wire};
use crate::door::view::{Catalog, Tool};
use crate::listen::{self, BindError, Bound, BoundAddr, Origins};
use crate::mcp::jsonrpc::code::{INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::mcp::lifecycle::{LEGACY_VERSIONS, METHOD_INITIALIZE, METHOD_PING, METHOD_TOOLS_CALL, METHOD_TOOLS_LIST};
use crate::mcp::modern::{self, METHOD_DISCOVER};

pub use http::serve_http;
use listing::ChangeWatch;
use message::Params;
pub use socket::{PROFILE_NOTIFICATION, serve_unix};

/// The newest legacy version toolhost speaks; a client asking for an unknown one gets this.
const LATEST_LEGACY: &str = "2025-11-25";
/// How long a 2026 client may treat a listing as fresh. Changes are also announced (list_changed,
/// `subscriptions/listen`), and a call to a tool that changed is refused with a typed error.
const LIST_TTL_MS: u64 = 10_000;
/// Rounds of questions a 2025 client answers for one call before toolhost gives up on it.
const MAX_INPUT_ROUNDS: usize = 8;
/// `_meta` keys toolhost adds to each listed tool and reads back from a call.
pub const META_SERVER: &str = "dev.toolhost/server";
pub const META_GENERATION: &str = "dev.toolhost/generation";
pub const META_HASH: &str = "dev.toolhost/definitionHash";
pub const META_NAME: &str = "dev.toolhost/name";

/// Which protocol era a request belongs to: the same two as a server's (a 2026-07-28 request
/// carries its protocol version in `_meta`).
pub use crate::mcp::lifecycle::Era;

/// The endpoint's shared state. One per daemon.
pub struct Endpoint {
    door: Door,
    settings: ArcSwap<Settings>,
    listing: listing::Cache,
}

/// What the configuration says, swapped whole on reload.
pub struct Settings {
    page_size: usize,
    origins: Origins,
    profiles: HashMap<String, Arc<Profile>>,
}

/// A subset of the catalog served under its own name.
#[derive(Debug)]
pub struct Profile {
    pub name: String,
    tools: Vec<names::ToolGlob>,
    /// `names = "original"`: the server whose own tool names are exposed.
    original: Option<Arc<str>>,
    /// `lazy = true`: what `find_tools` and `call_tool` reach.
    lazy: Option<Vec<names::ToolGlob>>,
}

/// Who is asking, and through which profile: every listing and call is seen through one.
#[derive(Clone)]
pub struct View {
    pub caller: Caller,
    pub profile: Option<Arc<Profile>>,
    /// W3C trace context from the transport (HTTP `traceparent`/`tracestate` headers), used
    /// when the request's `_meta` carries none.
    pub trace: Option<(String, Option<String>)>,
    /// The session's channel for questions to a 2025 client, where the transport has one.
    pub client: Option<Arc<asking::ClientLink>>,
    /// Where the request came from, as the telemetry describes it.
    pub origin: Arc<Origin>,
}

/// Where a request came from, for its span and metrics (the MCP conventions): the transport,
/// and for a 2025 session its id and the protocol version agreed at `initialize`.
#[derive(Debug, Clone)]
pub struct Origin {
    pub wire: Wire,
    pub session: Option<Arc<str>>,
    pub version: Option<Arc<str>>,
}

/// A request's identity as the transport knows it, admitted afresh when the policy changes.
pub struct Admission {
    identity: Identity,
    cached: Option<(Arc<Policy>, Result<Caller, Refusal>)>,
}

// === impl Endpoint ===

impl Endpoint {
    pub fn new(door: Door, config: &McpConfig) -> Endpoint {
        Endpoint { door, settings: ArcSwap::from_pointee(Settings::from_config(config)), listing: listing::Cache::default() }
    }

    /// Applies a reloaded `[mcp]` section (listeners need a restart).
    pub fn reconfigure(&self, config: &McpConfig) {
        self.settings.store(Arc::new(Settings::from_config(config)));
    }

    pub fn settings(&self) -> Arc<Settings> {
        self.settings.load_full()
    }

    /// The profile called `name`.
    pub fn profile(&self, name: &str) -> Option<Arc<Profile>> {
        self.settings.load().profiles.get(name).cloned()
    }

    /// The protocol without a transport: one message from a caller known as `identity`, answered
    /// as the Unix socket answers it (no profile, no session, no channel to ask the caller
    /// anything); `None` for a notification or a response, which get no answer. What the
    /// transports add is only moving bytes, sessions and streams.
    pub async fn answer_line(&self, identity: Identity, line: &[u8]) -> Option<String> {
        let request = match message::read(line) {
            Ok(message::Message::Request(request)) => request,
            Ok(_) => return None,
            Err(unreadable) => return Some(reply::unreadable(unreadable.code, &unreadable.message)),
        };
        let caller = match self.admit(&mut Admission::new(identity)) {
            Ok(caller) => caller,
            Err(refusal) => return Some(reply::refusal(request.id, &refusal)),
        };
        if request.method == modern::METHOD_LISTEN {
            return Some(reply::error(request.id, reply::SERVER_ERROR, "subscriptions/listen is a stream: open it on a transport", None));
        }
        let origin = Arc::new(Origin { wire: Wire::unix(None), session: None, version: None });
        let view = View { caller, profile: None, trace: None, client: None, origin };
        Some(self.answer(&view, &request, None).await)
    }

    /// The caller behind `admission`, admitted once per policy.
    ///
    /// # Errors
    /// The refusal that turns it away.
    fn admit(&self, admission: &mut Admission) -> Result<Caller, Refusal> {
        let policy = self.door.policy();
        match &admission.cached {
            Some((cached, result)) if Arc::ptr_eq(cached, &policy) => result.clone(),
            _ => {
                let result = self.door.admit(admission.identity.clone());
                admission.cached = Some((policy, result.clone()));
                result
            }
        }
    }

    /// Answers one request (not `subscriptions/listen`, which the transports stream) with its
    /// response line, inside the request's server span (the MCP conventions), whose duration
    /// it records. `out`, where the transport has a channel to the client while the request
    /// runs, carries a call's `notifications/progress` lines and toolhost's questions to a
    /// 2025 client.
    async fn answer(&self, view: &View, request: &message::Request<'_>, out: Option<&mpsc::Sender<String>>) -> String {
        let id = request.id;
        let params = Params::read(request.params);
        let target = match (&*request.method, &params) {
            (METHOD_TOOLS_CALL, Ok(params)) => params.name.as_deref().map(reply::clip),
            _ => None,
        };
        let mut operation = DoorSpan::start(&self.door, Front::Mcp, &request.method, target, &view.origin.wire);
        let span = operation.span().clone();
        match params.as_ref().ok().and_then(Params::trace) {
            Some((parent, state)) => operation.continue_trace(parent, state),
            None => {
                if let Some((parent, state)) = &view.trace {
                    operation.continue_trace(parent, state.as_deref());
                }
            }
        }
        if operation.observed() {
            operation.note(REQUEST_ID, reply::clip(id.get()).to_owned());
            operation.caller(&view.caller);
        }
        if let Some(session) = &view.origin.session {
            operation.session(session);
        }
        let line = match params {
            Ok(params) => {
                let version = match params.era() {
                    Era::Modern => params.meta.as_ref().and_then(|meta| meta.protocol_version.as_deref()).map(reply::clip),
                    Era::Legacy if request.method == METHOD_INITIALIZE => Some(agreed_version(params.protocol_version.as_deref())),
                    Era::Legacy => view.origin.version.as_deref(),
                };
                if let Some(version) = version {
                    operation.protocol_version(version);
                }
                self.answer_with(view, request, &params, out, &mut operation).instrument(span).await
            }
            Err(problem) => reply::error(id, INVALID_PARAMS, &format!("invalid params: {problem}"), None),
        };
        if operation.observed()
            && let Some((code, message)) = reply::error_of(&line, id)
        {
            operation.rpc_error(code, &message);
        }
        line
    }

    async fn answer_with(
        &self,
        view: &View,
        request: &message::Request<'_>,
        params: &Params<'_>,
        out: Option<&mpsc::Sender<String>>,
        operation: &mut DoorSpan,
    ) -> String {
        let id = request.id;
        let era = params.era();
        if era == Era::Modern
            && let Err(message::Refused(line)) = params.check_modern(id)
        {
            return line;
        }
        match &*request.method {
            METHOD_TOOLS_CALL => self.call(view, id, params, era, out, operation).await,
            METHOD_TOOLS_LIST => self.list(view, id, params, era),
            METHOD_INITIALIZE => reply::result(id, &initialize_result(params.protocol_version.as_deref())),
            METHOD_PING => reply::result(id, if era == Era::Modern { r#"{"resultType":"complete"}"# } else { "{}" }),
            METHOD_DISCOVER => reply::result(id, &discover_result()),
            method @ (tasks::METHOD_GET | tasks::METHOD_RESULT | tasks::METHOD_LIST | tasks::METHOD_CANCEL | tasks::METHOD_UPDATE) => {
                self.task_request(view, id, method, params, era).await
            }
            other => {
                reply::error(id, METHOD_NOT_FOUND, &format!("toolhost serves tools only; {} is not offered", reply::clip(other)), None)
            }
        }
    }

    fn list(&self, view: &View, id: &RawValue, params: &Params<'_>, era: Era) -> String {
        let settings = self.settings.load();
        let snapshot = self.door.snapshot();
        match self.listing.page(&snapshot, &self.door, view, params.cursor.as_deref(), settings.page_size, era) {
            Ok(page) => reply::result(id, &page),
            Err(problem) => reply::error(id, INVALID_PARAMS, &problem.to_string(), Some(&reply::reason_data("CURSOR_EXPIRED", &[]))),
        }
    }

    /// A `tools/call`, through the same [`Door`] as the gRPC API. When the server needs input
    /// first (`input_required`), a 2026 client gets the questions with toolhost's continuation
    /// token as `requestState`; a 2025 client that declared the capabilities is asked them on
    /// its session, and toolhost retries the call with its answers.
    async fn call(
        &self,
        view: &View,
        id: &RawValue,
        params: &Params<'_>,
        era: Era,
        out: Option<&mpsc::Sender<String>>,
        operation: &mut DoorSpan,
    ) -> String {
        let Some(name) = params.name.as_deref() else {
            return reply::error(id, INVALID_PARAMS, "tools/call needs params.name", None);
        };
        let (tool, arguments, expected_hash) = match lazy::target(&self.door, view, id, name, params.arguments, era).await {
            lazy::Target::Answered(line) => return line,
            lazy::Target::Call { tool, arguments, definition_hash } => (Some(tool), arguments, definition_hash),
            lazy::Target::NotLazy => (view.tool_ref(&self.door.snapshot(), name), params.arguments, params.definition_hash.clone()),
        };
        let Some(tool) = tool else {
            return reply::call_error(id, &CallError::UnknownTool { server: None, tool: name.to_owned() });
        };
        // Run as a task: a 2025 client asks with params.task; for a 2026 client that declared the
        // tasks extension toolhost decides (see `start_task`). A 2026 request's own `task` param
        // promotes nothing.
        let task_ttl = match era {
            Era::Legacy => params.task.as_ref().map(|task| task.ttl),
            Era::Modern => message::declares_tasks(params.meta.as_ref().and_then(|meta| meta.client_capabilities)).then_some(None),
        };
        if let Some(ttl) = task_ttl
            && params.request_state.is_none()
        {
            let call = crate::door::tasks::TaskCall {
                tool,
                arguments: arguments.map(|raw| raw.get().to_owned()),
                expected_hash: expected_hash.map(std::borrow::Cow::into_owned),
                expected_revision: None,
                ttl: ttl.map(std::time::Duration::from_millis),
            };
            return self.start_task(view, id, call, era).await;
        }
        // The client's answers to an earlier input_required result, if this is its retry.
        let mut answer = match (params.request_state.as_deref(), params.input_responses) {
            (None, None) => None,
            (Some(token), Some(responses)) => Some((token.to_owned(), responses.get().to_owned())),
            _ => return reply::call_error(id, &ContinuationError::Incomplete.into()),
        };
        // A 2026 client says what it can answer on each request; a 2025 one said it once.
        let legacy_capabilities = match era {
            Era::Legacy => view.client.as_ref().and_then(|client| client.capabilities()),
            Era::Modern => None,
        };
        let capabilities = match era {
            Era::Modern => params.meta.as_ref().and_then(|meta| meta.client_capabilities),
            Era::Legacy => legacy_capabilities.as_deref(),
        };
        for _ in 0..=MAX_INPUT_ROUNDS {
            let request = CallRequest {
                tool: tool.clone(),
                queue_as: view.caller.agent.name.clone(),
                arguments: arguments.map(RawValue::get),
                expected_hash: expected_hash.as_deref(),
                expected_revision: None,
                timeout: None,
                progress: None,
                answer: answer.as_ref().map(|(token, responses)| Answer { token, responses }),
                client_capabilities: capabilities,
                upstream_task: None,
            };
            let result = self.call_once(view, request, params.progress_token, out).await;
            operation.call_ended(&result);
            let done = match result {
                Ok(done) => done,
                Err(error) => return reply::call_error(id, &error),
            };
            let (Some(input), Some((token, _))) = (&done.outcome.input_required, &done.continuation) else {
                return reply::call_result(id, &done.raw, era);
            };
            if era == Era::Modern {
                return reply::input_required(id, &input.requests, token);
            }
            let Some(client) = &view.client else { return asking::ask_error(id, &asking::AskError::NoChannel) };
            match client.ask_all(out, &input.requests).await {
                Ok(responses) => answer = Some((token.clone(), responses)),
                Err(problem) => return asking::ask_error(id, &problem),
            }
        }
        reply::error(id, reply::SERVER_ERROR, &format!("the server still needed input after {MAX_INPUT_ROUNDS} rounds of answers"), None)
    }

    /// One round of a call: through the door, with the server's progress forwarded to `out`
    /// under the client's own token when it asked for progress.
    async fn call_once(
        &self,
        view: &View,
        mut request: CallRequest<'_>,
        progress_token: Option<&RawValue>,
        out: Option<&mpsc::Sender<String>>,
    ) -> Result<CallResult, CallError> {
        let mut upstream_progress = None;
        if let (Some(_), Some(_)) = (progress_token, out) {
            let (tx, rx) = mpsc::channel(PROGRESS_QUEUE);
            request.progress = Some(tx);
            upstream_progress = Some(rx);
        }
        let call = self.door.call(&view.caller, request);
        tokio::pin!(call);
        let forward = |update: Box<RawValue>| {
            if let (Some(out), Some(token)) = (out, progress_token)
                && let Some(line) = reply::progress(&update, token)
            {
                let _ = out.try_send(line);
            }
        };
        let result = loop {
            let Some(rx) = upstream_progress.as_mut() else { break call.await };
            tokio::select! {
                biased;
                update = rx.recv() => match update {
                    Some(update) => forward(update),
                    None => upstream_progress = None,
                },
                result = &mut call => break result,
            }
        };
        // The server's reader routed every progress notification before the response: those
        // still queued go out first, in order.
        if let Some(rx) = upstream_progress.as_mut() {
            while let Ok(update) = rx.try_recv() {
                forward(update);
            }
        }
        result
    }
}

// === impl Settings ===

impl Settings {
    fn from_config(config: &McpConfig) -> Settings {
        let profiles = config
            .profiles
            .iter()
            .map(|(name, profile)| {
                let compiled = Profile {
                    name: name.clone(),
                    tools: profile.tools.iter().map(|pattern| names::ToolGlob::qualified(pattern)).collect(),
                    original: profile.original_names.as_deref().map(Arc::from),
                    lazy: profile.lazy.as_ref().map(|globs| globs.iter().map(|glob| names::ToolGlob::qualified(glob)).collect()),
                };
                (name.clone(), Arc::new(compiled))
            })
            .collect();
        Settings { page_size: config.page_size.max(1), origins: Origins::new(config.allowed_origins.clone()), profiles }
    }

    /// Which browser origins and `Host` names the endpoint serves ([`Origins`]).
    pub fn origins(&self) -> &Origins {
        &self.origins
    }
}

// === impl Profile / View ===

impl Profile {
    fn shows(&self, tool: &names::ToolName<'_>) -> bool {
        self.tools.iter().any(|glob| glob.matches(tool))
    }
}

impl View {
    /// Whether this caller, through this profile, sees `tool`: the doors' one rule
    /// ([`crate::door::shows_tool`]: nothing held) and the profile's globs.
    pub fn shows(&self, tool: Tool<'_>) -> bool {
        tool.shown_to(&self.caller, crate::door::Presentation::Callable)
            && self.profile.as_ref().is_none_or(|profile| profile.shows(&tool.policy_name()))
    }

    /// The tool a listed name means here, or `None` if this view cannot name it.
    fn tool_ref(&self, snapshot: &Catalog, name: &str) -> Option<ToolRef> {
        let tool = match self.profile.as_ref().and_then(|profile| profile.original.clone()) {
            Some(server) => ToolRef::ServerTool { server: server.to_string(), name: name.to_owned() },
            None => ToolRef::Qualified(name.to_owned()),
        };
        let shown = self.profile.as_ref().is_none_or(|p| snapshot.judge(&tool, |tool| p.shows(tool)));
        shown.then_some(tool)
    }

    fn original_names(&self) -> bool {
        self.profile.as_ref().is_some_and(|profile| profile.original.is_some())
    }
}

impl Admission {
    pub fn new(identity: Identity) -> Admission {
        Admission { identity, cached: None }
    }
}

/// The version `initialize` agrees to: the one the client asked for if toolhost speaks it, else
/// the newest legacy one.
pub(super) fn agreed_version(requested: Option<&str>) -> &'static str {
    requested.and_then(|asked| LEGACY_VERSIONS.iter().find(|known| **known == asked)).copied().unwrap_or(LATEST_LEGACY)
}

/// Whether the endpoint answers `method` (the methods of [`Endpoint::answer_with`]).
fn serves(method: &str) -> bool {
    matches!(
        method,
        METHOD_TOOLS_CALL
            | METHOD_TOOLS_LIST
            | METHOD_INITIALIZE
            | METHOD_PING
            | METHOD_DISCOVER
            | tasks::METHOD_GET
            | tasks::METHOD_RESULT
            | tasks::METHOD_LIST
            | tasks::METHOD_CANCEL
            | tasks::METHOD_UPDATE
    )
}

/// The `initialize` result: the agreed version; tools with `listChanged`, and from 2025-11-25
/// tasks for `tools/call` (toolhost runs any call as a task).
fn initialize_result(requested: Option<&str>) -> String {
    let version = agreed_version(requested);
    let tasks = match version {
        "2025-11-25" => r#","tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}"#,
        _ => "",
    };
    format!(
        r#"{{"protocolVersion":"{version}","capabilities":{{"tools":{{"listChanged":true}}{tasks}}},"serverInfo":{},"instructions":{}}}"#,
        server_info(),
        serde_json::to_string(INSTRUCTIONS).unwrap_or_default()
    )
}

fn discover_result() -> String {
    let mut supported = vec![modern::VERSION];
    supported.extend(LEGACY_VERSIONS.iter().take(3));
    format!(
        r#"{{"resultType":"complete","supportedVersions":{},"capabilities":{{"tools":{{"listChanged":true}},"extensions":{{"io.modelcontextprotocol/tasks":{{}}}}}},"instructions":{},"ttlMs":{LIST_TTL_MS},"cacheScope":"public","_meta":{{"io.modelcontextprotocol/serverInfo":{}}}}}"#,
        serde_json::to_string(&supported).unwrap_or_default(),
        serde_json::to_string(INSTRUCTIONS).unwrap_or_default(),
        server_info()
    )
}

fn server_info() -> String {
    format!(r#"{{"name":"toolhost","title":"toolhost","version":"{}"}}"#, env!("CARGO_PKG_VERSION"))
}

const INSTRUCTIONS: &str = "Tools from the MCP servers on this host, named SERVER__TOOL. Each tool's _meta names its server, \
generation and definition hash; send the hash back in the call's _meta (dev.toolhost/definitionHash) to be told, instead of \
running it, when the tool changed since you listed it.";

/// Connections one listener serves at once; past this, new ones are closed at once (each costs a
/// task and a file descriptor, and an agent needs one).
/// Connections one peer (a uid, as the kernel says) may hold open; the rest are everyone
/// else's.
const CONNECTIONS_PER_PEER: usize = 256;
const MAX_CONNECTIONS: usize = 1024;

/// A connection slot of an endpoint listener ([`listen::connection_slot`]).
fn connection_slot(slots: &Arc<tokio::sync::Semaphore>, warnings: &Throttle) -> Option<tokio::sync::OwnedSemaphorePermit> {
    listen::connection_slot(slots, warnings, DOOR, MAX_CONNECTIONS)
}

/// The endpoint's name in the listeners' warnings.
const DOOR: &str = "mcp";

/// The endpoint's listeners, bound before the daemon says it is ready.
pub struct BoundListeners(Vec<Bound>);

impl BoundListeners {
    /// Each listener on its own, in the order bound (each can then be closed on its own).
    pub fn each(self) -> impl Iterator<Item = BoundListeners> {
        self.0.into_iter().map(|bound| BoundListeners(vec![bound]))
    }
}

/// Binds every `[mcp]` listener, so that a bad address fails the start.
///
/// # Errors
/// [`BindError`] naming the address.
pub async fn bind(listeners: &[Listener]) -> Result<(Vec<BoundAddr>, BoundListeners), BindError> {
    let (addrs, bound) = listen::bind_all(listeners).await?;
    Ok((addrs, BoundListeners(bound)))
}

/// Serves the endpoint on every listener until `cancel`; every task goes into `tracker`.
pub fn serve(listeners: BoundListeners, endpoint: Arc<Endpoint>, tracker: &TaskTracker, cancel: CancellationToken) {
    for listener in listeners.0 {
        match listener {
            Bound::Tcp(tcp) => {
                tracker.spawn(serve_http(tcp, endpoint.clone(), tracker.clone(), cancel.clone()));
            }
            Bound::Unix(unix, file) => {
                let (endpoint, tracker_for_connections, cancel) = (endpoint.clone(), tracker.clone(), cancel.clone());
                tracker.spawn(async move {
                    serve_unix(unix, endpoint, tracker_for_connections, cancel).await;
                    file.remove();
                });
            }
        }
    }
}
