//! Who may see and call what. One decision serves listing and calling: a tool an agent may not
//! call is never listed to it, and calling it looks exactly like calling a tool that does not
//! exist (agents with `admin = true` get the real reason).
//!
//! The kernel identifies Unix-socket callers (`SO_PEERCRED`, their groups and systemd unit, read
//! once per connection, see [`identity`]); TCP callers present a bearer token, compared in
//! constant time. A caller matches the first `[[access.agents]]` entry that names one of its
//! identities. The compiled [`Policy`] sits in an `ArcSwap`: a reload replaces it atomically for
//! new requests and for open watch streams, which read it per event.

pub mod identity;
pub mod limits;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use arc_swap::ArcSwap;
use subtle::ConstantTimeEq;
use wildmatch::WildMatch;

use crate::catalog::names::{ToolGlob, ToolName};
use crate::config::{AccessConfig, AgentConfig, ServerGlob};
pub use identity::{Identity, PeerInfo, TlsPeerInfo, UnixPeer};

/// Decisions an agent caches, per tool ([`ToolName::key`]); past this many the cache starts over.
const DECISIONS_CACHED: usize = 65_536;

/// The access policy in force; swapped whole on reload.
pub struct Access {
    policy: ArcSwap<Policy>,
}

/// A compiled `[access]` section.
pub struct Policy {
    configured: bool,
    default: Option<Arc<Agent>>,
    agents: Vec<Arc<Agent>>,
    /// Without `[access]`: the daemon's own uid and root, as operators.
    local_operator: Arc<Agent>,
    daemon_uid: u32,
}

/// One agent entry, compiled: its matchers and a cache of its decisions.
pub struct Agent {
    pub name: Arc<str>,
    pub admin: bool,
    uids: Vec<u32>,
    gids: Vec<u32>,
    units: Vec<WildMatch>,
    tokens: Vec<Vec<u8>>,
    subjects: Vec<WildMatch>,
    allow: Vec<ToolGlob>,
    deny: Vec<ToolGlob>,
    /// `allow = ["*"]` and no `deny`: every decision is yes, without a lookup.
    allows_everything: bool,
    decisions: RwLock<HashMap<Box<str>, bool>>,
    /// Calls of this entry's callers in flight, across both doors and every server.
    in_flight: AtomicUsize,
    /// `concurrency`: past this many in flight, its next call is refused at once, so one
    /// agent's flood queues behind no one but itself.
    pub concurrency: usize,
    /// `rate`, when set.
    pub rate: Option<limits::Gcra>,
    /// `quota`s, counted in the store.
    pub quotas: Vec<CompiledQuota>,
    /// Its `approve` and every server's own: calls that wait for a person's approval.
    approve: Vec<ToolGlob>,
    /// A digest of what decides this entry's calls (its allow, deny and approve lists, the
    /// servers' approve lists, whether it is an operator): an approval binds it, and a reload
    /// that changes it makes the approval stale.
    pub policy_revision: String,
}

/// One quota of an agent entry.
pub struct CompiledQuota {
    tools: Vec<ToolGlob>,
    /// The globs as configured, to show.
    pub patterns: Vec<String>,
    pub calls: u32,
    pub per: std::time::Duration,
    /// What the store counts it under: its definition, so that a changed quota starts afresh.
    pub key: String,
    /// Calls already counted in the store and not yet made, in one window: counted a block at a
    /// time ([`CompiledQuota::block`]) so that most calls write nothing. A crash forfeits what
    /// is left of the block (the agent loses those calls, never gains any).
    lease: tokio::sync::Mutex<Lease>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Lease {
    window: u64,
    left: u32,
}

impl CompiledQuota {
    pub fn applies_to(&self, tool: &ToolName<'_>) -> bool {
        self.tools.iter().any(|glob| glob.matches(tool))
    }

    /// Calls one store write counts ahead: one for a small quota (exact to the call), at most
    /// 1 % of a large one, and never more than 64.
    fn block(&self) -> u32 {
        (self.calls / 100).clamp(1, 64)
    }

    /// Counts one call at `now_ms` against this quota of agent `agent`: from what this daemon
    /// already counted, else by counting a block in the store. `Ok(None)`: the call may go;
    /// `Ok(Some(wait))`: the quota is used up until its window ends, `wait` from now.
    ///
    /// # Errors
    /// The count cannot be written: the quota fails closed.
    pub async fn take(
        &self,
        store: &crate::store::Store,
        agent: &str,
        now_ms: i64,
    ) -> Result<Option<std::time::Duration>, crate::store::StoreError> {
        let (window, ends_at) = self.window(now_ms);
        // Held across the store's write: takers of one quota count ahead one at a time, so
        // that what one counted is never stranded while another is refused.
        let mut lease = self.lease.lock().await;
        if lease.window == window && lease.left > 0 {
            lease.left -= 1;
            return Ok(None);
        }
        let granted = store.quotas().take(agent, &self.key, window, self.calls, self.block()).await?;
        *lease = Lease { window, left: granted.saturating_sub(1) };
        if granted > 0 {
            return Ok(None);
        }
        Ok(Some(std::time::Duration::from_millis(u64::try_from(ends_at.saturating_sub(now_ms)).unwrap_or(0))))
    }

    /// Calls counted for `window` but not yet made.
    pub async fn leased(&self, window: u64) -> u32 {
        let lease = self.lease.lock().await;
        if lease.window == window { lease.left } else { 0 }
    }

    /// The fixed window (aligned to the Unix epoch) that `now_ms` falls in, and when it ends.
    pub fn window(&self, now_ms: i64) -> (u64, i64) {
        let per = i64::try_from(self.per.as_millis()).unwrap_or(i64::MAX).max(1);
        let index = now_ms.max(0) / per;
        (u64::try_from(index).unwrap_or(0), index.saturating_add(1).saturating_mul(per))
    }
}

/// Why an agent entry's call was refused before it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// `concurrency` calls are in flight.
    Concurrency { limit: usize },
    /// The `rate` is used up; a call may start after `retry_after`.
    Rate { calls: u32, per: std::time::Duration, retry_after: std::time::Duration },
}

/// One call counted against its agent entry's in-flight share; dropping it ends the call.
pub struct InFlight {
    agent: Arc<Agent>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.agent.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Who is calling, as far as toolhost can tell, and the agent entry that admits them.
#[derive(Clone)]
pub struct Caller {
    pub identity: Identity,
    pub agent: Arc<Agent>,
}

impl Caller {
    /// Whether the caller's entry is an operator's (`admin = true`), as every action needs.
    ///
    /// # Errors
    /// [`Refusal::NotAdmin`] naming the entry.
    pub fn require_admin(&self) -> Result<(), Refusal> {
        match self.agent.admin {
            true => Ok(()),
            false => Err(Refusal::NotAdmin { agent: self.agent.name.to_string() }),
        }
    }

    /// Who this caller is, as one string: the agent entry and the strongest credential it
    /// presented (a token's hash, else a certificate subject, else the kernel's uid), not the
    /// connection, the process or the door, so an agent that reconnects, over either door, is
    /// the same principal (a token over loopback TCP is the same caller whether or not the
    /// kernel also named its uid). What callers own and share is keyed by it.
    pub fn principal(&self) -> String {
        let identity = &self.identity;
        let proof = match (identity.token(), identity.certificate(), identity.peer()) {
            (Some(token), _, _) => format!("token:{}", crate::catalog::model::sha256_hex(token)),
            (None, Some(subject), _) => format!("cert:{subject}"),
            (None, None, Some(peer)) => format!("uid:{}", peer.uid),
            (None, None, None) => String::new(),
        };
        format!("{}|{proof}|", self.agent.name)
    }
}

/// Why a caller is turned away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not authenticated: over TCP, present a valid bearer token (authorization: Bearer …)")]
    Unauthenticated,
    #[error("{identity} matches no agent entry in [access], and the default is deny")]
    NoMatchingAgent { identity: String },
    #[error("agent {agent:?} is not an operator (admin = true)")]
    NotAdmin { agent: String },
    /// The caller is a process of a server toolhost supervises: servers never call.
    #[error("{identity} is a process of a supervised MCP server, and servers are never callers")]
    ServerProcess { identity: String },
}

// === impl Access ===

impl Access {
    pub fn new(config: &AccessConfig) -> Access {
        Access { policy: ArcSwap::from_pointee(Policy::compile(config)) }
    }

    /// Applies a new `[access]` section to every request from now on.
    pub fn replace(&self, config: &AccessConfig) {
        self.policy.store(Arc::new(Policy::compile(config)));
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// The agent entry that admits `identity`.
    ///
    /// # Errors
    /// [`Refusal::Unauthenticated`] without any identity, [`Refusal::NoMatchingAgent`] when no
    /// entry matches and the default is deny.
    pub fn admit(&self, identity: Identity) -> Result<Caller, Refusal> {
        if identity.peer().is_some_and(|peer| peer.server) {
            return Err(Refusal::ServerProcess { identity: identity.describe() });
        }
        let policy = self.policy.load();
        match policy.agent_for(&identity) {
            Some(agent) => Ok(Caller { identity, agent }),
            // A wrong token, or none over TCP, is a failed authentication.
            None if identity.has_token() || identity.peer().is_none() => Err(Refusal::Unauthenticated),
            None => Err(Refusal::NoMatchingAgent { identity: identity.describe() }),
        }
    }
}

/// An entry that matches no caller by itself and allows every tool.
fn allowing_everything(name: String) -> AgentConfig {
    AgentConfig {
        name,
        uids: Vec::new(),
        gids: Vec::new(),
        units: Vec::new(),
        tokens: Vec::new(),
        subjects: Vec::new(),
        allow: vec!["*".to_owned()],
        deny: Vec::new(),
        admin: false,
        concurrency: crate::config::DEFAULT_CONCURRENCY,
        rate: None,
        quotas: Vec::new(),
        approve: Vec::new(),
    }
}

// === impl Policy ===

impl Policy {
    pub fn compile(config: &AccessConfig) -> Policy {
        let everything = allowing_everything(String::new());
        Policy {
            configured: config.configured,
            default: config.default_allow.then(|| {
                Arc::new(Agent::compile(&AgentConfig { name: "default".to_owned(), ..everything.clone() }, &config.approve_everyone))
            }),
            agents: config.agents.iter().map(|agent| Arc::new(Agent::compile(agent, &config.approve_everyone))).collect(),
            local_operator: Arc::new(Agent::compile(
                &AgentConfig { name: "local-operator".to_owned(), admin: true, ..everything },
                &config.approve_everyone,
            )),
            daemon_uid: nix::unistd::getuid().as_raw(),
        }
    }

    fn agent_for(&self, identity: &Identity) -> Option<Arc<Agent>> {
        if !self.configured {
            let operator = identity.peer().is_some_and(|peer| peer.uid == 0 || peer.uid == self.daemon_uid);
            return operator.then(|| self.local_operator.clone());
        }
        // One rule on every door: a token presented decides (one no entry names admits nobody,
        // whoever the kernel says the caller is); else a certificate an entry names; else the
        // kernel's identity, and the default covers only callers the kernel identified.
        if identity.has_token() {
            return self.agents.iter().find(|agent| agent.matches_token(identity)).cloned();
        }
        if let Some(agent) = self.agents.iter().find(|agent| agent.matches_certificate(identity)) {
            return Some(agent.clone());
        }
        let matched = self.agents.iter().find(|agent| agent.matches_peer(identity)).cloned();
        matched.or_else(|| identity.peer().and(self.default.clone()))
    }

    /// Every agent entry, in the configured order, then the default's (without `[access]`,
    /// the local operators' entry alone).
    pub fn entries(&self) -> Vec<Arc<Agent>> {
        if !self.configured {
            return vec![self.local_operator.clone()];
        }
        self.agents.iter().chain(self.default.as_ref()).cloned().collect()
    }

    /// Whether `[access]` was configured (without it, only local operators get in).
    pub fn is_configured(&self) -> bool {
        self.configured
    }
}

// === impl Agent ===

impl Agent {
    fn compile(config: &AgentConfig, approve_everyone: &[ServerGlob]) -> Agent {
        let globs = |patterns: &[String]| patterns.iter().map(|p| WildMatch::new(p)).collect();
        let tool_globs = |patterns: &[String]| patterns.iter().map(|p| ToolGlob::qualified(p)).collect::<Vec<_>>();
        // Digested as they always were (a server's own glob as `SERVER__GLOB`), so that an
        // upgrade leaves pending approvals as they are.
        let approve: Vec<String> =
            config.approve.iter().cloned().chain(approve_everyone.iter().map(|own| format!("{}__{}", own.server, own.pattern))).collect();
        let decides = serde_json::json!([config.name, config.admin, config.allow, config.deny, approve]);
        let mut approve = tool_globs(&config.approve);
        approve.extend(approve_everyone.iter().map(|own| ToolGlob::of_server(&own.server, &own.pattern)));
        Agent {
            approve,
            policy_revision: crate::catalog::model::sha256_hex(decides.to_string().as_bytes()),
            name: config.name.as_str().into(),
            admin: config.admin,
            uids: config.uids.clone(),
            gids: config.gids.clone(),
            units: globs(&config.units),
            tokens: config.tokens.iter().map(|token| token.expose().as_bytes().to_vec()).collect(),
            subjects: globs(&config.subjects),
            allow: tool_globs(&config.allow),
            deny: tool_globs(&config.deny),
            allows_everything: config.allow.iter().any(|pattern| pattern == "*") && config.deny.is_empty(),
            decisions: RwLock::default(),
            in_flight: AtomicUsize::new(0),
            concurrency: usize::try_from(config.concurrency).unwrap_or(usize::MAX),
            rate: config.rate.map(limits::Gcra::new),
            quotas: config
                .quotas
                .iter()
                .map(|quota| CompiledQuota {
                    tools: tool_globs(&quota.tools),
                    patterns: quota.tools.clone(),
                    calls: quota.calls,
                    per: quota.per,
                    key: format!("{} per {}ms", quota.tools.join(","), quota.per.as_millis()),
                    lease: tokio::sync::Mutex::default(),
                })
                .collect(),
        }
    }

    /// Counts a call against this entry's limits: its `rate` (a refused call uses none of it)
    /// and its `concurrency`. No lock, no allocation: it is on the call path.
    ///
    /// # Errors
    /// [`Limited`]: which limit, and for a rate when to retry.
    pub fn begin_call(self: &Arc<Agent>) -> Result<InFlight, Limited> {
        let taken = self.in_flight.fetch_add(1, Ordering::AcqRel);
        // From here the slot is held: dropping `in_flight` gives it back on every path.
        let in_flight = InFlight { agent: self.clone() };
        if taken >= self.concurrency {
            return Err(Limited::Concurrency { limit: self.concurrency });
        }
        if let Some(rate) = &self.rate {
            rate.take(std::time::Instant::now()).map_err(|retry_after| Limited::Rate {
                calls: rate.limit.calls,
                per: rate.limit.per,
                retry_after,
            })?;
        }
        Ok(in_flight)
    }

    /// Whether a call of `tool` waits for a person's approval before it runs.
    pub fn needs_approval(&self, tool: &ToolName<'_>) -> bool {
        self.approve.iter().any(|glob| glob.matches(tool))
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// An agent entry that allows everything, for tests of what is bound to a caller.
    #[cfg(test)]
    pub fn named_for_tests(name: &str) -> Agent {
        Agent::compile(&allowing_everything(name.to_owned()), &[])
    }

    /// Whether the caller's token is one of this entry's. Every configured token is compared,
    /// in constant time, whatever matches first.
    fn matches_token(&self, identity: &Identity) -> bool {
        let Some(token) = identity.token() else { return false };
        self.tokens.iter().fold(0u8, |found, known| found | known.as_slice().ct_eq(token).unwrap_u8()) == 1
    }

    fn matches_certificate(&self, identity: &Identity) -> bool {
        identity.certificate().is_some_and(|subject| self.subjects.iter().any(|glob| glob.matches(subject)))
    }

    fn matches_peer(&self, identity: &Identity) -> bool {
        let Some(peer) = identity.peer() else { return false };
        self.uids.contains(&peer.uid)
            || peer.gids().any(|gid| self.gids.contains(&gid))
            || peer.unit.as_deref().is_some_and(|unit| self.units.iter().any(|glob| glob.matches(unit)))
    }

    /// Whether this agent may see and call `tool`. Decided once per tool and cached, so the
    /// call path costs a read lock and a hash lookup.
    pub fn may_use(&self, tool: &ToolName<'_>) -> bool {
        if self.allows_everything {
            return true;
        }
        let key = tool.key();
        if let Some(decision) = self.decisions.read().unwrap_or_else(PoisonError::into_inner).get(&*key) {
            return *decision;
        }
        let decision = self.allow.iter().any(|glob| glob.matches(tool)) && !self.deny.iter().any(|glob| glob.matches(tool));
        let mut decisions = self.decisions.write().unwrap_or_else(PoisonError::into_inner);
        if decisions.len() >= DECISIONS_CACHED {
            decisions.clear();
        }
        decisions.insert(key.into(), decision);
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccessConfig;

    fn quota(calls: u32) -> CompiledQuota {
        CompiledQuota {
            tools: vec![ToolGlob::qualified("*")],
            patterns: vec!["*".to_owned()],
            calls,
            per: std::time::Duration::from_secs(86_400),
            key: format!("* {calls}"),
            lease: tokio::sync::Mutex::default(),
        }
    }

    /// Concurrent callers of one daemon get exactly the quota; after a restart (a fresh entry,
    /// the same store) the total never exceeds it, whatever the first daemon counted ahead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_quota_is_exact_under_concurrency_and_never_exceeded_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("quota.db"), 10).await.unwrap();
        let now = 1_700_000_000_000;
        for calls in [1, 7, 250, 2_000] {
            let agent = format!("agent-{calls}");
            let first = Arc::new(quota(calls));
            let attempts = (calls as usize * 2).min(600);
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..attempts {
                let (first, store, agent) = (first.clone(), store.clone(), agent.clone());
                tasks.spawn(async move { first.take(&store, &agent, now).await.unwrap().is_none() });
            }
            let mut passed = 0;
            while let Some(done) = tasks.join_next().await {
                passed += u32::from(done.unwrap());
            }
            assert_eq!(passed, (attempts as u32).min(calls), "quota {calls}: exact within one daemon");
            let restarted = quota(calls);
            let mut after = 0;
            while restarted.take(&store, &agent, now).await.unwrap().is_none() {
                after += 1;
            }
            assert!(passed + after <= calls, "quota {calls}: {passed} + {after} across a restart");
            // What a restart forfeits is at most one block: 1 % of the quota.
            assert!(calls - passed - after <= (calls / 100).max(1), "quota {calls}: forfeited {}", calls - passed - after);
            let wait = restarted.take(&store, &agent, now).await.unwrap().expect("used up");
            assert!(wait <= std::time::Duration::from_secs(86_400));
        }
    }

    #[test]
    fn an_agent_has_at_most_its_share_of_calls_in_flight() {
        let agent = Arc::new(Agent::named_for_tests("busy"));
        let other = Arc::new(Agent::named_for_tests("quiet"));
        let held: Vec<InFlight> = (0..agent.concurrency).map(|_| agent.begin_call().expect("within the share")).collect();
        assert_eq!(agent.begin_call().err(), Some(Limited::Concurrency { limit: 1024 }), "past its share");
        assert_eq!(agent.in_flight(), 1024, "a refused call holds nothing");
        assert!(other.begin_call().is_ok(), "another agent is not affected");
        drop(held);
        assert!(agent.begin_call().is_ok(), "calls that ended give their place back");
        assert_eq!(agent.in_flight(), 0);
    }

    fn agent(name: &str, allow: &[&str], deny: &[&str]) -> AgentConfig {
        AgentConfig {
            name: name.to_owned(),
            uids: vec![1001],
            gids: vec![],
            units: vec!["research-*.service".to_owned()],
            tokens: vec![],
            subjects: vec![],
            allow: allow.iter().map(|s| (*s).to_owned()).collect(),
            deny: deny.iter().map(|s| (*s).to_owned()).collect(),
            admin: false,
            concurrency: crate::config::DEFAULT_CONCURRENCY,
            rate: None,
            quotas: Vec::new(),
            approve: Vec::new(),
        }
    }

    fn config(agents: Vec<AgentConfig>, default_allow: bool) -> AccessConfig {
        AccessConfig {
            configured: true,
            default_allow,
            agents,
            audit_retention: std::time::Duration::from_secs(60),
            audit_max_records: 10,
            approve_everyone: Vec::new(),
        }
    }

    #[test]
    fn deny_wins_and_unmatched_callers_get_the_default() {
        let access = Access::new(&config(vec![agent("research", &["files__read_*", "web__*"], &["*__delete_*"])], false));
        let caller = access.admit(Identity::unix(UnixPeer::new(1001, 1001, 1))).unwrap();
        assert_eq!(&*caller.agent.name, "research");
        assert!(
            caller.agent.may_use(&ToolName::unresolved("files__read_file")) && caller.agent.may_use(&ToolName::unresolved("web__search"))
        );
        assert!(
            !caller.agent.may_use(&ToolName::unresolved("files__write_file"))
                && !caller.agent.may_use(&ToolName::unresolved("web__delete_page"))
        );
        assert!(matches!(access.admit(Identity::unix(UnixPeer::new(2002, 2002, 1))), Err(Refusal::NoMatchingAgent { .. })));
        assert_eq!(access.admit(Identity::tcp(None)).err(), Some(Refusal::Unauthenticated));
        let mut unit_peer = UnixPeer::new(3003, 3003, 1);
        unit_peer.unit = Some("research-bot.service".to_owned());
        assert_eq!(&*access.admit(Identity::unix(unit_peer)).unwrap().agent.name, "research", "matched by systemd unit");
        let open = Access::new(&config(vec![], true));
        assert!(open.admit(Identity::unix(UnixPeer::new(2002, 2002, 1))).unwrap().agent.may_use(&ToolName::unresolved("anything__at_all")));
    }

    #[test]
    fn a_token_presented_decides_before_the_kernels_word() {
        let operator = AgentConfig { admin: true, uids: vec![1001], ..agent("operator", &["*"], &[]) };
        let viewer = AgentConfig {
            uids: vec![],
            units: vec![],
            tokens: vec![crate::secrets::resolve("viewer-token-0123456789").unwrap()],
            ..agent("viewer", &["files__list"], &[])
        };
        // The operator's entry comes first and names the caller's uid: the token still decides.
        let access = Access::new(&config(vec![operator, viewer], false));
        let peer = || Some(UnixPeer::new(1001, 1001, 1));
        let with = |token: &[u8]| Identity::unix_with_token(peer(), Some(token.to_vec()));
        assert_eq!(&*access.admit(with(b"viewer-token-0123456789")).unwrap().agent.name, "viewer");
        assert_eq!(&*access.admit(Identity::unix(peer().unwrap())).unwrap().agent.name, "operator", "no token: the kernel's word");
        // A token no entry names admits nobody, whoever the kernel says the caller is.
        assert_eq!(access.admit(with(b"not-anyones-token-000")).err(), Some(Refusal::Unauthenticated));
        assert_eq!(&*access.admit(Identity::loopback(peer(), Some(b"viewer-token-0123456789".to_vec()))).unwrap().agent.name, "viewer");
    }

    #[test]
    fn without_an_access_section_only_local_operators_get_in() {
        let access = Access::new(&AccessConfig { configured: false, ..config(vec![], true) });
        let root = access.admit(Identity::unix(UnixPeer::new(0, 0, 1))).unwrap();
        assert!(root.agent.admin && root.agent.may_use(&ToolName::unresolved("x__y")));
        assert!(access.admit(Identity::unix(UnixPeer::new(4242, 4242, 1))).is_err());
        assert!(access.admit(Identity::tcp(Some(b"whatever-token-value".to_vec()))).is_err());
    }
}
