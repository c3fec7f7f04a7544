//! The audit page (operators): the trail with filters (agent, tool, outcome, time) and a chart
//! of calls that ran and calls refused over the chosen window.

use std::time::Duration;

use maud::{Markup, html};

use super::chart::{buckets, chart};
use super::error::ConsoleError;
use super::html::{Ctx, Tab, marked, page, when};
use crate::door::model::{self, AuditFilter};
use crate::door::operator::Operator;

/// Records listed at most.
const ROWS: u32 = 200;
/// Bars in the chart.
const BARS: usize = 48;
/// The windows offered, and their labels.
const WINDOWS: [(&str, Duration, &str); 6] = [
    ("15m", Duration::from_secs(15 * 60), "last 15 minutes"),
    ("1h", Duration::from_secs(3600), "last hour"),
    ("6h", Duration::from_secs(6 * 3600), "last 6 hours"),
    ("24h", Duration::from_secs(24 * 3600), "last day"),
    ("7d", Duration::from_secs(7 * 24 * 3600), "last week"),
    ("30d", Duration::from_secs(30 * 24 * 3600), "last 30 days"),
];

/// The audit page's query string.
#[derive(Debug, Default)]
pub(super) struct Query {
    pub(super) agent: String,
    pub(super) tool: String,
    pub(super) outcome: String,
    /// One of [`WINDOWS`]' keys (default the last hour).
    pub(super) window: String,
}

pub(super) async fn view(ctx: &Ctx<'_>, operator: &Operator, query: &Query, now_ms: i64) -> Result<Markup, ConsoleError> {
    let (window_key, window) =
        WINDOWS.iter().find(|(key, _, _)| *key == query.window).map_or(("1h", WINDOWS[1].1), |(key, window, _)| (*key, *window));
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let bucket_ms = (window_ms / i64::try_from(BARS).unwrap_or(1)).max(1);
    // Buckets aligned to multiples of their width, the last one holding now.
    let first = (now_ms / bucket_ms).saturating_sub(i64::try_from(BARS).unwrap_or(0) - 1).saturating_mul(bucket_ms);
    let text = |value: &str| Some(value.trim().to_owned()).filter(|value| !value.is_empty());
    let filter =
        AuditFilter { since_ms: first, until_ms: None, agent: text(&query.agent), tool: text(&query.tool), outcome: text(&query.outcome) };
    let (records, sums) = operator.audit_window(ctx.caller, &filter, ROWS, bucket_ms).await?;
    let bars = buckets(
        first,
        bucket_ms,
        BARS,
        sums.into_iter()
            .filter(|(_, outcome, _)| model::is_call(outcome))
            .map(|(start, outcome, count)| (start, model::refused(&outcome), count)),
    );
    let (ran, refused) = bars.iter().fold((0u64, 0u64), |(ran, refused), bar| (ran + bar.ran, refused + bar.refused));
    let controls = html! {
        form.filters method="get" action="/audit" {
            input type="text" name="agent" value=(query.agent) placeholder="agent" maxlength="200";
            input type="text" name="tool" value=(query.tool) placeholder="tool (part of its qualified name)" maxlength="200";
            input type="text" name="outcome" value=(query.outcome) placeholder="outcome (ok, denied, stale_tool…)" maxlength="100";
            select name="window" {
                @for (key, _, label) in WINDOWS { option value=(key) selected[key == window_key] { (label) } }
            }
            button type="submit" { "Filter" }
        }
    };
    let live = html! {
        p.count { (ran) " ran, " (refused) " refused" span.legend { span.ran { "■ ran" } " " span.refused { "■ refused" } } }
        (chart(&bars))
        table.audit {
            thead { tr { th { "when" } th { "agent" } th { "caller" } th { "tool" } th { "generation" } th { "outcome" } th { "duration" } } }
            tbody {
                @for record in &records {
                    tr.refused[model::refused(&record.outcome)] {
                        td { (when(record.at_ms)) }
                        td { (record.agent) }
                        td { small { (record.caller) " · " (record.transport) } }
                        td { (marked(&record.qualified_name)) }
                        td { (record.generation) }
                        td { code { (record.outcome) } }
                        td { (format_duration(record.duration_us)) }
                    }
                }
            }
        }
        @if records.len() == ROWS as usize { p.count { "The newest " (ROWS) " records; narrow the filters for older ones." } }
    };
    Ok(page(ctx, Tab::Audit, "Audit", controls, live))
}

fn format_duration(micros: u64) -> String {
    match micros {
        0..1_000 => format!("{micros} µs"),
        1_000..1_000_000 => format!("{:.1} ms", micros as f64 / 1e3),
        _ => format!("{:.2} s", micros as f64 / 1e6),
    }
}
