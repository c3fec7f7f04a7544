//! The tasks page: an agent's own tasks (status, tool, age, progress message, result or error
//! as data) with Cancel for those still working; an operator sees every agent's, filtered by
//! agent, state and tool, and may cancel any.

use maud::{Markup, html};

use super::error::ConsoleError;
use super::html::{Ctx, Tab, csrf_field, marked, page, when};
use crate::door::Door;
use crate::door::model::{TaskFilter, TaskStatus};
use crate::door::tasks::Task;
use crate::door::tasks::overview::MAX_LISTED;
use crate::door::truncate;

/// Longest part of a result or error shown in the list (the whole is the task's, by id).
const SHOWN_BYTES: usize = 2000;

/// The tasks page's query string.
#[derive(Debug, Default)]
pub(super) struct Query {
    pub(super) agent: String,
    pub(super) state: String,
    pub(super) tool: String,
}

pub(super) async fn view(ctx: &Ctx<'_>, door: &Door, query: &Query, now_ms: i64, flash: Option<&str>) -> Result<Markup, ConsoleError> {
    let admin = ctx.caller.agent.admin;
    let text = |value: &str| Some(value.trim().to_owned()).filter(|value| !value.is_empty());
    let filter = TaskFilter {
        owner: None,
        agent: text(&query.agent).filter(|_| admin),
        status: TaskStatus::named(query.state.trim()),
        tool: text(&query.tool),
    };
    let tasks = door.tasks().overview(ctx.caller, filter).await?;
    let agents: Vec<String> = if admin { door.policy().entries().iter().map(|a| a.name.to_string()).collect() } else { Vec::new() };
    // The flash stays outside the live region: the page fetches that every two seconds.
    let controls = html! {
        @if let Some(flash) = flash { p.flash { (flash) } }
        form.filters method="get" action="/tasks" {
            @if admin {
                select name="agent" {
                    option value="" { "every agent" }
                    @for agent in &agents { option value=(agent) selected[*agent == query.agent] { (agent) } }
                }
            }
            select name="state" {
                option value="" { "every state" }
                @for state in ["working", "completed", "failed", "cancelled"] { option value=(state) selected[state == query.state] { (state) } }
            }
            input type="text" name="tool" value=(query.tool) placeholder="tool (part of its qualified name)" maxlength="200";
            button type="submit" { "Filter" }
        }
    };
    let live = html! {
        @if tasks.is_empty() { p { "No task to show." } }
        @else {
            table.tasks {
                thead { tr {
                    th { "task" } @if admin { th { "agent" } } th { "tool" } th { "status" } th { "started" }
                    th { "message" } th { "result or error" } th { "actions" }
                } }
                tbody { @for task in &tasks { (row(ctx, task, now_ms)) } }
            }
        }
        @if tasks.len() == MAX_LISTED as usize { p.count { "The newest " (MAX_LISTED) " tasks; narrow the filters for older ones." } }
    };
    Ok(page(ctx, Tab::Tasks, "Tasks", controls, live))
}

fn row(ctx: &Ctx, task: &Task, now_ms: i64) -> Markup {
    let admin = ctx.caller.agent.admin;
    let cancellable = task.status == TaskStatus::Working && (admin || task.owner == ctx.caller.principal());
    let age = std::time::Duration::from_secs(u64::try_from(now_ms.saturating_sub(task.created_at_ms) / 1000).unwrap_or(0));
    let shown = task.result.as_deref().or(task.failure.as_deref()).map(|text| truncate(text.to_owned(), SHOWN_BYTES));
    html! {
        tr data-task=(task.id) data-status=(task.status.as_str()) {
            td { code title=(task.id) { (task.id.get(..12).unwrap_or(&task.id)) } }
            @if admin { td { (task.agent) } }
            td { (marked(&task.qualified_name)) }
            td { span class=(format!("state {}", status_class(task.status))) { (task.status.as_str()) }
                @if let Some(outcome) = &task.outcome { br; small { code { (outcome) } } } }
            td { (when(task.created_at_ms)) br; small { (humantime::format_duration(age)) " ago" } }
            td.error-text[task.status == TaskStatus::Failed] { @if let Some(message) = &task.status_message { (marked(message)) } }
            td { @if let Some(shown) = &shown { pre.data { (marked(shown)) } } }
            td.actions {
                @if cancellable {
                    form method="post" action="/tasks/cancel" {
                        (csrf_field(ctx)) input type="hidden" name="id" value=(task.id);
                        button type="submit" { "Cancel" }
                    }
                }
            }
        }
    }
}

fn status_class(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Completed => "good",
        TaskStatus::Working | TaskStatus::Cancelled => "neutral",
        TaskStatus::Failed => "bad",
    }
}
