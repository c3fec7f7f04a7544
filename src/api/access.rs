//! The API's side of the access policy: admitting callers, hiding what they may not use (in the
//! same terms as something that does not exist), the audit of every call, and `WhoAmI` and
//! `QueryAudit`.

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::door::Presentation;
use crate::door::model::{AuditRecord, Caller, Identity, Span, Verdict};

impl ToolHostService {
    /// The caller of `request`, or the status that turns it away.
    pub(crate) fn admit<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        self.door.admit(Identity::of_request(request)).map_err(Status::from)
    }

    /// The caller, if it is an operator.
    pub(crate) fn admit_admin<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let caller = self.admit(request)?;
        caller.require_admin()?;
        Ok(caller)
    }

    pub(crate) async fn who_am_i_in(&self, request: &Request<pb::WhoAmIRequest>) -> Result<pb::WhoAmIResponse, Status> {
        let caller = self.admit(request)?;
        let snapshot = self.door.snapshot();
        let (mut visible_tools, mut callable_tools, mut visible_servers) = (0u32, 0u32, 0u32);
        for view in snapshot.servers() {
            let count = |presentation| {
                let shown = view.tools().filter(|tool| tool.shown_to(&caller, presentation)).count();
                u32::try_from(shown).unwrap_or(u32::MAX)
            };
            let visible = count(Presentation::WithState);
            visible_servers += u32::from(visible > 0);
            visible_tools = visible_tools.saturating_add(visible);
            if view.available() {
                callable_tools = callable_tools.saturating_add(count(Presentation::Callable));
            }
        }
        let limits = agent_limits(&self.door.own_limits(&caller).await?);
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
        let operator = self.admit(&request)?;
        let request = request.into_inner();
        let limit = if request.limit == 0 { 100 } else { request.limit.min(10_000) };
        let found = self.operator.audit(&operator, request.since_unix_ms, Some(&request.agent), limit, request.fleet).await?;
        let records =
            found.into_iter().map(|found| pb::AuditRecord { host_id: found.host_id.unwrap_or_default(), ..audit_message(found.record) });
        Ok(pb::QueryAuditResponse { records: records.collect() })
    }

    pub(crate) async fn verify_audit_in(&self, request: Request<pb::VerifyAuditRequest>) -> Result<pb::VerifyAuditResponse, Status> {
        let operator = self.admit(&request)?;
        let request = request.into_inner();
        let span = Span {
            from_ms: (request.from_unix_ms > 0).then_some(request.from_unix_ms),
            to_ms: (request.to_unix_ms > 0).then_some(request.to_unix_ms),
        };
        let (verdict, fleet_checkpoints) = self.operator.verify_audit(&operator, span).await?;
        Ok(match verdict {
            Verdict::Intact { records, checkpoints, last_signed_at_ms, before_chain } => pb::VerifyAuditResponse {
                intact: true,
                records,
                checkpoints,
                last_signed_unix_ms: last_signed_at_ms.unwrap_or(0),
                before_chain,
                fleet_checkpoints,
                ..pb::VerifyAuditResponse::default()
            },
            Verdict::Broken { record_id, problem } => pb::VerifyAuditResponse {
                problem,
                record_id: record_id.unwrap_or(0),
                fleet_checkpoints,
                ..pb::VerifyAuditResponse::default()
            },
        })
    }
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
fn agent_limits(limits: &crate::door::limits::AgentLimits) -> pb::AgentLimits {
    let millis = |duration: std::time::Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let rate = limits.rate.as_ref();
    pb::AgentLimits {
        concurrency: u32::try_from(limits.concurrency).unwrap_or(u32::MAX),
        in_flight: u32::try_from(limits.in_flight).unwrap_or(u32::MAX),
        rate_calls: rate.map_or(0, |rate| rate.calls),
        rate_per_ms: rate.map_or(0, |rate| millis(rate.per)),
        rate_burst: rate.map_or(0, |rate| rate.burst),
        rate_available: rate.map_or(0, |rate| rate.available),
        quotas: limits
            .quotas
            .iter()
            .map(|quota| pb::QuotaStatus {
                tools: quota.tools.clone(),
                calls: quota.calls,
                per_ms: millis(quota.per),
                used: quota.used,
                resets_at_unix_ms: quota.renews_at_ms,
            })
            .collect(),
    }
}
