//! `[tasks]`: tool calls run as tasks, how many may be open and what their results may hold,
//! as written and as validated.

use std::time::Duration;

use serde::Deserialize;

use super::{DAY, HOUR, KeyProblem, optional_duration, positive};

/// `[tasks]`: tool calls run as tasks, and what they may hold.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTasks {
    pub(crate) max_open_per_agent: Option<u32>,
    pub(crate) max_open: Option<u32>,
    pub(crate) max_result_bytes: Option<u64>,
    pub(crate) max_stored_bytes_per_agent: Option<u64>,
    pub(crate) max_stored_bytes: Option<u64>,
    pub(crate) default_ttl: Option<String>,
    pub(crate) max_ttl: Option<String>,
    pub(crate) answer_within: Option<String>,
}

/// `[tasks]`: tool calls an agent asked to run as tasks. A task's call runs at most its TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TasksConfig {
    /// Tasks one agent entry may have working at once, and everyone together.
    pub max_open_per_agent: u32,
    pub max_open: u32,
    /// The largest result a task keeps (a larger one fails the task, saying so).
    pub max_result_bytes: u64,
    /// Result bytes kept for one agent entry's tasks, and for everyone's.
    pub max_stored_bytes_per_agent: u64,
    pub max_stored_bytes: u64,
    /// How long a task is kept from its creation when the caller does not say, and at most.
    pub default_ttl: Duration,
    pub max_ttl: Duration,
    /// How long a 2026 call of a tool its server does not run as a task may take before the
    /// MCP endpoint hands back a task instead of the result (`answer_within`).
    pub answer_within: Duration,
}

impl Default for TasksConfig {
    fn default() -> TasksConfig {
        TasksConfig {
            max_open_per_agent: 16,
            max_open: 256,
            max_result_bytes: 4 << 20,
            max_stored_bytes_per_agent: 64 << 20,
            max_stored_bytes: 512 << 20,
            default_ttl: HOUR,
            max_ttl: 7 * DAY,
            answer_within: Duration::from_millis(250),
        }
    }
}

/// `[tasks]`.
impl TryFrom<&RawTasks> for TasksConfig {
    type Error = KeyProblem;

    fn try_from(raw: &RawTasks) -> Result<TasksConfig, KeyProblem> {
        tasks(raw)
    }
}

fn tasks(raw: &RawTasks) -> Result<TasksConfig, KeyProblem> {
    fn at<E: ToString>(key: &'static str) -> impl Fn(E) -> KeyProblem {
        move |problem| (key.to_owned(), problem.to_string())
    }
    let defaults = TasksConfig::default();
    let max_ttl = optional_duration(raw.max_ttl.as_deref(), defaults.max_ttl, 30 * DAY).map_err(at("max_ttl"))?;
    let tasks = TasksConfig {
        max_open_per_agent: positive(raw.max_open_per_agent, defaults.max_open_per_agent).map_err(at("max_open_per_agent"))?,
        max_open: positive(raw.max_open, defaults.max_open).map_err(at("max_open"))?,
        max_result_bytes: positive(raw.max_result_bytes, defaults.max_result_bytes).map_err(at("max_result_bytes"))?,
        max_stored_bytes_per_agent: positive(raw.max_stored_bytes_per_agent, defaults.max_stored_bytes_per_agent)
            .map_err(at("max_stored_bytes_per_agent"))?,
        max_stored_bytes: positive(raw.max_stored_bytes, defaults.max_stored_bytes).map_err(at("max_stored_bytes"))?,
        default_ttl: optional_duration(raw.default_ttl.as_deref(), defaults.default_ttl.min(max_ttl), max_ttl)
            .map_err(at("default_ttl"))?,
        max_ttl,
        answer_within: optional_duration(raw.answer_within.as_deref(), defaults.answer_within, Duration::from_secs(60))
            .map_err(at("answer_within"))?,
    };
    if tasks.max_result_bytes > tasks.max_stored_bytes_per_agent {
        return Err(("max_result_bytes".into(), "must not be larger than max_stored_bytes_per_agent".into()));
    }
    Ok(tasks)
}
