//! The catalog page: every tool the caller may see, searched with the same full-text search as
//! `SearchTools` and filtered by server and state; and one tool's page: its definition, hash,
//! state and the generations each of its definitions was current for.

use maud::{Markup, html};

use super::diff::pretty;
use super::error::ConsoleError;
use super::html::{Ctx, Tab, has_marks, marked, page, short_hash};
use super::servers::urlencode;
use crate::door::error::DoorError;
use crate::door::model::ServerView;
use crate::door::{Door, Presentation, server_visible, shows_tool};

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
    let state_passes = |view: &ServerView, idx: usize| match query.state.as_str() {
        "held" => view.held(idx).is_some(),
        "ok" => view.held(idx).is_none() && view.is_available(),
        "unavailable" => !view.is_available(),
        _ => true,
    };
    let servers: Vec<String> = if query.server.is_empty() { Vec::new() } else { vec![query.server.clone()] };
    let mut rows: Vec<(std::sync::Arc<ServerView>, usize)> = Vec::new();
    let snapshot = if query.q.trim().is_empty() {
        let snapshot = door.snapshot();
        if !servers.is_empty() && !snapshot.servers.get(query.server.as_str()).is_some_and(|view| server_visible(ctx.caller, view)) {
            return Err(DoorError::unknown_server(&query.server).into());
        }
        'servers: for view in snapshot.servers.values().filter(|view| servers.is_empty() || **view.name() == *query.server) {
            let Some(generation) = view.generation() else { continue };
            for idx in 0..generation.tools.len() {
                if shows_tool(ctx.caller, view, idx, Presentation::WithState) && state_passes(view, idx) {
                    rows.push((view.clone(), idx));
                    if rows.len() == MAX_ROWS {
                        break 'servers;
                    }
                }
            }
        }
        snapshot
    } else {
        let (snapshot, hits) = door.search(ctx.caller, &query.q, &servers, MAX_ROWS, Presentation::WithState, state_passes).await?;
        rows.extend(hits.into_iter().map(|hit| (hit.view, hit.idx)));
        snapshot
    };
    let server_names: Vec<&str> =
        snapshot.servers.values().filter(|view| server_visible(ctx.caller, view)).map(|view| &**view.name()).collect();
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
                @for (view, idx) in &rows { (row(view, *idx)) }
            }
        }
    };
    Ok(page(ctx, Tab::Catalog, "Catalog", controls, live))
}

fn row(view: &ServerView, idx: usize) -> Markup {
    let Some(generation) = view.generation() else { return html! {} };
    let tool = &generation.tools[idx];
    let fields = tool.fields();
    let integrity = view.integrity_at(idx);
    let description: String = fields.description.chars().take(DESCRIPTION_CHARS).collect();
    html! {
        tr data-tool=(view.qualified().name(idx)) {
            td { a href=(tool_href(view.name(), &tool.name)) { (marked(view.qualified().name(idx))) }
                @if !fields.title.is_empty() { br; small { (marked(&fields.title)) } } }
            td { (marked(&description)) @if description.len() < fields.description.len() { "…" } }
            td { (state(view, idx)) @if let Some(integrity) = integrity { @for flag in integrity.flags.names() { " " span.badge.flag { (flag) } } } }
            td { code title=(tool.hash) { (short_hash(&tool.hash)) } }
            td { (generation.number) }
        }
    }
}

fn state(view: &ServerView, idx: usize) -> Markup {
    match view.held(idx) {
        Some(hold) => html! { span.state.bad { "held" } " " small { (hold.as_str()) } },
        None if view.is_available() => html! { span.state.good { "callable" } },
        None => html! { span.state.neutral { "server " (view.state().name()) } },
    }
}

pub(super) fn tool_href(server: &str, name: &str) -> String {
    format!("/tool?server={}&name={}", urlencode(server), urlencode(name))
}

/// One tool's page.
pub(super) async fn tool(ctx: &Ctx<'_>, door: &Door, server: &str, name: &str) -> Result<Markup, ConsoleError> {
    let snapshot = door.snapshot();
    let unknown = || ConsoleError::from(DoorError::unknown_tool(server, name));
    let view = snapshot.servers.get(server).filter(|view| server_visible(ctx.caller, view)).ok_or_else(unknown)?;
    let generation = view.generation().ok_or_else(unknown)?;
    let idx = generation.position(name).filter(|idx| shows_tool(ctx.caller, view, *idx, Presentation::WithState)).ok_or_else(unknown)?;
    let tool = &generation.tools[idx];
    let integrity = view.integrity_at(idx);
    let history = door.tool_history(server, name, HISTORY).await?;
    let definition = pretty(&tool.definition);
    let live = html! {
        dl.facts {
            dt { "qualified name" } dd { code { (view.qualified().name(idx)) } }
            dt { "state" } dd { (state(view, idx))
                @if view.held(idx).is_some() && ctx.caller.agent.admin { " " a href="/review" { "review it" } } }
            dt { "definition hash" } dd { code { (tool.hash) } }
            @if let Some(approved) = integrity.and_then(|state| state.approved_hash.as_deref()) {
                dt { "approved hash" } dd { code { (approved) } }
            }
            @if let Some(integrity) = integrity.filter(|state| state.flags.any()) {
                dt { "flags" } dd { @for flag in integrity.flags.names() { span.badge.flag { (flag) } " " } }
            }
            dt { "generation" } dd { (generation.number) }
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
