//! `[approvals]`: how long a person's approval of a call holds, who may give it, and how many
//! calls may wait for one.

use std::time::Duration;

use serde::Deserialize;

use super::{KeyProblem, optional_duration, positive};

/// The longest `answer_after`: a caller is never left silent for long (its own deadline, a
/// little earlier, bounds the wait too).
const MAX_ANSWER_AFTER: Duration = Duration::from_secs(10 * 60);

/// `[approvals]`: calls a person approves before they run.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApprovals {
    pub(crate) ttl: Option<String>,
    /// How long a plain call waits for a decision before it answers with the request.
    pub(crate) answer_after: Option<String>,
    pub(crate) separate_approver: Option<bool>,
    pub(crate) max_pending_per_agent: Option<u32>,
    pub(crate) max_pending: Option<u32>,
}

/// `[approvals]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalsConfig {
    /// How long a request waits for a decision, and an approval holds once given (`ttl`).
    pub ttl: Duration,
    /// How long a plain call waits for a decision before it answers with the request, its
    /// expiry and the commands that decide it and fetch the result (`answer_after`): the
    /// person at the terminal learns at once that something waits for them.
    pub answer_after: Duration,
    /// An operator may not approve a call of their own.
    pub separate_approver: bool,
    /// Requests waiting at once per agent entry, and in all.
    pub max_pending_per_agent: u32,
    pub max_pending: u32,
}

impl Default for ApprovalsConfig {
    fn default() -> ApprovalsConfig {
        ApprovalsConfig {
            ttl: Duration::from_secs(15 * 60),
            answer_after: Duration::from_secs(2),
            separate_approver: false,
            max_pending_per_agent: 16,
            max_pending: 256,
        }
    }
}

/// `[approvals]`.
impl TryFrom<&RawApprovals> for ApprovalsConfig {
    type Error = KeyProblem;

    fn try_from(raw: &RawApprovals) -> Result<ApprovalsConfig, KeyProblem> {
        validate(raw)
    }
}

fn validate(raw: &RawApprovals) -> Result<ApprovalsConfig, KeyProblem> {
    let defaults = ApprovalsConfig::default();
    fn at<E: ToString>(key: &'static str) -> impl Fn(E) -> KeyProblem {
        move |problem| (key.to_owned(), problem.to_string())
    }
    let approvals = ApprovalsConfig {
        ttl: optional_duration(raw.ttl.as_deref(), defaults.ttl, Duration::from_secs(7 * 24 * 3600)).map_err(at("ttl"))?,
        answer_after: optional_duration(raw.answer_after.as_deref(), defaults.answer_after, MAX_ANSWER_AFTER)
            .map_err(at("answer_after"))?,
        separate_approver: raw.separate_approver.unwrap_or(defaults.separate_approver),
        max_pending_per_agent: positive(raw.max_pending_per_agent, defaults.max_pending_per_agent).map_err(at("max_pending_per_agent"))?,
        max_pending: positive(raw.max_pending, defaults.max_pending).map_err(at("max_pending"))?,
    };
    Ok(approvals)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain call answers after `answer_after`: 2 s unless set, never zero, never long.
    #[test]
    fn answer_after_is_positive_and_bounded() {
        let with = |text: &str| validate(&RawApprovals { answer_after: Some(text.to_owned()), ..RawApprovals::default() });
        assert_eq!(validate(&RawApprovals::default()).map(|a| a.answer_after), Ok(Duration::from_secs(2)));
        assert_eq!(with("500ms").map(|a| a.answer_after), Ok(Duration::from_millis(500)));
        assert_eq!(with("10m").map(|a| a.answer_after), Ok(Duration::from_secs(600)));
        for wrong in ["0s", "11m", "soon"] {
            assert_eq!(with(wrong).map_err(|(key, _)| key), Err("answer_after".to_owned()), "{wrong}");
        }
    }
}
