//! The catalog page: every tool the caller may see, searched with the same full-text search as
//! `SearchTools` and filtered by server and state; and one tool's page: its definition, hash,
//! state and the generations each of its definitions was current for.

use maud::{Markup, html};

use super::diff::pretty;
use super::error::ConsoleError;
use super::html::{Ctx, Tab, has_marks, marked, page, short_hash};
use super::servers::urlencode;
use crate::door::error::DoorError;
use crate::door::view::{Catalog, Tool};
use crate::door::{Door, Presentation};

/// Rows a page shows at most (a search keeps its best).
const MAX_ROWS: usize = 500;
/// Versions of one tool shown.
const HISTORY: u32 = 50;
/// Characters of a description shown in the list.
const DESCRIPTION_CHARS: usize = 200;

/// The catalog page's query string.
#[derive(Debug, Default)]
pub(super) struct Query {
    pub(super) q: String,
    pub(super) server: String,
    /// `ok`, `held`, `unavailable` or empty (all).
    pub(super) state: String,
}

pub(super) async fn view(ctx: &Ctx<'_>, door: &Door, query: &Query) -> Result<Markup, ConsoleError> {
    let state_passes = |tool: Tool<'_>| match query.state.as_str() {
        "held" => tool.held().is_some(),
        "ok" => tool.held().is_none() && tool.server().available(),
        "unavailable" => !tool.server().available(),
        _ => true,
    };
    let servers: Vec<String> = if query.server.is_empty() { Vec::new() } else { vec![query.server.clone()] };
    let (snapshot, hits) = if query.q.trim().is_empty() {
        let snapshot = door.snapshot();
        if !servers.is_empty() && snapshot.visible_server(ctx.caller, &query.server).is_none() {
            return Err(DoorError::unknown_server(&query.server).into());
        }
        (snapshot, None)
    } else {
        let (snapshot, hits) = door.search(ctx.caller, &query.q, &servers, MAX_ROWS, Presentation::WithState, state_passes).await?;
        (snapshot, Some(hits))
    };
    let rows: Vec<Tool<'_>> = match &hits {
        Some(hits) => hits.iter().filter_map(|hit| hit.tool()).collect(),
        None => listed(ctx, &snapshot, query, state_passes),
    };
    let server_names: Vec<&str> = snapshot.visible_servers(ctx.caller).map(|view| view.name()).collect();
    let controls = html! {
        form.filters method="get" action="/catalog" {
            input type="search" name="q" value=(query.q) placeholder="Search names, titles, descriptions, arguments" maxlength="200";
            select name="server" {
                option value="" { "every server" }
                @for name in &server_names { option value=(name) selected[*name == query.server] { (name) } }
            }
            select name="state" {
                @for (value, label) in [("", "any state"), ("ok", "callable"), ("held", "held"), ("unavailable", "server unavailable")] {
                    option value=(value) selected[value == query.state] { (label) }
                }
            }
            button type="submit" { "Search" }
        }
    };
    let live = html! {
        p.count { (rows.len()) " tools" @if rows.len() == MAX_ROWS { " (the first " (MAX_ROWS) ")" } @if !query.q.trim().is_empty() { ", best match first" } }
        table.tools {
            thead { tr { th { "tool" } th { "description" } th { "state" } th { "hash" } th { "generation" } } }
            tbody {
                @for tool in &rows { (row(*tool)) }
            }
        }
    };
    Ok(page(ctx, Tab::Catalog, "Catalog", controls, live))
}

/// The tools of `query`'s server (or every one) the caller sees that pass `state_passes`, in
/// catalog order, at most [`MAX_ROWS`].
fn listed<'a>(ctx: &Ctx<'_>, snapshot: &'a Catalog, query: &Query, state_passes: impl Fn(Tool<'_>) -> bool) -> Vec<Tool<'a>> {
    snapshot
        .servers()
        .filter(|view| query.server.is_empty() || view.name() == query.server)
        .flat_map(|view| view.tools())
        .filter(|tool| tool.shown_to(ctx.caller, Presentation::WithState) && state_passes(*tool))
        .take(MAX_ROWS)
        .collect()
}

fn row(tool: Tool<'_>) -> Markup {
    let def = tool.def();
    let fields = def.fields();
    let integrity = tool.integrity();
    let description: String = fields.description.chars().take(DESCRIPTION_CHARS).collect();
    html! {
        tr data-tool=(tool.qualified()) {
            td { a href=(tool_href(tool.server().name(), tool.name())) { (marked(tool.qualified())) }
                @if !fields.title.is_empty() { br; small { (marked(&fields.title)) } } }
            td { (marked(&description)) @if description.len() < fields.description.len() { "…" } }
            td { (state(tool)) @if let Some(integrity) = integrity { @for flag in integrity.flags.names() { " " span.badge.flag { (flag) } } } }
            td { code title=(def.hash) { (short_hash(&def.hash)) } }
            td { (tool.generation()) }
        }
    }
}

fn state(tool: Tool<'_>) -> Markup {
    match tool.held() {
        Some(hold) => html! { span.state.bad { "held" } " " small { (hold.as_str()) } },
        None if tool.server().available() => html! { span.state.good { "callable" } },
        None => html! { span.state.neutral { "server " (tool.server().state().name()) } },
    }
}

pub(super) fn tool_href(server: &str, name: &str) -> String {
    format!("/tool?server={}&name={}", urlencode(server), urlencode(name))
}

/// One tool's page.
pub(super) async fn tool(ctx: &Ctx<'_>, door: &Door, server: &str, name: &str) -> Result<Markup, ConsoleError> {
    let snapshot = door.snapshot();
    let unknown = || ConsoleError::from(DoorError::unknown_tool(server, name));
    let view = snapshot.visible_server(ctx.caller, server).ok_or_else(unknown)?;
    let tool = view.tool_named(name).filter(|tool| tool.shown_to(ctx.caller, Presentation::WithState)).ok_or_else(unknown)?;
    let integrity = tool.integrity();
    let history = door.tool_history(server, name, HISTORY).await?;
    let def = tool.def();
    let definition = pretty(&def.definition);
    let live = html! {
        dl.facts {
            dt { "qualified name" } dd { code { (tool.qualified()) } }
            dt { "state" } dd { (state(tool))
                @if tool.held().is_some() && ctx.caller.agent.admin { " " a href="/review" { "review it" } } }
            dt { "definition hash" } dd { code { (def.hash) } }
            @if let Some(approved) = integrity.and_then(|state| state.approved_hash.as_deref()) {
                dt { "approved hash" } dd { code { (approved) } }
            }
            @if let Some(integrity) = integrity.filter(|state| state.flags.any()) {
                dt { "flags" } dd { @for flag in integrity.flags.names() { span.badge.flag { (flag) } " " } }
            }
            dt { "generation" } dd { (tool.generation()) }
        }
        h2 { "Definition" }
        @if has_marks(&definition) { p.error { "This definition holds characters a reader could miss; they are marked." } }
        pre.definition { (marked(&definition)) }
        h2 { "History" }
        table.history {
            thead { tr { th { "generations" } th { "definition hash" } } }
            tbody {
                @for (first, last, hash) in &history {
                    tr { td { (first) "–" @if let Some(last) = last { (last) } @else { "now" } } td { code { (hash) } } }
                }
            }
        }
    };
    Ok(page(ctx, Tab::Catalog, &format!("{server} / {name}"), html! {}, live))
}
