//! The `toolhost.v1.ToolHost` service: decode, ask the door (its agent side or its operator side),
//! encode. No catalog logic lives here.

use std::sync::Arc;
use std::time::Duration;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::api::{convert, pb, watch};
use crate::door::changes::Changes;
use crate::door::error::DoorError;
use crate::door::model::{Answer, CallError, CallRequest, Caller, ContinuationError, ServerAction, ToolRef};
use crate::door::observe::{DoorSpan, Front, Wire};
use crate::door::operator::Operator;
use crate::door::paging::{self, Binding, Position, TokenError};
use crate::door::view::{Catalog, Server, Tool};
use crate::door::{Door, Presentation};
use crate::mcp::lifecycle::METHOD_TOOLS_CALL;
use serde_json::value::RawValue;
use tracing::Instrument;

const DEFAULT_PAGE_SIZE: u32 = 500;
const MAX_PAGE_SIZE: u32 = 5000;
/// Definition approvals a server's history shows.
const APPROVALS_SHOWN: u32 = 50;
/// A call's upstream timeout ends this much before the caller's deadline, so that the caller
/// gets toolhost's DEADLINE_EXCEEDED (with details) rather than a bare transport cancellation.
const DEADLINE_MARGIN: Duration = Duration::from_millis(20);

/// Everything the handlers need. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ToolHostService {
    pub(crate) door: Door,
    pub(crate) operator: Operator,
    pub(crate) watchers: watch::Watchers,
}

#[tonic::async_trait]
impl pb::tool_host_server::ToolHost for ToolHostService {
    async fn list_servers(&self, request: Request<pb::ListServersRequest>) -> Result<Response<pb::ListServersResponse>, Status> {
        let caller = self.admit(&request)?;
        let snapshot = self.door.snapshot();
        let servers = match request.get_ref().name.as_str() {
            "" => snapshot.visible_servers(&caller).map(convert::server).collect(),
            name => {
                // A server the caller may not see answers as one that does not exist.
                let view = snapshot.visible_server(&caller, name);
                let view = view.ok_or_else(|| Status::from(DoorError::unknown_server(name)))?;
                vec![convert::server_with_history(view)]
            }
        };
        let degraded = self.door.degraded();
        let store = pb::StoreStatus {
            degraded: degraded.is_some(),
            reason: degraded.filter(|_| caller.agent.admin).map(|why| why.to_string()).unwrap_or_default(),
        };
        Ok(Response::new(pb::ListServersResponse { servers, catalog_revision: snapshot.revision(), store: Some(store) }))
    }

    async fn list_tools(&self, request: Request<pb::ListToolsRequest>) -> Result<Response<pb::ListToolsResponse>, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let page_size = match request.page_size {
            0 => DEFAULT_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        };
        // Page tokens are bound to the agent and its filters: useless to another agent, or to
        // the same one asking for something else.
        let binding = page_binding(&request, page_size, &caller.agent.name);
        let (snapshot, start) = match request.page_token.as_str() {
            "" => {
                let snapshot = self.door.snapshot();
                let start = Position::start(&snapshot);
                (snapshot, start)
            }
            token => {
                let position = binding.resume(token).map_err(|error| match error {
                    TokenError::Malformed => DoorError::invalid("malformed page_token"),
                    TokenError::OtherCaller => DoorError::invalid("page_token was issued for different filters"),
                })?;
                (self.door.snapshot_at(position.revision).ok_or(DoorError::page_expired(position.revision))?, position)
            }
        };
        for server in &request.servers {
            if snapshot.visible_server(&caller, server).is_none() {
                return Err(DoorError::unknown_server(server).into());
            }
        }
        let (tools, next) = collect_page(&snapshot, &request, start, page_size, &caller);
        let next_page_token = next.map(|position| binding.token(position)).unwrap_or_default();
        Ok(Response::new(pb::ListToolsResponse { tools, catalog_revision: snapshot.revision(), next_page_token }))
    }

    async fn get_tool(&self, request: Request<pb::GetToolRequest>) -> Result<Response<pb::GetToolResponse>, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let tool = ToolRef::from_parts(&request.qualified_name, &request.server, &request.name)
            .ok_or_else(|| DoorError::invalid("name the tool by qualified_name, or by server and name"))?;
        let snapshot = self.door.snapshot();
        let shown = self.door.tool_at(&caller, &snapshot, &tool, request.generation).await?;
        Ok(Response::new(pb::GetToolResponse { tool: Some(convert::tool(&shown, true)), catalog_revision: snapshot.revision() }))
    }

    async fn history(&self, request: Request<pb::HistoryRequest>) -> Result<Response<pb::HistoryResponse>, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let limit = if request.limit == 0 { 20 } else { request.limit.min(1000) };
        let history = self.door.server_history(&caller, &request.server, limit, 20, APPROVALS_SHOWN).await?;
        let history = history.ok_or_else(|| DoorError::unknown_server(&request.server))?;
        Ok(Response::new(pb::HistoryResponse {
            generations: history.generations.into_iter().map(convert::generation_change).collect(),
            enumerations: history.enumerations.iter().map(convert::enumeration).collect(),
            approvals: history.approvals.into_iter().map(convert::approval).collect(),
        }))
    }

    type WatchCatalogStream = ReceiverStream<Result<pb::CatalogEvent, Status>>;

    async fn watch_catalog(&self, request: Request<pb::WatchCatalogRequest>) -> Result<Response<Self::WatchCatalogStream>, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        for server in &request.servers {
            if self.door.snapshot().visible_server(&caller, server).is_none() {
                return Err(DoorError::unknown_server(server).into());
            }
        }
        let principal = caller.principal();
        let changes = Changes::new(&self.door, caller.identity, request.from_revision, request.servers);
        let stream = self.watchers.watch(changes, principal)?;
        Ok(Response::new(stream))
    }

    async fn call_tool(&self, request: Request<pb::CallToolRequest>) -> Result<Response<pb::CallToolResponse>, Status> {
        // Caller input in a span name and attribute: bounded like any echoed input.
        let target = match request.get_ref() {
            r if !r.qualified_name.is_empty() => r.qualified_name.clone(),
            r => format!("{}/{}", r.server, r.name),
        };
        let target = super::status::truncate(target, MAX_ECHOED_NAME_BYTES);
        // The call's server span (the MCP conventions: toolhost answers a tools/call, here over
        // gRPC), continuing the agent's trace if it sent one.
        let wire = match request.remote_addr() {
            Some(addr) => Wire::http(Some(Arc::from(addr.ip().to_string())), Some(addr.port())),
            None => Wire::unix(Some("http")),
        };
        let mut operation = DoorSpan::start(&self.door, Front::Grpc, METHOD_TOOLS_CALL, Some(&target), &wire);
        let metadata = |key: &str| request.metadata().get(key).and_then(|value| value.to_str().ok());
        if let Some(parent) = metadata("traceparent") {
            operation.continue_trace(parent, metadata("tracestate"));
        }
        operation.note("rpc.system", "grpc".to_owned());
        operation.note("rpc.method", "toolhost.v1.ToolHost/CallTool".to_owned());
        let span = operation.span().clone();
        let answered = async {
            let caller = self.admit(&request)?;
            operation.caller(&caller);
            self.call_tool_in(request, caller, &mut operation).await
        }
        .instrument(span)
        .await;
        // A request refused before its call (admission, a malformed request) is judged by its
        // code here; a call's own outcome was judged by the door.
        let code = answered.as_ref().map_or_else(tonic::Status::code, |_| tonic::Code::Ok);
        let fault = answered.as_ref().err().filter(|status| super::status::is_fault(status.code())).map(|status| status.message());
        operation.answered(super::status::code_name(code), fault);
        answered
    }

    async fn refresh_server(&self, request: Request<pb::RefreshServerRequest>) -> Result<Response<pb::RefreshServerResponse>, Status> {
        let operator = self.admit(&request)?;
        self.operator.operate(&operator, &request.into_inner().server, ServerAction::Refresh)?;
        Ok(Response::new(pb::RefreshServerResponse {}))
    }

    async fn restart_server(&self, request: Request<pb::RestartServerRequest>) -> Result<Response<pb::RestartServerResponse>, Status> {
        let operator = self.admit(&request)?;
        self.operator.operate(&operator, &request.into_inner().server, ServerAction::Restart)?;
        Ok(Response::new(pb::RestartServerResponse {}))
    }

    async fn reload(&self, request: Request<pb::ReloadRequest>) -> Result<Response<pb::ReloadResponse>, Status> {
        let operator = self.admit(&request)?;
        let report = self.operator.reload(&operator).await?;
        let not_applied =
            report.not_applied.into_iter().map(|skipped| pb::NotApplied { setting: skipped.setting, why: skipped.why }).collect();
        Ok(Response::new(pb::ReloadResponse {
            servers_added: report.servers.added,
            servers_removed: report.servers.removed,
            servers_changed: report.servers.changed,
            servers_unchanged: u32::try_from(report.servers.unchanged.len()).unwrap_or(u32::MAX),
            applied: report.applied,
            not_applied,
        }))
    }

    async fn who_am_i(&self, request: Request<pb::WhoAmIRequest>) -> Result<Response<pb::WhoAmIResponse>, Status> {
        self.who_am_i_in(&request).await.map(Response::new)
    }

    async fn query_audit(&self, request: Request<pb::QueryAuditRequest>) -> Result<Response<pb::QueryAuditResponse>, Status> {
        self.query_audit_in(request).await.map(Response::new)
    }

    async fn verify_audit(&self, request: Request<pb::VerifyAuditRequest>) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        self.verify_audit_in(request).await.map(Response::new)
    }

    async fn search_tools(&self, request: Request<pb::SearchToolsRequest>) -> Result<Response<pb::SearchToolsResponse>, Status> {
        self.search_tools_in(request).await.map(Response::new)
    }

    async fn approve_tools(&self, request: Request<pb::ApproveToolsRequest>) -> Result<Response<pb::ApproveToolsResponse>, Status> {
        self.approve_tools_in(request).await.map(Response::new)
    }

    async fn diff_tool(&self, request: Request<pb::DiffToolRequest>) -> Result<Response<pb::DiffToolResponse>, Status> {
        self.diff_tool_in(request).await.map(Response::new)
    }

    async fn fleet_status(&self, request: Request<pb::FleetStatusRequest>) -> Result<Response<pb::FleetStatusResponse>, Status> {
        self.fleet_status_in(request).await.map(Response::new)
    }

    async fn begin_login(&self, request: Request<pb::BeginLoginRequest>) -> Result<Response<pb::BeginLoginResponse>, Status> {
        self.begin_login_in(request).await.map(Response::new)
    }

    async fn complete_login(&self, request: Request<pb::CompleteLoginRequest>) -> Result<Response<pb::CompleteLoginResponse>, Status> {
        self.complete_login_in(request).await.map(Response::new)
    }

    async fn logout(&self, request: Request<pb::LogoutRequest>) -> Result<Response<pb::LogoutResponse>, Status> {
        self.logout_in(request).await.map(Response::new)
    }

    async fn start_task(&self, request: Request<pb::StartTaskRequest>) -> Result<Response<pb::Task>, Status> {
        self.start_task_in(request).await.map(Response::new)
    }

    async fn get_task(&self, request: Request<pb::TaskRequest>) -> Result<Response<pb::Task>, Status> {
        self.get_task_in(request).await.map(Response::new)
    }

    async fn get_task_result(&self, request: Request<pb::TaskRequest>) -> Result<Response<pb::TaskResult>, Status> {
        self.get_task_result_in(request).await.map(Response::new)
    }

    type WatchTaskStream = ReceiverStream<Result<pb::Task, Status>>;

    async fn watch_task(&self, request: Request<pb::TaskRequest>) -> Result<Response<Self::WatchTaskStream>, Status> {
        self.watch_task_in(request).await.map(Response::new)
    }

    async fn cancel_task(&self, request: Request<pb::TaskRequest>) -> Result<Response<pb::Task>, Status> {
        self.cancel_task_in(request).await.map(Response::new)
    }

    async fn list_tasks(&self, request: Request<pb::ListTasksRequest>) -> Result<Response<pb::ListTasksResponse>, Status> {
        self.list_tasks_in(request).await.map(Response::new)
    }

    async fn list_approvals(&self, request: Request<pb::ListApprovalsRequest>) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        self.list_approvals_in(request).await.map(Response::new)
    }

    async fn get_approval(&self, request: Request<pb::ApprovalRequest>) -> Result<Response<pb::CallApproval>, Status> {
        self.get_approval_in(request).await.map(Response::new)
    }

    async fn decide_approval(&self, request: Request<pb::DecideApprovalRequest>) -> Result<Response<pb::CallApproval>, Status> {
        self.decide_approval_in(request).await.map(Response::new)
    }
}

impl ToolHostService {
    async fn call_tool_in(
        &self,
        request: Request<pb::CallToolRequest>,
        caller: Caller,
        operation: &mut DoorSpan,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let timeout = grpc_deadline(request.metadata()).map(|deadline| deadline.saturating_sub(DEADLINE_MARGIN.min(deadline / 10)));
        let request = request.into_inner();
        let Some(tool) = ToolRef::from_parts(&request.qualified_name, &request.server, &request.name) else {
            return Err(DoorError::invalid("name the tool by qualified_name, or by server and name").into());
        };
        let answer = match (request.continuation_token.as_str(), request.input_responses_json.as_str()) {
            ("", "") => None,
            (token, responses) if !token.is_empty() && !responses.is_empty() => Some(Answer { token, responses }),
            _ => return Err(CallError::from(ContinuationError::Incomplete).into()),
        };
        let capabilities = match request.client_capabilities_json.trim() {
            "" => None,
            text => Some(
                serde_json::from_str::<&RawValue>(text)
                    .ok()
                    .filter(|raw| raw.get().starts_with('{'))
                    .ok_or_else(|| DoorError::invalid("client_capabilities_json is not a JSON object"))?,
            ),
        };
        let call = CallRequest {
            tool,
            queue_as: caller.agent.name.clone(),
            // Empty fields are "not given": the door normalises every door's request alike.
            arguments: Some(request.arguments_json.as_str()),
            expected_hash: Some(request.expected_definition_hash.as_str()),
            expected_revision: Some(request.expected_catalog_revision),
            timeout,
            progress: None,
            answer,
            client_capabilities: capabilities,
            upstream_task: None,
        };
        let result = self.door.call(&caller, call).await;
        operation.call_ended(&result);
        let result = result?;
        let input_required = match (result.outcome.input_required, result.continuation) {
            (Some(input), Some((token, expires_at_unix_ms))) => Some(pb::InputRequired {
                input_requests_json: input.requests.get().to_owned(),
                continuation_token: token,
                expires_at_unix_ms,
            }),
            _ => None,
        };
        Ok(Response::new(pb::CallToolResponse {
            input_required,
            content_json: result.outcome.content.get().to_owned(),
            structured_content_json: result.outcome.structured_content.map(|s| s.get().to_owned()).unwrap_or_default(),
            is_error: result.outcome.is_error,
            server: result.server.to_string(),
            name: result.name,
            generation: result.generation,
            definition_hash: result.definition_hash,
        }))
    }
}

/// One page of `snapshot` from `start` as the caller may see it, and where the next one starts.
fn collect_page(
    snapshot: &Catalog,
    request: &pb::ListToolsRequest,
    start: Position,
    page_size: u32,
    caller: &Caller,
) -> (Vec<pb::Tool>, Option<Position>) {
    let mut tools = Vec::new();
    let servers = |view: Server<'_>| {
        (request.servers.is_empty() || request.servers.iter().any(|s| **s == *view.name())) && (!request.available_only || view.available())
    };
    let include = |tool: Tool<'_>| {
        tool.shown_to(caller, Presentation::WithState)
            && (request.name_contains.is_empty()
                || contains_ignore_case(tool.qualified(), &request.name_contains)
                || contains_ignore_case(tool.name(), &request.name_contains))
    };
    let emit = |tool: Tool<'_>| tools.push(convert::tool(&tool.shown(), request.with_definitions));
    let next = paging::walk(snapshot, start, page_size as usize, servers, include, emit);
    (tools, next)
}

fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    let (haystack, needle) = (haystack.as_bytes(), needle.as_bytes());
    needle.len() <= haystack.len() && haystack.windows(needle.len()).any(|window| window.eq_ignore_ascii_case(needle))
}

/// What a ListTools page token is bound to: the filters, the page size and the agent.
fn page_binding(request: &pb::ListToolsRequest, page_size: u32, agent: &str) -> Binding {
    let servers = format!("{:?}", request.servers);
    Binding::of(&[agent, &servers, &request.name_contains, &request.available_only.to_string(), &page_size.to_string()])
}

/// The caller's deadline from the `grpc-timeout` header (`{digits}{H|M|S|m|u|n}`, at most eight
/// digits as the gRPC spec says), no longer than [`MAX_CALLER_DEADLINE`]. A malformed header
/// counts as none.
pub(crate) fn grpc_deadline(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(grpc_unit(amount, unit)?.min(MAX_CALLER_DEADLINE))
}

/// Caller-supplied names put into traces are cut to this length.
const MAX_ECHOED_NAME_BYTES: usize = 256;

/// The longest deadline a caller can ask for; a day is longer than any tool call toolhost routes.
const MAX_CALLER_DEADLINE: Duration = Duration::from_secs(24 * 3600);

fn grpc_unit(amount: u64, unit: &str) -> Option<Duration> {
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        for (header, expected) in [
            ("250m", Duration::from_millis(250)),
            ("3S", Duration::from_secs(3)),
            ("2M", Duration::from_secs(120)),
            ("5u", Duration::from_micros(5)),
        ] {
            metadata.insert("grpc-timeout", header.parse().unwrap());
            assert_eq!(grpc_deadline(&metadata), Some(expected));
        }
        for bad in ["soon", "S", "123456789S", "-5S", "+5S"] {
            metadata.insert("grpc-timeout", bad.parse().unwrap());
            assert_eq!(grpc_deadline(&metadata), None, "{bad}");
        }
        metadata.insert("grpc-timeout", "99999999H".parse().unwrap());
        assert_eq!(grpc_deadline(&metadata), Some(MAX_CALLER_DEADLINE), "capped, never overflowing a clock");
    }

    #[test]
    fn name_filters_ignore_ascii_case() {
        assert!(contains_ignore_case("files__Read_File", "read_f"));
        assert!(!contains_ignore_case("ab", "abc"));
    }
}
