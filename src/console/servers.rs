//! The servers page: each server the caller may know of, its state, protocol, transport,
//! generation, tools, last error (secrets redacted), sandbox and limits, restarts; an operator
//! gets Refresh and Restart. And one server's own page: why it stopped (its exit and stderr),
//! what happened to it (starts, exits, restarts, limits hit), its last listing, its sandbox and
//! home, its tools.

use maud::{Markup, html};

use super::html::{Ctx, Tab, csrf_field, marked, page, when};
use crate::door::model::{ServerState, redact};
use crate::door::view::{Catalog, Server};

pub(super) fn view(ctx: &Ctx, snapshot: &Catalog, store_degraded: Option<String>, flash: Option<&str>) -> Markup {
    let servers: Vec<Server<'_>> = snapshot.visible_servers(ctx.caller).collect();
    let live = html! {
        @if let Some(flash) = flash { p.flash { (flash) } }
        @if let Some(reason) = store_degraded.filter(|_| ctx.caller.agent.admin) {
            p.error { "The store is degraded: " (reason) }
        }
        @if servers.is_empty() { p { "No server to show." } }
        table.servers {
            (head(ctx))
            tbody {
                @for view in &servers { (row(ctx, *view)) }
            }
        }
    };
    page(ctx, Tab::Servers, "Servers", html! {}, live)
}

fn head(ctx: &Ctx) -> Markup {
    html! {
        thead { tr {
            th { "server" } th { "state" } th { "protocol · transport" } th { "generation" } th { "tools" }
            th { "calls" } th { "restarts" } th { "sandbox and limits" } th { "last error" }
            @if ctx.caller.agent.admin { th { "actions" } }
        } }
    }
}

fn row(ctx: &Ctx, view: Server<'_>) -> Markup {
    let hello = view.hello();
    let tools = view.tool_count();
    let held = view.tools().filter(|tool| tool.held().is_some()).count();
    let error = view.last_error().map(redact);
    let queue = view.queue();
    let name = view.name();
    html! {
        tr data-server=(name) {
            td { a href=(format!("/server?name={}", urlencode(name))) { strong { (name) } }
                br; small { a href=(format!("/catalog?server={}", urlencode(name))) { "tools" } } }
            td { span class=(format!("state {}", state_class(view.state()))) { (view.state().name()) }
                @if view.revalidating() { " " span.badge title="Serving the stored catalog until the server lists again" { "revalidating" } } }
            td { (hello.map_or_else(|| "–".to_owned(), protocol_shown)) " · " (view.transport())
                @if let Some(hello) = hello { br; small { (hello.protocol_version) } } }
            td { (view.generation()) br; small title="Last verified" { (when(view.last_verified_at_ms().unwrap_or(0))) } }
            td { (tools) @if held > 0 { " " a.badge.held href="/review" { (held) " held" } } }
            td { (queue.running) " running" @if queue.waiting > 0 { ", " (queue.waiting) " waiting" } }
            td { (view.restarts()) @if view.worker_panics() > 0 { br; small.error { (view.worker_panics()) " worker panics" } } }
            td { (sandbox(view)) }
            td.error-text { @if let Some(error) = &error { (marked(error)) } }
            @if ctx.caller.agent.admin {
                td.actions {
                    @if view.state() != ServerState::Disabled {
                        form method="post" action="/servers/refresh" {
                            (csrf_field(ctx)) input type="hidden" name="server" value=(name);
                            button type="submit" { "Refresh" }
                        }
                        form method="post" action="/servers/restart" {
                            (csrf_field(ctx)) input type="hidden" name="server" value=(name);
                            button type="submit" { "Restart" }
                        }
                    }
                }
            }
        }
    }
}

/// One server's page: everything the row says, and what it leaves out: the last error whole
/// (with the server's exit and stderr lines), the last listing, the grants and home, the tools.
pub(super) fn server(ctx: &Ctx, snapshot: &Catalog, name: &str, flash: Option<&str>) -> Option<Markup> {
    let view = snapshot.visible_server(ctx.caller, name)?;
    let hello = view.hello();
    let tools: Vec<_> = view.tools().collect();
    let error = view.last_error().map(redact);
    let live = html! {
        @if let Some(flash) = flash { p.flash { (flash) } }
        table.servers { (head(ctx)) tbody { (row(ctx, view)) } }
        h2 { "Why it last stopped or failed" }
        @match &error {
            Some(error) => pre.definition.error-text { (marked(error)) },
            None => p { "Nothing went wrong since it last started." },
        }
        h2 { "What happened to it" }
        table.history {
            thead { tr { th { "when" } th { "state after" } th { "what" } } }
            tbody {
                @for happening in view.history() {
                    tr { td { (when(happening.at_ms)) } td { span class=(format!("state {}", state_class(happening.state))) { (happening.state.name()) } }
                        td.error-text[state_class(happening.state) == "bad"] { (marked(&happening.what)) } }
                }
            }
        }
        h2 { "Its last listing" }
        @match view.last_enumeration() {
            Some(record) => p {
                (record.outcome.as_str()) " (" (record.reason.as_str()) "), " (when(record.started_at_ms)) ": "
                (record.tools) " tools in " (record.pages) " pages, " (record.duration_ms) " ms; generation " (record.generation)
                @if let Some(error) = &record.error { br; span.error-text { (marked(&redact(error))) } }
            },
            None => p { "None yet." },
        }
        h2 { "What it runs in" }
        p { (hello.map_or_else(|| "not connected".to_owned(), protocol_shown)) " · " (view.transport()) }
        @if let Some(sandbox) = view.sandbox() {
            p { (self::sandbox(view)) }
            @if let Some(home) = sandbox.home() { p { "Home (HOME, its caches): " code { (home.display().to_string()) } } }
            @if !sandbox.read().is_empty() { p { "Reads (beside the system): " @for path in sandbox.read() { code { (path.display().to_string()) } " " } } }
            @if !sandbox.write().is_empty() { p { "Writes: " @for path in sandbox.write() { code { (path.display().to_string()) } " " } } }
        }
        h2 { "Its tools" }
        @if tools.is_empty() { p { "None listed." } }
        ul {
            @for tool in &tools {
                li {
                    a href=(format!("/tool?server={}&name={}", urlencode(view.name()), urlencode(tool.name()))) { (marked(tool.name())) }
                    @if tool.held().is_some() { " " span.badge.held { "held" } }
                }
            }
        }
    };
    Some(page(ctx, Tab::Servers, &format!("Server {name}"), html! {}, live))
}

fn sandbox(view: Server<'_>) -> Markup {
    let Some(sandbox) = view.sandbox() else { return html! { "–" } };
    let limits = sandbox.limits();
    let egress = view.egress();
    html! {
        @if sandbox.enabled() { "sandboxed" } @else { span.error { "not sandboxed" } }
        ", network " (sandbox.network())
        br;
        small title=[sandbox.enabled().then(|| sandbox.enforcement_detail())] {
            (limits.memory_bytes / (1024 * 1024)) " MiB · " (limits.processes) " processes · " (limits.open_files) " files · "
            (limits.cpu_seconds) " s CPU · " (limits.tmp_bytes / (1024 * 1024)) " MiB /tmp"
            @if sandbox.enabled() { " · limits " (sandbox.enforcement()) }
        }
        @if let Some(kind) = sandbox.last_limit() { br; small.error { "last hit: " (kind) } }
        @if !sandbox.allow().is_empty() { br; small { "reaches " (sandbox.allow().join(", ")) } }
        @if egress.denied > 0 {
            br; small.error { (egress.denied) " refused, last: " (egress.last_denied.unwrap_or_default()) }
        }
    }
}

fn state_class(state: ServerState) -> &'static str {
    match state {
        ServerState::Ready => "good",
        ServerState::Starting | ServerState::Reconnecting | ServerState::NoTools | ServerState::Disabled | ServerState::Stopped => {
            "neutral"
        }
        _ => "bad",
    }
}

/// A query-string value.
pub(super) fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A server's protocol as a person reads it: the version it agreed to and how it works
/// (sessions up to 2025-11-25, stateless from 2026-07-28), never "legacy" for the current
/// stable version.
fn protocol_shown(hello: &crate::mcp::lifecycle::ServerHello) -> String {
    let how = match hello.era {
        crate::mcp::lifecycle::Era::Legacy => "sessions",
        crate::mcp::lifecycle::Era::Modern => "stateless",
    };
    format!("{} ({how})", hello.protocol_version)
}
