//! The API's side of the access policy: admitting callers, hiding what they may not use (in the
//! same terms as something that does not exist), the audit of every call, and `WhoAmI` and
//! `QueryAudit`.

use tonic::{Request, Status};

use crate::access::{Caller, Identity, Refusal};
use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::api::status::ApiError;
use crate::audit::AuditRecord;
use crate::door::{Presentation, held_now, server_visible, shows_name, shows_tool};
use crate::registry::{CatalogChange, CatalogEvent, CatalogSnapshot};

impl ToolHostService {
    /// The caller of `request`, or the status that turns it away.
    pub(crate) fn admit<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        self.door.admit(Identity::of_request(request)).map_err(Status::from)
    }

    /// The caller, if it is an operator.
    pub(crate) fn admit_admin<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let caller = self.admit(request)?;
        if caller.agent.admin { Ok(caller) } else { Err(Refusal::NotAdmin { agent: caller.agent.name.to_string() }.into()) }
    }

    pub(crate) async fn who_am_i_in(&self, request: &Request<pb::WhoAmIRequest>) -> Result<pb::WhoAmIResponse, Status> {
        let caller = self.admit(request)?;
        let snapshot = self.registry.snapshot();
        let (mut visible_tools, mut callable_tools, mut visible_servers) = (0u32, 0u32, 0u32);
        for view in snapshot.servers.values() {
            let Some(generation) = &view.generation else { continue };
            let count = |presentation| {
                let shown = (0..generation.tools.len()).filter(|idx| shows_tool(&caller, view, *idx, presentation)).count();
                u32::try_from(shown).unwrap_or(u32::MAX)
            };
            let visible = count(Presentation::WithState);
            visible_servers += u32::from(visible > 0);
            visible_tools = visible_tools.saturating_add(visible);
            if view.is_available() {
                callable_tools = callable_tools.saturating_add(count(Presentation::Callable));
            }
        }
        let mut limits = agent_limits(&caller.agent);
        let now = crate::catalog::record::now_ms();
        for quota in &caller.agent.quotas {
            let (window, ends_at) = quota.window(now);
            // Counted in the store, less what this daemon counted ahead and has not used.
            let counted = self.store.quota_used(&caller.agent.name, &quota.key, window).await.map_err(ApiError::from)?;
            let used = counted.saturating_sub(quota.leased(window).await);
            limits.quotas.push(pb::QuotaStatus {
                tools: quota.patterns.clone(),
                calls: quota.calls,
                per_ms: u64::try_from(quota.per.as_millis()).unwrap_or(u64::MAX),
                used,
                resets_at_unix_ms: ends_at,
            });
        }
        let peer = caller.identity.peer();
        Ok(pb::WhoAmIResponse {
            transport: caller.identity.transport.to_owned(),
            uid: peer.map_or(0, |p| p.uid),
            gid: peer.map_or(0, |p| p.gid),
            pid: peer.and_then(|p| p.pid).unwrap_or(0),
            groups: peer.map(|p| p.groups.clone()).unwrap_or_default(),
            unit: peer.and_then(|p| p.unit.clone()).unwrap_or_default(),
            token_presented: caller.identity.has_token(),
            certificate_subject: caller.identity.certificate().unwrap_or_default().to_owned(),
            agent: caller.agent.name.to_string(),
            admin: caller.agent.admin,
            visible_tools,
            callable_tools,
            visible_servers,
            limits: Some(limits),
        })
    }

    pub(crate) async fn query_audit_in(&self, request: Request<pb::QueryAuditRequest>) -> Result<pb::QueryAuditResponse, Status> {
        self.admit_admin(&request)?;
        let request = request.into_inner();
        let limit = if request.limit == 0 { 100 } else { request.limit.min(10_000) };
        let agent = Some(request.agent.as_str()).filter(|agent| !agent.is_empty());
        if request.fleet {
            let pool = self.fleet()?.pool()?;
            let records = crate::fleet::query::audit(&pool, request.since_unix_ms, agent, limit).await?;
            let records =
                records.into_iter().map(|found| pb::AuditRecord { host_id: found.host_id, ..audit_message(found.record) }).collect();
            return Ok(pb::QueryAuditResponse { records });
        }
        let records = self.store.query_audit(request.since_unix_ms, agent, limit).await.map_err(ApiError::from)?;
        Ok(pb::QueryAuditResponse { records: records.into_iter().map(audit_message).collect() })
    }
}

/// `event` as this caller may see it ([`shows_name`]): tool names it may not use or may not see
/// (held) removed, and nothing at all about servers it may not know of. To an agent, a tool
/// that changed and is held now has gone: it is reported removed. An agent learns that a tool
/// became held only when it could have seen an approved version of it before.
pub(crate) fn visible_event(caller: &Caller, snapshot: &CatalogSnapshot, event: CatalogEvent) -> Option<CatalogEvent> {
    let visible_server = |server: &str| snapshot.servers.get(server).is_some_and(|view| server_visible(caller, view));
    let shows = |name: &String| shows_name(caller, snapshot, name, Presentation::WithState);
    let may_use = |name: &String| caller.agent.may_use(name);
    let change = match event.change {
        CatalogChange::GenerationPublished { server, generation, previous, added, mut removed, changed } => {
            let added: Vec<String> = added.into_iter().filter(shows).collect();
            let (changed, hidden): (Vec<String>, Vec<String>) = changed.into_iter().filter(may_use).partition(shows);
            removed.retain(may_use);
            removed.extend(hidden);
            if !caller.agent.admin && added.is_empty() && removed.is_empty() && changed.is_empty() {
                return None;
            }
            CatalogChange::GenerationPublished { server, generation, previous, added, removed, changed }
        }
        CatalogChange::IntegrityChanged { server, held, released } => {
            let held: Vec<String> =
                held.into_iter().filter(|name| may_use(name) && (caller.agent.admin || was_approved(snapshot, name))).collect();
            let released: Vec<String> = released.into_iter().filter(shows).collect();
            if held.is_empty() && released.is_empty() {
                return None;
            }
            CatalogChange::IntegrityChanged { server, held, released }
        }
        CatalogChange::StateChanged { ref server, .. } | CatalogChange::ConfigChanged { ref server, .. } if !visible_server(server) => {
            return None;
        }
        other => other,
    };
    Some(CatalogEvent { revision: event.revision, change })
}

/// Whether the held tool `qualified` had an approved (or pinned) definition an agent may have
/// seen: held because it changed, not because it is new.
fn was_approved(snapshot: &CatalogSnapshot, qualified: &str) -> bool {
    use crate::catalog::integrity::Hold;
    held_now(snapshot, qualified).is_some_and(|hold| matches!(hold, Hold::Changed | Hold::PinMismatch))
}

fn audit_message(record: AuditRecord) -> pb::AuditRecord {
    pb::AuditRecord {
        at_unix_ms: record.at_ms,
        agent: record.agent.to_string(),
        caller: record.caller,
        transport: record.transport.to_owned(),
        qualified_name: record.qualified_name,
        server: record.server,
        tool: record.tool,
        generation: record.generation,
        definition_hash: record.definition_hash,
        outcome: record.outcome,
        duration_us: record.duration_us,
        arguments: record.arguments.unwrap_or_default(),
        host_id: String::new(),
    }
}

/// An agent entry's limits as `WhoAmI` tells them.
fn agent_limits(agent: &crate::access::Agent) -> pb::AgentLimits {
    let rate = agent.rate.as_ref();
    pb::AgentLimits {
        concurrency: u32::try_from(agent.concurrency).unwrap_or(u32::MAX),
        in_flight: u32::try_from(agent.in_flight()).unwrap_or(u32::MAX),
        rate_calls: rate.map_or(0, |rate| rate.limit.calls),
        rate_per_ms: rate.map_or(0, |rate| u64::try_from(rate.limit.per.as_millis()).unwrap_or(u64::MAX)),
        rate_burst: rate.map_or(0, |rate| rate.limit.burst),
        rate_available: rate.map_or(0, |rate| rate.available(std::time::Instant::now())),
        quotas: Vec::new(),
    }
}
