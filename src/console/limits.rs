//! The limits page: for each agent entry the caller may see (an operator every one, anyone
//! else their own), calls in flight against `concurrency`, the `rate` (left of the burst, when
//! the next call may start), each quota's window (used, left, when it renews) and the calls
//! that ran and were refused lately; for each server, calls running and waiting in its queue.

use std::time::Duration;

use maud::{Markup, html};

use super::error::ConsoleError;
use super::html::{Ctx, Tab, page, when};
use crate::door::Door;
use crate::door::limits::{AgentLimits, RECENT, Recent};

pub(super) async fn view(ctx: &Ctx<'_>, door: &Door, now_ms: i64) -> Result<Markup, ConsoleError> {
    let agents = door.limits_overview(ctx.caller, now_ms).await?;
    let snapshot = door.snapshot();
    let servers: Vec<_> = snapshot.visible_servers(ctx.caller).map(|view| (view.name(), view.queue())).collect();
    let live = html! {
        h2 { "Agents" }
        table.limits {
            thead { tr {
                th { "agent" } th { "in flight" } th { "rate" } th { "quotas" }
                th { "last " (humantime::format_duration(RECENT)) }
            } }
            tbody { @for (agent, recent) in &agents { (agent_row(agent, recent)) } }
        }
        h2 { "Servers" }
        @if servers.is_empty() { p { "No server to show." } }
        @else {
            table.limits {
                thead { tr { th { "server" } th { "running" } th { "waiting in line" } } }
                tbody {
                    @for (name, queue) in &servers {
                        tr data-server=(name) {
                            td { (name) }
                            td.running { (queue.running) }
                            td.waiting { (queue.waiting) }
                        }
                    }
                }
            }
        }
    };
    Ok(page(ctx, Tab::Limits, "Limits", html! {}, live))
}

fn agent_row(agent: &AgentLimits, recent: &Recent) -> Markup {
    let full = agent.in_flight >= agent.concurrency;
    html! {
        tr data-agent=(agent.agent) {
            td { strong { (agent.agent) } @if agent.admin { br; small { "operator" } } }
            td.in-flight { span.error[full] { (agent.in_flight) " of " (agent.concurrency) } }
            td.rate {
                @match &agent.rate {
                    None => "no rate limit",
                    Some(rate) => {
                        (rate.calls) " per " (seconds(rate.per)) ", bursts of " (rate.burst)
                        br;
                        small.next {
                            @if rate.next_in.is_zero() { (rate.available) " may start now" }
                            @else { span.error { "next call in " (millis(rate.next_in)) } }
                        }
                    }
                }
            }
            td.quotas {
                @if agent.quotas.is_empty() { "none" }
                @for quota in &agent.quotas {
                    div.quota {
                        code { (quota.tools.join(", ")) } ": " span.error[quota.left() == 0] { (quota.used) " of " (quota.calls) " used" }
                        " per " (seconds(quota.per)) br;
                        small { (quota.left()) " left, renews " (when(quota.renews_at_ms)) }
                    }
                }
            }
            td.recent { (recent.ran) " ran, " (recent.refused) " refused"
                @if recent.limited > 0 { br; small.error { (recent.limited) " by its limits" } } }
        }
    }
}

fn seconds(duration: Duration) -> String {
    humantime::format_duration(Duration::from_secs(duration.as_secs().max(1))).to_string()
}

fn millis(duration: Duration) -> String {
    humantime::format_duration(Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1))).to_string()
}
