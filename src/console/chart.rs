//! The audit page's chart: calls that ran and calls refused, per time bucket, as stacked bars
//! in inline SVG (no script, no library; the stylesheet colours it).

use maud::{Markup, html};

use super::html::when;

const WIDTH: u64 = 960;
const HEIGHT: u64 = 180;
const TOP: u64 = 12;
const BOTTOM: u64 = 22;

/// One bucket of the trail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Bucket {
    pub(super) start_ms: i64,
    /// Calls that reached a server, whatever they returned.
    pub(super) ran: u64,
    /// Calls refused before anything was sent (policy, limits, stale or held tools).
    pub(super) refused: u64,
}

/// `count` buckets of `bucket_ms` from `from_ms`, filled from `(start, ran, refused)` sums.
pub(super) fn buckets(from_ms: i64, bucket_ms: i64, count: usize, sums: impl IntoIterator<Item = (i64, bool, u64)>) -> Vec<Bucket> {
    let bucket_ms = bucket_ms.max(1);
    let mut out: Vec<Bucket> = (0..count)
        .map(|idx| Bucket {
            start_ms: from_ms.saturating_add(bucket_ms.saturating_mul(i64::try_from(idx).unwrap_or(0))),
            ..Bucket::default()
        })
        .collect();
    for (start, refused, calls) in sums {
        let Some(idx) = start.checked_sub(from_ms).map(|offset| offset / bucket_ms).and_then(|idx| usize::try_from(idx).ok()) else {
            continue;
        };
        if let Some(bucket) = out.get_mut(idx) {
            if refused {
                bucket.refused = bucket.refused.saturating_add(calls);
            } else {
                bucket.ran = bucket.ran.saturating_add(calls);
            }
        }
    }
    out
}

pub(super) fn chart(buckets: &[Bucket]) -> Markup {
    let highest = buckets.iter().map(|bucket| bucket.ran.saturating_add(bucket.refused)).max().unwrap_or(0).max(1);
    let plot = HEIGHT - TOP - BOTTOM;
    let slot = WIDTH / u64::try_from(buckets.len().max(1)).unwrap_or(1);
    let bar = slot.saturating_sub(2).max(1);
    let scale = |count: u64| count.saturating_mul(plot) / highest;
    let (first, last) = (buckets.first().map_or(0, |b| b.start_ms), buckets.last().map_or(0, |b| b.start_ms));
    html! {
        svg.chart viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label="Calls and refusals over time" {
            line.axis x1="0" y1=(HEIGHT - BOTTOM) x2=(WIDTH) y2=(HEIGHT - BOTTOM) {}
            text.label x="2" y="10" { (highest) " per bucket" }
            @for (idx, bucket) in buckets.iter().enumerate() {
                @let x = u64::try_from(idx).unwrap_or(0) * slot;
                @let (ran, refused) = (scale(bucket.ran), scale(bucket.refused));
                @if bucket.ran > 0 {
                    rect.ran x=(x) y=(HEIGHT - BOTTOM - ran) width=(bar) height=(ran.max(1)) {
                        title { (when(bucket.start_ms)) ": " (bucket.ran) " ran" }
                    }
                }
                @if bucket.refused > 0 {
                    rect.refused x=(x) y=(HEIGHT - BOTTOM - ran - refused) width=(bar) height=(refused.max(1)) {
                        title { (when(bucket.start_ms)) ": " (bucket.refused) " refused" }
                    }
                }
            }
            text.label x="2" y=(HEIGHT - 6) { (when(first)) }
            text.label.end x=(WIDTH - 2) y=(HEIGHT - 6) { (when(last)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_land_in_their_buckets_and_become_bars() {
        let filled = buckets(1000, 100, 3, [(1000, false, 4), (1100, true, 2), (1100, false, 1), (5000, false, 9), (0, true, 7)]);
        assert_eq!(filled.iter().map(|b| (b.ran, b.refused)).collect::<Vec<_>>(), [(4, 0), (1, 2), (0, 0)]);
        let svg = chart(&filled).into_string();
        assert_eq!(svg.matches(r#"<rect class="ran""#).count(), 2, "{svg}");
        assert_eq!(svg.matches(r#"<rect class="refused""#).count(), 1, "{svg}");
        assert!(svg.contains("4 per bucket"));
    }
}
