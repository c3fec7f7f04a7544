//! What the front doors show of the catalog, in types of the door's own: a [`Catalog`] at one
//! revision, a [`Server`] in it, a [`Tool`] of that server and a [`Shown`] tool (the current
//! generation's or a past one's). Each is a borrowed window on the registry's snapshot (no
//! copy on the listing path) that answers only what a door prints or decides by, so the
//! registry's `ServerView`, its shared per-server state and its generations stay below the door:
//! when they change, this file changes, not the doors.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::access::Caller;
use crate::calls::{CallError, ToolRef};
use crate::catalog::integrity::{Hold, ToolIntegrity};
use crate::catalog::model::ToolDef;
use crate::catalog::names::ToolName;
use crate::catalog::record::EnumerationRecord;
use crate::mcp::lifecycle::ServerHello;
use crate::registry::{CatalogSnapshot, SandboxView, ServerState, ServerView};

use super::Presentation;

/// The catalog at one revision, as every door reads it. Cheap to clone.
#[derive(Clone)]
pub struct Catalog(Arc<CatalogSnapshot>);

impl Catalog {
    pub(super) fn new(snapshot: Arc<CatalogSnapshot>) -> Catalog {
        Catalog(snapshot)
    }

    /// The registry's snapshot, for the door's own rules.
    pub(super) fn snapshot(&self) -> &CatalogSnapshot {
        &self.0
    }

    /// Increases with every change to the catalog: tools, availability, the set of servers.
    pub fn revision(&self) -> u64 {
        self.0.revision
    }

    /// Every server, in name order (the order pages walk).
    pub fn servers(&self) -> impl Iterator<Item = Server<'_>> {
        self.0.servers.values().map(|view| Server(view))
    }

    /// The servers `caller` may know of ([`super::server_visible`]), in name order.
    pub fn visible_servers<'a>(&'a self, caller: &'a Caller) -> impl Iterator<Item = Server<'a>> {
        self.servers().filter(move |server| server.visible_to(caller))
    }

    /// The server `name`, whoever asks.
    pub fn server(&self, name: &str) -> Option<Server<'_>> {
        self.0.servers.get(name).map(|view| Server(view))
    }

    /// The server `name` if `caller` may know of it: one it may not answers as missing.
    pub fn visible_server(&self, caller: &Caller, name: &str) -> Option<Server<'_>> {
        self.server(name).filter(|server| server.visible_to(caller))
    }

    /// The tool `tool` names in the current generations: the one way a name becomes a tool,
    /// for calls and for reads.
    pub fn tool(&self, tool: &ToolRef) -> Option<Tool<'_>> {
        let (view, idx) = crate::calls::locate(&self.0.servers, tool)?;
        // `locate` hands out its own Arc; the view borrowed from this snapshot is the same one.
        self.server(view.name())?.tool(idx)
    }

    /// Whether `caller`'s policy lets it use `tool` ([`super::may_use`]).
    pub fn may_use(&self, caller: &Caller, tool: &ToolRef) -> bool {
        super::may_use(caller, &self.0, tool)
    }

    /// Whether `caller` sees the tool `qualified` as its server's current generation holds it
    /// ([`super::shows_name`]).
    pub fn shows_name(&self, caller: &Caller, qualified: &str, presentation: Presentation) -> bool {
        super::shows_name(caller, &self.0, qualified, presentation)
    }

    /// The error for a tool `caller` may not use ([`super::refused_tool`]).
    pub fn refused(&self, caller: &Caller, target: &ToolRef) -> CallError {
        super::refused_tool(caller, &self.0, target)
    }

    /// `decide` applied to the names the policy judges `tool` by ([`super::judge`]).
    pub fn judge<R>(&self, tool: &ToolRef, decide: impl FnOnce(&ToolName<'_>) -> R) -> R {
        super::judge(&self.0, tool, decide)
    }
}

/// One server as the doors show it.
#[derive(Clone, Copy)]
pub struct Server<'a>(&'a ServerView);

/// Calls of one server running and waiting in its queue now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    pub running: usize,
    pub waiting: usize,
}

/// Stale-tool races seen on one server, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Races {
    pub removed_before_call: u64,
    pub changed_since_listed: u64,
    pub upstream_unknown_tool: u64,
}

/// What a proxied sandbox's way out let through and refused, across its restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub tunnels: u64,
    pub denied: u64,
    /// The last `host:port` refused.
    pub last_denied: Option<String>,
    /// What would let it through, where that is known.
    pub last_fix: Option<String>,
}

/// One thing that happened to a server (a start, an exit, a restart, a limit hit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Happening {
    pub at_ms: i64,
    /// Its state after.
    pub state: ServerState,
    /// What happened, as the server or the supervisor said it (not escaped: a door escapes).
    pub what: String,
}

impl<'a> Server<'a> {
    pub(super) fn of(view: &'a ServerView) -> Server<'a> {
        Server(view)
    }

    pub fn name(self) -> &'a str {
        self.0.name()
    }

    /// The name as the registry shares it: two equal pointers, the same server entry.
    pub fn shared_name(self) -> &'a Arc<str> {
        self.0.name()
    }

    pub fn state(self) -> ServerState {
        self.0.state()
    }

    /// Its tools can be called now.
    pub fn available(self) -> bool {
        self.0.is_available()
    }

    /// "stdio" or "http".
    pub fn transport(self) -> &'static str {
        self.0.transport()
    }

    /// What the server said about itself in the current (or last) session.
    pub fn hello(self) -> Option<&'a ServerHello> {
        self.0.hello()
    }

    /// The current generation's number (0: none yet).
    pub fn generation(self) -> u64 {
        self.0.generation_number()
    }

    /// The current generation's tools.
    pub fn tool_count(self) -> usize {
        self.0.generation().map_or(0, |generation| generation.tools.len())
    }

    /// Tool `idx` of the current generation.
    pub fn tool(self, idx: usize) -> Option<Tool<'a>> {
        (idx < self.tool_count()).then_some(Tool { server: self, idx })
    }

    /// The current generation's tool whose own name is `name`.
    pub fn tool_named(self, name: &str) -> Option<Tool<'a>> {
        let idx = self.0.generation()?.position(name)?;
        self.tool(idx)
    }

    /// The current generation's tools, in its order.
    pub fn tools(self) -> impl Iterator<Item = Tool<'a>> {
        (0..self.tool_count()).map(move |idx| Tool { server: self, idx })
    }

    /// The generation was loaded from the store and no session has confirmed it yet.
    pub fn revalidating(self) -> bool {
        self.0.revalidating()
    }

    pub fn last_verified_at_ms(self) -> Option<i64> {
        self.0.last_verified_at_ms()
    }

    pub fn last_enumeration(self) -> Option<&'a EnumerationRecord> {
        self.0.last_enumeration()
    }

    /// Its last error as written (a door redacts and escapes it).
    pub fn last_error(self) -> Option<&'a str> {
        self.0.last_error()
    }

    /// Sessions started after the first.
    pub fn restarts(self) -> u64 {
        self.0.num_restarts()
    }

    /// Times its worker panicked and was rebuilt.
    pub fn worker_panics(self) -> u64 {
        self.0.num_worker_panics()
    }

    pub fn queue(self) -> Queue {
        let queue = &self.0.shared().call_queue;
        Queue { running: queue.in_use(), waiting: queue.waiting() }
    }

    pub fn races(self) -> Races {
        let races = &self.0.shared().races;
        Races {
            removed_before_call: races.removed_before_call.load(Ordering::Relaxed),
            changed_since_listed: races.changed_since_listed.load(Ordering::Relaxed),
            upstream_unknown_tool: races.upstream_unknown_tool.load(Ordering::Relaxed),
        }
    }

    pub fn egress(self) -> Egress {
        let egress = &self.0.shared().egress;
        Egress {
            tunnels: egress.tunnels.load(Ordering::Relaxed),
            denied: egress.denied.load(Ordering::Relaxed),
            last_denied: egress.last_denied(),
            last_fix: egress.last_fix(),
        }
    }

    /// What happened to it lately, newest first.
    pub fn history(self) -> Vec<Happening> {
        let recent = self.0.shared().history.newest_first().into_iter();
        recent.map(|happening| Happening { at_ms: happening.at_ms, state: happening.state, what: happening.what }).collect()
    }

    /// A stdio server's sandbox; `None` for an HTTP server.
    pub fn sandbox(self) -> Option<Sandbox<'a>> {
        self.0.sandbox().map(Sandbox)
    }

    /// Whether `caller` may know that this server exists ([`super::server_visible`]).
    pub fn visible_to(self, caller: &Caller) -> bool {
        super::server_visible(caller, self.0)
    }
}

/// A stdio server's sandbox as configured, and the limit that last stopped it.
#[derive(Clone, Copy)]
pub struct Sandbox<'a>(&'a SandboxView);

/// A sandbox's limits, for the whole sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    pub memory_bytes: u64,
    pub processes: u32,
    pub open_files: u32,
    pub cpu_seconds: u64,
    pub tmp_bytes: u64,
}

impl<'a> Sandbox<'a> {
    pub fn enabled(self) -> bool {
        self.0.enabled
    }

    /// Its network: "none", "loopback", "all" or "proxied".
    pub fn network(self) -> &'static str {
        self.0.network.label()
    }

    pub fn limits(self) -> SandboxLimits {
        let limits = &self.0.limits;
        SandboxLimits {
            memory_bytes: limits.memory_bytes,
            processes: limits.processes,
            open_files: limits.open_files,
            cpu_seconds: limits.cpu_seconds,
            tmp_bytes: limits.tmp_bytes,
        }
    }

    /// The limit that last stopped it.
    pub fn last_limit(self) -> Option<&'static str> {
        self.0.last_limit.map(|kind| kind.label())
    }

    /// How its limits are held on this host, in a word; [`Sandbox::enforcement_detail`] says it whole.
    pub fn enforcement(self) -> &'static str {
        self.0.enforcement.label()
    }

    pub fn enforcement_detail(self) -> String {
        self.0.enforcement.describe()
    }

    /// What it reads beyond the system.
    pub fn read(self) -> &'a [PathBuf] {
        &self.0.read
    }

    pub fn write(self) -> &'a [PathBuf] {
        &self.0.write
    }

    /// Its own home (`HOME`), where its caches live.
    pub fn home(self) -> Option<&'a Path> {
        self.0.home.as_deref()
    }

    /// Its data directory.
    pub fn data(self) -> Option<&'a Path> {
        self.0.data.as_deref()
    }

    /// With a proxied network: the hosts its way out reaches (`host:port`).
    pub fn allow(self) -> &'a [String] {
        &self.0.allow
    }

    /// The same hosts, each with why.
    pub fn reaches(self) -> &'a [(String, String)] {
        &self.0.reaches
    }
}

/// One tool of a server's current generation.
#[derive(Clone, Copy)]
pub struct Tool<'a> {
    server: Server<'a>,
    idx: usize,
}

impl<'a> Tool<'a> {
    pub fn server(self) -> Server<'a> {
        self.server
    }

    /// Its place in the generation (a listing's order).
    pub fn idx(self) -> usize {
        self.idx
    }

    /// Its definition. (A `Tool` is only made for an index its generation has.)
    pub fn def(self) -> &'a ToolDef {
        let tools = self.server.0.generation().map(|generation| &generation.tools[..]).unwrap_or_default();
        &tools[self.idx]
    }

    /// Its own name, as its server calls it.
    pub fn name(self) -> &'a str {
        &self.def().name
    }

    /// Its qualified name (`server__tool`, or as the names module escapes it).
    pub fn qualified(self) -> &'a str {
        self.server.0.qualified().name(self.idx)
    }

    /// The generation it belongs to.
    pub fn generation(self) -> u64 {
        self.server.generation()
    }

    /// Why it may not be called, if it is held.
    pub fn held(self) -> Option<Hold> {
        self.server.0.held(self.idx)
    }

    /// Its integrity state (`None`: callable as offered, nothing flagged).
    pub fn integrity(self) -> Option<&'a ToolIntegrity> {
        self.server.0.integrity_at(self.idx)
    }

    /// The names the policy and profiles judge it by.
    pub fn policy_name(self) -> ToolName<'a> {
        super::tool_name(self.server.0, self.idx)
    }

    /// Whether `caller` sees it through a door that presents tools so ([`super::shows_tool`]).
    pub fn shown_to(self, caller: &Caller, presentation: Presentation) -> bool {
        super::shows_tool(caller, self.server.0, self.idx, presentation)
    }

    /// As a door prints it, with its state.
    pub fn shown(self) -> Shown<'a> {
        Shown {
            server: self.server,
            qualified: Cow::Borrowed(self.qualified()),
            def: Cow::Borrowed(self.def()),
            generation: self.generation(),
            integrity: self.integrity(),
        }
    }
}

/// A tool as a door prints it: of its server's current generation, or of a past one (then
/// from the store, and without a state: integrity is the current generation's).
pub struct Shown<'a> {
    pub server: Server<'a>,
    pub qualified: Cow<'a, str>,
    pub def: Cow<'a, ToolDef>,
    pub generation: u64,
    /// Its integrity state in the current generation (`None`: callable as offered, or a past
    /// generation's tool).
    pub integrity: Option<&'a ToolIntegrity>,
}

impl Shown<'_> {
    /// Why it is held, if it is.
    pub fn held(&self) -> Option<Hold> {
        self.integrity.and_then(|state| state.held)
    }

    /// Whether it can be called now: its server is available, it is not held, and a tool its
    /// server runs only as a task needs a server that runs tasks (toolhost then runs it as one
    /// there, for any caller).
    pub fn available(&self) -> bool {
        let runs_tasks = self.server.hello().is_some_and(|hello| hello.tasks);
        self.server.available() && (!self.def.fields().task_required || runs_tasks) && self.held().is_none()
    }
}
