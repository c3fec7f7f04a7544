//! The approvals page (operators): the calls waiting for a person's approval, live, each with
//! who asked, the arguments it binds (data, never markup) and the tool's definition beside them,
//! and Approve and Deny (with a reason); then the recent decisions.

use maud::{Markup, html};

use super::error::ConsoleError;
use super::html::{Ctx, Tab, csrf_field, marked, page, when};
use crate::door::Door;
use crate::door::model::{ApprovalRecord, ApprovalStatus, Caller};

/// Decided requests shown below the pending ones.
const RECENT: usize = 50;
/// Longest arguments or definition shown whole on the page.
const SHOWN_BYTES: usize = 16 * 1024;

pub(super) async fn view(ctx: &Ctx<'_>, door: &Door, flash: Option<&str>) -> Result<Markup, ConsoleError> {
    let all = door.list_approvals(ctx.caller, None).await?;
    let (pending, decided): (Vec<&ApprovalRecord>, Vec<&ApprovalRecord>) = all.iter().partition(|r| r.status == ApprovalStatus::Pending);
    let definition = |record: &ApprovalRecord| door.bound_definition(record).map(|tool| pretty(&tool.definition));
    let controls = html! { @if let Some(flash) = flash { p.flash { (flash) } } };
    let live = html! {
        @if pending.is_empty() { p { "No call waits for an approval." } }
        @for record in &pending {
            section.approval data-approval=(record.id) {
                h2 { code { (marked(&record.qualified_name)) } " for " strong { (record.agent) } }
                p.count { "asked " (when(record.requested_at_ms)) " by " (record.caller) "; expires " (when(record.expires_at_ms))
                    br; "request " code { (record.id) } ", definition " code { (super::html::short_hash(&record.definition_hash)) } }
                div.side-by-side {
                    div { h3 { "Arguments (exactly what runs)" } pre.definition.arguments { (marked(&clip(pretty(&record.arguments)))) } }
                    div { h3 { "The tool's definition" }
                        @match definition(record) {
                            Some(text) => pre.definition { (marked(&clip(text))) },
                            None => p.error { "The tool's definition changed since this was asked: an approval would be stale." },
                        }
                    }
                }
                form.decide method="post" action="/approvals/decide" {
                    (csrf_field(ctx)) input type="hidden" name="id" value=(record.id);
                    input type="text" name="reason" placeholder="reason (required to deny)" maxlength="1000";
                    button type="submit" name="decision" value="approve" { "Approve" }
                    button type="submit" name="decision" value="deny" { "Deny" }
                }
            }
        }
        h2 { "Recent decisions" }
        table.approvals {
            thead { tr { th { "asked" } th { "agent" } th { "tool" } th { "status" } th { "decided by" } th { "reason" } } }
            tbody {
                @for record in decided.iter().take(RECENT) {
                    tr data-approval=(record.id) data-status=(record.status.as_str()) {
                        td { (when(record.requested_at_ms)) }
                        td { (record.agent) }
                        td { (marked(&record.qualified_name)) }
                        td { code { (record.status.as_str()) } }
                        td { (record.decided_by.as_deref().unwrap_or("–")) }
                        td { @if let Some(reason) = &record.reason { (marked(reason)) } }
                    }
                }
            }
        }
    };
    Ok(page(ctx, Tab::Approvals, "Approvals", controls, live))
}

/// An operator's decision from the page.
pub(super) async fn decide(door: &Door, caller: &Caller, id: &str, decision: &str, reason: &str) -> Result<String, ConsoleError> {
    let approve = match decision {
        "approve" => true,
        "deny" if reason.trim().is_empty() => return Err(ConsoleError::BadRequest("a denial says why: give a reason".into())),
        "deny" => false,
        _ => return Err(ConsoleError::BadRequest("decide approve or deny".into())),
    };
    let record = door.decide_approval(caller, id, approve, Some(reason)).await?;
    Ok(format!("{} {} for {} ({}).", if approve { "Approved" } else { "Denied" }, record.qualified_name, record.agent, record.id))
}

fn pretty(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| text.to_owned())
}

fn clip(text: String) -> String {
    crate::door::truncate(text, SHOWN_BYTES)
}
