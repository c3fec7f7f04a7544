//! `[access]` validation: agent entries with resolved users, groups and tokens, and glob
//! patterns that can only name configured servers.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::Deserialize;

use super::listeners::resolve_group;
use super::{
    AccessConfig, AgentConfig, DEFAULT_CONCURRENCY, KeyProblem, Quota, RateLimit, ServerGlob, ServerSpec, ValueError, parse_duration,
};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// `[access]`: who may see and call what.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccess {
    pub(crate) default: Option<String>,
    #[serde(default)]
    pub(crate) agents: Vec<RawAgent>,
    /// How long audit records are kept, and how many at most.
    pub(crate) audit_retention: Option<String>,
    pub(crate) audit_max_records: Option<u64>,
}

/// One `[[access.agents]]` entry.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) uids: Vec<u32>,
    #[serde(default)]
    pub(crate) gids: Vec<u32>,
    #[serde(default)]
    pub(crate) users: Vec<String>,
    #[serde(default)]
    pub(crate) groups: Vec<String>,
    #[serde(default)]
    pub(crate) units: Vec<String>,
    #[serde(default)]
    pub(crate) tokens: Vec<String>,
    /// Client certificate subjects (RFC 4514, globs), for TLS listeners with a client CA.
    #[serde(default)]
    pub(crate) subjects: Vec<String>,
    #[serde(default)]
    pub(crate) allow: Vec<String>,
    #[serde(default)]
    pub(crate) deny: Vec<String>,
    #[serde(default)]
    pub(crate) admin: bool,
    /// Calls in flight at once across every server (default 1024).
    pub(crate) concurrency: Option<u32>,
    /// `{ calls = 10, per = "1s", burst = 20 }`.
    pub(crate) rate: Option<RawRate>,
    /// `{ tools = ["billing__*"], calls = 10, per = "1d" }`, or a list of them.
    pub(crate) quota: Option<RawQuotas>,
    /// Globs over qualified names whose calls wait for a person's approval.
    #[serde(default)]
    pub(crate) approve: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawQuotas {
    One(RawQuota),
    Many(Vec<RawQuota>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuota {
    pub(crate) tools: Vec<String>,
    pub(crate) calls: u32,
    pub(crate) per: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRate {
    pub(crate) calls: u32,
    pub(crate) per: String,
    pub(crate) burst: Option<u32>,
}

/// `[access]` against the servers configured (a glob's server part must name one); `None`:
/// not written.
impl TryFrom<(Option<RawAccess>, &BTreeMap<String, ServerSpec>)> for AccessConfig {
    type Error = KeyProblem;

    fn try_from((raw, servers): (Option<RawAccess>, &BTreeMap<String, ServerSpec>)) -> Result<AccessConfig, KeyProblem> {
        access(raw, servers)
    }
}

fn access(raw: Option<RawAccess>, servers: &BTreeMap<String, ServerSpec>) -> Result<AccessConfig, KeyProblem> {
    let configured = raw.is_some();
    let raw = raw.unwrap_or_default();
    let default_allow = match raw.default.as_deref() {
        None | Some("deny") => false,
        Some("allow") => true,
        Some(other) => return Err(("default".into(), format!("{other:?} is not \"deny\" or \"allow\""))),
    };
    let audit_retention = match raw.audit_retention.as_deref() {
        None => 30 * DAY,
        Some(text) => parse_duration(text, 3650 * DAY).map_err(|problem| ("audit_retention".to_owned(), problem.to_string()))?,
    };
    let audit_max_records = match raw.audit_max_records {
        None => 1_000_000,
        Some(0) => return Err(("audit_max_records".into(), "must be greater than 0".into())),
        Some(n) => n,
    };
    let mut names = HashSet::new();
    let mut agents = Vec::with_capacity(raw.agents.len());
    for (idx, agent) in raw.agents.into_iter().enumerate() {
        let at = |key: &str, problem: String| (format!("agents[{idx}].{key}"), problem);
        if agent.name.trim().is_empty() {
            return Err(at("name", "must not be empty".into()));
        }
        if !names.insert(agent.name.clone()) {
            return Err(at("name", format!("{:?} names two entries", agent.name)));
        }
        agents.push(AgentConfig::try_from((agent, servers)).map_err(|(key, problem)| at(&key, problem))?);
    }
    let approve_everyone = servers
        .iter()
        .flat_map(|(server, spec)| spec.approve.iter().map(move |pattern| ServerGlob { server: server.clone(), pattern: pattern.clone() }))
        .collect();
    Ok(AccessConfig { configured, default_allow, agents, audit_retention, audit_max_records, approve_everyone })
}

/// One `[[access.agents]]` entry; keys are named within the entry.
impl TryFrom<(RawAgent, &BTreeMap<String, ServerSpec>)> for AgentConfig {
    type Error = KeyProblem;

    fn try_from((raw, servers): (RawAgent, &BTreeMap<String, ServerSpec>)) -> Result<AgentConfig, KeyProblem> {
        agent(raw, servers)
    }
}

fn agent(raw: RawAgent, servers: &BTreeMap<String, ServerSpec>) -> Result<AgentConfig, KeyProblem> {
    let mut uids = raw.uids;
    for user in &raw.users {
        match nix::unistd::User::from_name(user) {
            Ok(Some(entry)) => uids.push(entry.uid.as_raw()),
            Ok(None) => return Err(("users".into(), format!("there is no user {user:?} on this machine"))),
            Err(err) => return Err(("users".into(), format!("cannot look up the user {user:?}: {err}"))),
        }
    }
    let mut gids = raw.gids;
    for group in &raw.groups {
        gids.push(resolve_group(group).map_err(|problem| ("groups".to_owned(), problem.to_string()))?.gid);
    }
    for unit in &raw.units {
        check_glob(unit).map_err(|problem| ("units".to_owned(), problem.to_string()))?;
    }
    let mut tokens = Vec::with_capacity(raw.tokens.len());
    for (idx, token) in raw.tokens.iter().enumerate() {
        let resolved = crate::secrets::resolve(token).map_err(|problem| (format!("tokens[{idx}]"), problem.to_string()))?;
        if resolved.expose().len() < 16 {
            return Err((format!("tokens[{idx}]"), "a token must be at least 16 characters".into()));
        }
        if !resolved.has_secret() {
            return Err((format!("tokens[{idx}]"), "give a token by reference (${file:…}, ${cred:…} or ${VAR}), not inline".into()));
        }
        tokens.push(resolved);
    }
    for (key, patterns) in [("allow", &raw.allow), ("deny", &raw.deny), ("approve", &raw.approve)] {
        for pattern in patterns {
            check_tool_pattern(pattern, servers).map_err(|problem| (key.to_owned(), problem.to_string()))?;
        }
    }
    for subject in &raw.subjects {
        if subject.trim().is_empty() || subject.chars().any(char::is_control) {
            return Err(("subjects".into(), format!("{subject:?} is not a certificate subject like \"CN=bot,O=Example\"")));
        }
    }
    let concurrency = match raw.concurrency {
        None => DEFAULT_CONCURRENCY,
        Some(0) => return Err(("concurrency".into(), "must be at least 1".into())),
        Some(limit) => limit,
    };
    let rate = raw.rate.map(RateLimit::try_from).transpose()?;
    let raw_quotas = match raw.quota {
        None => Vec::new(),
        Some(RawQuotas::One(quota)) => vec![quota],
        Some(RawQuotas::Many(quotas)) => quotas,
    };
    let quotas = raw_quotas.into_iter().map(|quota| Quota::try_from((quota, servers))).collect::<Result<Vec<_>, _>>()?;
    Ok(AgentConfig {
        name: raw.name,
        concurrency,
        rate,
        quotas,
        uids,
        gids,
        units: raw.units,
        tokens,
        subjects: raw.subjects,
        allow: raw.allow,
        deny: raw.deny,
        admin: raw.admin,
        approve: raw.approve,
    })
}

/// `rate = { calls, per, burst }`; keys are named as in the agent entry.
impl TryFrom<RawRate> for RateLimit {
    type Error = KeyProblem;

    fn try_from(rate: RawRate) -> Result<RateLimit, KeyProblem> {
        let per = humantime::parse_duration(&rate.per)
            .ok()
            .filter(|per| !per.is_zero() && *per <= DAY)
            .ok_or_else(|| ("rate.per".to_owned(), format!("{:?} is not a duration between 1ms and a day (\"1s\", \"1m\")", rate.per)))?;
        if rate.calls == 0 {
            return Err(("rate.calls".to_owned(), "must be at least 1".to_owned()));
        }
        let burst = rate.burst.unwrap_or(rate.calls);
        if burst == 0 {
            return Err(("rate.burst".to_owned(), "must be at least 1".to_owned()));
        }
        Ok(RateLimit { calls: rate.calls, per, burst })
    }
}

/// One `quota`, its globs against the servers configured.
impl TryFrom<(RawQuota, &BTreeMap<String, ServerSpec>)> for Quota {
    type Error = KeyProblem;

    fn try_from((quota, servers): (RawQuota, &BTreeMap<String, ServerSpec>)) -> Result<Quota, KeyProblem> {
        if quota.tools.is_empty() {
            return Err(("quota.tools".into(), "name at least one tool glob".into()));
        }
        for pattern in &quota.tools {
            check_tool_pattern(pattern, servers).map_err(|problem| ("quota.tools".to_owned(), problem.to_string()))?;
        }
        if quota.calls == 0 {
            return Err(("quota.calls".into(), "must be at least 1 (deny the tools instead)".into()));
        }
        let per = humantime::parse_duration(&quota.per)
            .ok()
            .filter(|per| *per >= Duration::from_secs(1) && *per <= 366 * DAY)
            .ok_or_else(|| ("quota.per".to_owned(), format!("{:?} is not a period between 1s and a year (\"1h\", \"1d\")", quota.per)))?;
        Ok(Quota { tools: quota.tools, calls: quota.calls, per })
    }
}

/// A glob of letters, digits and `_ - . @ : *  ?`.
pub(super) fn check_glob(pattern: &str) -> Result<(), ValueError> {
    let valid = !pattern.is_empty() && pattern.chars().all(|c| c.is_ascii_alphanumeric() || "_-.@:*?".contains(c));
    if valid { Ok(()) } else { Err(ValueError::NotAGlob { pattern: pattern.to_owned() }) }
}

/// A glob over qualified names (`SERVER__TOOL`) whose server part, when it has no wildcard,
/// names a configured server: a typo must not silently allow or deny nothing.
pub(super) fn check_tool_pattern(pattern: &str, servers: &BTreeMap<String, ServerSpec>) -> Result<(), ValueError> {
    check_glob(pattern)?;
    if let Some((server, _)) = pattern.split_once("__")
        && !server.contains(['*', '?'])
        && !servers.contains_key(server)
    {
        return Err(ValueError::UnknownServer { pattern: pattern.to_owned(), server: server.to_owned() });
    }
    Ok(())
}
