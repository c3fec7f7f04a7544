//! The approval RPCs: operators list the calls waiting for a person's approval, read one (its
//! arguments and the definition it binds) and decide.

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::door::error::DoorError;
use crate::door::model::{ApprovalRecord, ApprovalStatus};

impl ToolHostService {
    pub(crate) async fn list_approvals_in(&self, request: Request<pb::ListApprovalsRequest>) -> Result<pb::ListApprovalsResponse, Status> {
        let operator = self.admit(&request)?;
        let wanted = request.into_inner().status;
        let status = match wanted.as_str() {
            "" => None,
            text => Some(ApprovalStatus::named(text).ok_or_else(|| {
                Status::from(DoorError::invalid(format!("{text:?} is not one of pending, approved, denied, expired, used, stale")))
            })?),
        };
        let records = self.door.list_approvals(&operator, status).await?;
        Ok(pb::ListApprovalsResponse { approvals: records.iter().map(|record| self.approval_message(record, false)).collect() })
    }

    pub(crate) async fn get_approval_in(&self, request: Request<pb::ApprovalRequest>) -> Result<pb::CallApproval, Status> {
        let operator = self.admit(&request)?;
        let record = self.door.approval(&operator, &request.into_inner().approval_id).await?;
        Ok(self.approval_message(&record, true))
    }

    pub(crate) async fn decide_approval_in(&self, request: Request<pb::DecideApprovalRequest>) -> Result<pb::CallApproval, Status> {
        let operator = self.admit_admin(&request)?;
        let request = request.into_inner();
        let reason = Some(request.reason.as_str()).filter(|reason| !reason.trim().is_empty());
        let record = self.door.decide_approval(&operator, &request.approval_id, request.approve, reason).await?;
        Ok(self.approval_message(&record, true))
    }

    /// A request as the API tells it; with the bound definition when `definition` and it is
    /// still the tool's current one.
    fn approval_message(&self, record: &ApprovalRecord, definition: bool) -> pb::CallApproval {
        let definition_json = match definition {
            true => self.door.bound_definition(record).map(|tool| tool.definition.to_string()).unwrap_or_default(),
            false => String::new(),
        };
        pb::CallApproval {
            approval_id: record.id.clone(),
            agent: record.agent.clone(),
            caller: record.caller.clone(),
            qualified_name: record.qualified_name.clone(),
            definition_hash: record.definition_hash.clone(),
            arguments_json: record.arguments.clone(),
            arguments_sha256: record.arguments_digest.clone(),
            policy_revision: record.policy_revision.clone(),
            status: record.status.as_str().to_owned(),
            requested_at_unix_ms: record.requested_at_ms,
            expires_at_unix_ms: record.expires_at_ms,
            decided_by: record.decided_by.clone().unwrap_or_default(),
            decided_at_unix_ms: record.decided_at_ms.unwrap_or(0),
            reason: record.reason.clone().unwrap_or_default(),
            definition_json,
        }
    }
}
