//! `[approvals]`: how long a person's approval of a call holds, who may give it, and how many
//! calls may wait for one.

use std::time::Duration;

use super::raw::RawApprovals;
use super::{KeyProblem, optional_duration, positive};

/// `[approvals]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalsConfig {
    /// How long a request waits for a decision, and an approval holds once given (`ttl`).
    pub ttl: Duration,
    /// An operator may not approve a call of their own.
    pub separate_approver: bool,
    /// Requests waiting at once per agent entry, and in all.
    pub max_pending_per_agent: u32,
    pub max_pending: u32,
}

impl Default for ApprovalsConfig {
    fn default() -> ApprovalsConfig {
        ApprovalsConfig { ttl: Duration::from_secs(15 * 60), separate_approver: false, max_pending_per_agent: 16, max_pending: 256 }
    }
}

pub(super) fn validate(raw: &RawApprovals) -> Result<ApprovalsConfig, KeyProblem> {
    let defaults = ApprovalsConfig::default();
    let at = |key: &'static str| move |problem: String| (key.to_owned(), problem);
    let approvals = ApprovalsConfig {
        ttl: optional_duration(raw.ttl.as_deref(), defaults.ttl, Duration::from_secs(7 * 24 * 3600)).map_err(at("ttl"))?,
        separate_approver: raw.separate_approver.unwrap_or(defaults.separate_approver),
        max_pending_per_agent: positive(raw.max_pending_per_agent, defaults.max_pending_per_agent).map_err(at("max_pending_per_agent"))?,
        max_pending: positive(raw.max_pending, defaults.max_pending).map_err(at("max_pending"))?,
    };
    Ok(approvals)
}
