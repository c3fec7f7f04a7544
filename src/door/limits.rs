//! What an agent entry's limits stand at now: calls in flight against `concurrency`, its
//! `rate` (what is left of the burst, when the next call may start, recent calls and refusals)
//! and each quota's window (used, left, when it renews). One reading for every door: `WhoAmI`,
//! the console's limits page.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::access::{Agent, Caller};
use crate::store::audit::AuditFilter;
use crate::store::{Store, StoreError};

/// How far back the recent calls and refusals are counted.
pub const RECENT: Duration = Duration::from_secs(15 * 60);

/// One agent entry's limits, now.
#[derive(Debug, Clone)]
pub struct AgentLimits {
    pub agent: Arc<str>,
    pub admin: bool,
    pub concurrency: usize,
    pub in_flight: usize,
    pub rate: Option<RateNow>,
    pub quotas: Vec<QuotaNow>,
}

/// An agent entry's calls in the last [`RECENT`], from the audit trail: those that ran, those
/// refused (by anything: policy, a limit, a stale tool), and of those how many by its limits.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recent {
    pub ran: u64,
    pub refused: u64,
    pub limited: u64,
}

/// A `rate` limit, now.
#[derive(Debug, Clone, Copy)]
pub struct RateNow {
    pub calls: u32,
    pub per: Duration,
    pub burst: u32,
    /// Calls that could start at once.
    pub available: u32,
    /// Until the next call may start (zero: now).
    pub next_in: Duration,
}

/// One quota, in its current window.
#[derive(Debug, Clone)]
pub struct QuotaNow {
    pub tools: Vec<String>,
    pub calls: u32,
    pub per: Duration,
    pub used: u32,
    pub renews_at_ms: i64,
}

impl QuotaNow {
    #[must_use]
    pub fn left(&self) -> u32 {
        self.calls.saturating_sub(self.used)
    }
}

/// The agent entries `caller` may see the limits of: every entry for an operator, its own for
/// anyone else.
#[must_use]
pub fn entries_for(caller: &Caller, access: &crate::access::Access) -> Vec<Arc<Agent>> {
    if caller.agent.admin {
        return access.policy().entries();
    }
    vec![caller.agent.clone()]
}

/// Reads `agent`'s limits at `now_ms`: its counters, and its quotas from the store.
///
/// # Errors
/// [`StoreError`].
pub async fn read(store: &Store, agent: &Agent, now_ms: i64) -> Result<AgentLimits, StoreError> {
    let now = Instant::now();
    let rate = agent.rate.as_ref().map(|rate| RateNow {
        calls: rate.limit.calls,
        per: rate.limit.per,
        burst: rate.limit.burst,
        available: rate.available(now),
        next_in: rate.wait(now),
    });
    let mut quotas = Vec::with_capacity(agent.quotas.len());
    for quota in &agent.quotas {
        let (window, renews_at_ms) = quota.window(now_ms);
        // Counted in the store, less what this daemon counted ahead and has not used.
        let counted = store.quotas().used(&agent.name, &quota.key, window).await?;
        let used = counted.saturating_sub(quota.leased(window).await);
        quotas.push(QuotaNow { tools: quota.patterns.clone(), calls: quota.calls, per: quota.per, used, renews_at_ms });
    }
    Ok(AgentLimits {
        agent: agent.name.clone(),
        admin: agent.admin,
        concurrency: agent.concurrency,
        in_flight: agent.in_flight(),
        rate,
        quotas,
    })
}

/// `agent`'s calls in the last [`RECENT`] before `now_ms`, counted in the audit trail (what the
/// console's limits page shows beside the limits; `WhoAmI` does not ask for it).
///
/// # Errors
/// [`StoreError`].
pub async fn recent(store: &Store, agent: &str, now_ms: i64) -> Result<Recent, StoreError> {
    let since_ms = now_ms.saturating_sub(i64::try_from(RECENT.as_millis()).unwrap_or(i64::MAX));
    let filter = AuditFilter { since_ms, agent: Some(agent.to_owned()), ..AuditFilter::default() };
    let mut recent = Recent::default();
    for (_, outcome, count) in store.audit().histogram(&filter, i64::MAX).await? {
        if !crate::audit::is_call(&outcome) {
            continue;
        }
        if crate::audit::refused(&outcome) {
            recent.refused += count;
            if matches!(outcome.as_str(), "concurrency_limited" | "rate_limited" | "quota_exhausted") {
                recent.limited += count;
            }
        } else {
            recent.ran += count;
        }
    }
    Ok(recent)
}
