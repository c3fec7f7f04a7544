//! The API's side of definition integrity: approving what a server offers and showing what
//! changed. Operators only; the work is the operator side of the door's.

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::door::operator::Via;

impl ToolHostService {
    pub(crate) async fn approve_tools_in(&self, request: Request<pb::ApproveToolsRequest>) -> Result<pb::ApproveToolsResponse, Status> {
        let operator = self.admit(&request)?;
        let request = request.into_inner();
        let approved =
            self.operator.approve(&operator, Via::Grpc, &request.server, &request.tools, request.all, Some(&request.hash)).await?;
        Ok(pb::ApproveToolsResponse { approved: approved.into_iter().map(|(name, hash)| pb::ApprovedTool { name, hash }).collect() })
    }

    pub(crate) async fn diff_tool_in(&self, request: Request<pb::DiffToolRequest>) -> Result<pb::DiffToolResponse, Status> {
        let operator = self.admit(&request)?;
        let request = request.into_inner();
        let diff = self.operator.diff(&operator, &request.server, &request.name).await?;
        let held = diff.integrity.as_ref().and_then(|state| state.held);
        let (approved_definition_json, approved_hash, approved_by, approved_unix_ms) = match diff.approved {
            Some((approval, definition)) => (definition, approval.hash, approval.approved_by, approval.approved_at_ms),
            None => Default::default(),
        };
        Ok(pb::DiffToolResponse {
            offered_definition_json: diff.offered.definition.to_string(),
            offered_hash: diff.offered.hash,
            approved_definition_json,
            approved_hash,
            approved_by,
            approved_unix_ms,
            changes: diff.changes,
            state: if held.is_some() { "held" } else { "ok" }.to_owned(),
            hold_reason: held.map(|hold| hold.as_str().to_owned()).unwrap_or_default(),
            flags: diff.integrity.map(|state| state.flags.names().into_iter().map(str::to_owned).collect()).unwrap_or_default(),
        })
    }
}
