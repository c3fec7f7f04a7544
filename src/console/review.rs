//! The review page (operators): held tools first, each with the approved and the offered
//! definition side by side, what changed field by field, the flags named, and an Approve button
//! bound to the exact hash shown (as `toolhost approve --hash`); then the recent approvals, the
//! fleet's marked as such.

use maud::{Markup, html};

use super::catalog::tool_href;
use super::diff::{pretty, side_by_side};
use super::error::ConsoleError;
use super::html::{Ctx, Tab, csrf_field, marked, page, short_hash, when};
use crate::door::model::{DefinitionDiff, FROM_FLEET, Hold};
use crate::door::operator::Operator;

/// Held tools reviewed on one page at most.
const MAX_HELD: usize = 100;
/// Approvals listed.
const APPROVALS: u32 = 20;

pub(super) async fn view(ctx: &Ctx<'_>, operator: &Operator, flash: Option<&str>) -> Result<Markup, ConsoleError> {
    let held = operator.held(ctx.caller, MAX_HELD).await?;
    let approvals = operator.recent_approvals(ctx.caller, APPROVALS).await?;
    let live = html! {
        @if let Some(flash) = flash { p.flash { (flash) } }
        h2 { (held.len()) " held" @if held.len() == MAX_HELD { " (the first " (MAX_HELD) ")" } }
        @if held.is_empty() { p { "Nothing is held: every tool is callable as its server offers it." } }
        @for (server, tool, hold, diff) in &held { (held_tool(ctx, server, tool, *hold, diff)) }
        h2 { "Recent approvals" }
        table.approvals {
            thead { tr { th { "tool" } th { "hash" } th { "approved by" } th { "when" } } }
            tbody {
                @for (server, name, approval) in &approvals {
                    tr {
                        td { a href=(tool_href(server, name)) { (server) "/" (marked(name)) } }
                        td { code title=(approval.hash) { (short_hash(&approval.hash)) } }
                        td {
                            @if let Some(by) = approval.approved_by.strip_prefix(FROM_FLEET) { span.badge.fleet { "fleet" } " " (by) }
                            @else { (approval.approved_by) }
                        }
                        td { (when(approval.approved_at_ms)) }
                    }
                }
            }
        }
    };
    Ok(page(ctx, Tab::Review, "Review", html! {}, live))
}

fn held_tool(ctx: &Ctx, server: &str, tool: &str, hold: Hold, diff: &DefinitionDiff) -> Markup {
    let offered = pretty(&diff.offered.definition);
    let approved = diff.approved.as_ref().map(|(_, definition)| pretty(definition)).unwrap_or_default();
    let flags = diff.integrity.as_ref().map(|state| state.flags.names()).unwrap_or_default();
    html! {
        section.held id=(format!("{server}/{tool}")) data-tool=(format!("{server}/{tool}")) {
            h3 { a href=(tool_href(server, tool)) { (server) " / " (marked(tool)) } " " span.state.bad { "held: " (hold.as_str()) }
                @for flag in &flags { " " span.badge.flag { (flag) } } }
            p {
                @match &diff.approved {
                    Some((approval, _)) => {
                        "Approved " code { (short_hash(&approval.hash)) } " by "
                        @if let Some(by) = approval.approved_by.strip_prefix(FROM_FLEET) { span.badge.fleet { "fleet" } " " (by) } @else { (approval.approved_by) }
                        @if approval.approved_at_ms > 0 { " at " (when(approval.approved_at_ms)) }
                        "; offered now " code { (short_hash(&diff.offered.hash)) } "."
                    }
                    None => { "Never approved; offered " code { (short_hash(&diff.offered.hash)) } "." }
                }
            }
            @if !diff.changes.is_empty() {
                ul.changes { @for change in &diff.changes { li { code { (marked(change)) } } } }
            }
            (side_by_side(&approved, &offered))
            @if hold == Hold::PinMismatch {
                p.error { "Pinned by the configuration (pins): change the pin to accept this definition." }
            } @else {
                form.approve method="post" action="/review/approve" {
                    (csrf_field(ctx))
                    input type="hidden" name="server" value=(server);
                    input type="hidden" name="tool" value=(tool);
                    input type="hidden" name="hash" value=(diff.offered.hash);
                    button type="submit" { "Approve " code { (short_hash(&diff.offered.hash)) } }
                    small { " binds exactly this definition: if the server offers another before you approve, nothing is approved." }
                }
            }
        }
    }
}
