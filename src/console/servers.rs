//! The servers page: each server the caller may know of, its state, era, transport,
//! generation, tools, last error (secrets redacted), sandbox and limits, restarts; an operator
//! gets Refresh and Restart.

use maud::{Markup, html};

use super::html::{Ctx, Tab, csrf_field, marked, page, when};
use crate::door::server_visible;
use crate::registry::{CatalogSnapshot, ServerState, ServerView};

pub(super) fn view(ctx: &Ctx, snapshot: &CatalogSnapshot, store_degraded: Option<String>, flash: Option<&str>) -> Markup {
    let servers: Vec<&ServerView> = snapshot.servers.values().filter(|view| server_visible(ctx.caller, view)).map(|v| &**v).collect();
    let live = html! {
        @if let Some(flash) = flash { p.flash { (flash) } }
        @if let Some(reason) = store_degraded.filter(|_| ctx.caller.agent.admin) {
            p.error { "The store is degraded: " (reason) }
        }
        @if servers.is_empty() { p { "No server to show." } }
        table.servers {
            thead { tr {
                th { "server" } th { "state" } th { "era · transport" } th { "generation" } th { "tools" }
                th { "calls" } th { "restarts" } th { "sandbox and limits" } th { "last error" }
                @if ctx.caller.agent.admin { th { "actions" } }
            } }
            tbody {
                @for view in &servers { (row(ctx, view)) }
            }
        }
    };
    page(ctx, Tab::Servers, "Servers", html! {}, live)
}

fn row(ctx: &Ctx, view: &ServerView) -> Markup {
    let hello = view.hello.as_ref();
    let tools = view.generation.as_ref().map_or(0, |generation| generation.tools.len());
    let held = (0..tools).filter(|idx| view.held(*idx).is_some()).count();
    let error = view.last_error.as_deref().map(crate::secrets::redact);
    html! {
        tr data-server=(view.name) {
            td { a href=(format!("/catalog?server={}", urlencode(&view.name))) { strong { (view.name) } } }
            td { span class=(format!("state {}", state_class(view.state))) { (view.state.name()) }
                @if view.revalidating { " " span.badge title="Serving the stored catalog until the server lists again" { "revalidating" } } }
            td { (hello.map_or("–", |hello| hello.era.as_str())) " · " (view.transport)
                @if let Some(hello) = hello { br; small { (hello.protocol_version) } } }
            td { (view.generation_number()) br; small title="Last verified" { (when(view.last_verified_at_ms.unwrap_or(0))) } }
            td { (tools) @if held > 0 { " " a.badge.held href="/review" { (held) " held" } } }
            td { (view.shared.call_queue.in_use()) " running" @if view.shared.call_queue.waiting() > 0 { ", " (view.shared.call_queue.waiting()) " waiting" } }
            td { (view.num_restarts) @if view.num_worker_panics > 0 { br; small.error { (view.num_worker_panics) " worker panics" } } }
            td { (sandbox(view)) }
            td.error-text { @if let Some(error) = &error { (marked(error)) } }
            @if ctx.caller.agent.admin {
                td.actions {
                    @if view.state != ServerState::Disabled {
                        form method="post" action="/servers/refresh" {
                            (csrf_field(ctx)) input type="hidden" name="server" value=(view.name);
                            button type="submit" { "Refresh" }
                        }
                        form method="post" action="/servers/restart" {
                            (csrf_field(ctx)) input type="hidden" name="server" value=(view.name);
                            button type="submit" { "Restart" }
                        }
                    }
                }
            }
        }
    }
}

fn sandbox(view: &ServerView) -> Markup {
    let Some(sandbox) = &view.sandbox else { return html! { "–" } };
    let limits = &sandbox.limits;
    html! {
        @if sandbox.enabled { "sandboxed" } @else { span.error { "not sandboxed" } }
        ", network " (sandbox.network.label())
        br;
        small { (limits.memory_bytes / (1024 * 1024)) " MiB · " (limits.processes) " processes · " (limits.open_files) " files · " (limits.cpu_seconds) " s CPU" }
        @if let Some(kind) = sandbox.last_limit { br; small.error { "last hit: " (kind.label()) } }
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
