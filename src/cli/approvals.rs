//! `toolhost approvals`: the calls waiting for a person's approval; `approvals show ID` (the
//! arguments and the definition it binds), `approvals approve ID`, `approvals deny ID --reason`.

use serde_json::{Value, json};

use super::output::{Printer, rfc3339};
use super::{Client, ClientError};
use crate::api::pb;

/// What `toolhost approvals` does besides listing.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ApprovalsAction {
    /// One request: who asked, the tool, the arguments it binds, the definition, its status.
    Show {
        id: String,
        #[command(flatten)]
        options: super::ClientOptions,
    },
    /// Approve a pending call: it runs once, with exactly the arguments shown.
    Approve {
        id: String,
        /// Why (kept in the audit trail).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        options: super::ClientOptions,
    },
    /// Deny a pending call; the caller is told the reason.
    Deny {
        id: String,
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        options: super::ClientOptions,
    },
}

impl ApprovalsAction {
    pub(super) fn options(&self) -> &super::ClientOptions {
        match self {
            ApprovalsAction::Show { options, .. } | ApprovalsAction::Approve { options, .. } | ApprovalsAction::Deny { options, .. } => {
                options
            }
        }
    }
}

pub(super) async fn run(
    client: &mut Client,
    out: &mut Printer,
    action: Option<ApprovalsAction>,
    status: Option<String>,
) -> Result<(), ClientError> {
    match action {
        None => list(client, out, status.unwrap_or_default()).await,
        Some(ApprovalsAction::Show { id, .. }) => {
            let approval = client.get_approval(pb::ApprovalRequest { approval_id: id }).await?.into_inner();
            show(out, &approval)
        }
        Some(ApprovalsAction::Approve { id, reason, .. }) => {
            let request = pb::DecideApprovalRequest { approval_id: id, approve: true, reason: reason.unwrap_or_default() };
            let approval = client.decide_approval(request).await?.into_inner();
            decided(out, &approval)
        }
        Some(ApprovalsAction::Deny { id, reason, .. }) => {
            let request = pb::DecideApprovalRequest { approval_id: id, approve: false, reason };
            let approval = client.decide_approval(request).await?.into_inner();
            decided(out, &approval)
        }
    }
}

async fn list(client: &mut Client, out: &mut Printer, status: String) -> Result<(), ClientError> {
    let approvals = client.list_approvals(pb::ListApprovalsRequest { status }).await?.into_inner().approvals;
    if out.is_json() {
        out.json_line(&json!({ "approvals": approvals.iter().map(approval_json).collect::<Vec<_>>() }))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = approvals
        .iter()
        .map(|approval| {
            vec![
                approval.approval_id.clone(),
                approval.status.clone(),
                approval.agent.clone(),
                approval.qualified_name.clone(),
                rfc3339(approval.requested_at_unix_ms),
                rfc3339(approval.expires_at_unix_ms),
            ]
        })
        .collect();
    out.table(&["APPROVAL", "STATUS", "AGENT", "TOOL", "ASKED", "EXPIRES"], &rows)?;
    Ok(())
}

fn show(out: &mut Printer, approval: &pb::CallApproval) -> Result<(), ClientError> {
    if out.is_json() {
        out.json_line(&approval_json(approval))?;
        return Ok(());
    }
    out.line(&format!("approval {}  {}", approval.approval_id, approval.status))?;
    out.line(&format!("asked by   {} ({}) at {}", approval.agent, approval.caller, rfc3339(approval.requested_at_unix_ms)))?;
    out.line(&format!("tool       {} (definition {})", approval.qualified_name, approval.definition_hash))?;
    out.line(&format!("expires    {}", rfc3339(approval.expires_at_unix_ms)))?;
    if !approval.decided_by.is_empty() {
        out.line(&format!("decided by {} at {}", approval.decided_by, rfc3339(approval.decided_at_unix_ms)))?;
    }
    if !approval.reason.is_empty() {
        out.line(&format!("reason     {}", approval.reason))?;
    }
    out.line("arguments (exactly what runs):")?;
    out.line(&pretty(&approval.arguments_json))?;
    match approval.definition_json.is_empty() {
        true => out.line("definition: no longer the tool's current one (an approval would be stale)")?,
        false => {
            out.line("definition:")?;
            out.line(&pretty(&approval.definition_json))?;
        }
    }
    Ok(())
}

fn decided(out: &mut Printer, approval: &pb::CallApproval) -> Result<(), ClientError> {
    if out.is_json() {
        out.json_line(&approval_json(approval))?;
        return Ok(());
    }
    out.line(&format!("{} {}: {} for {}", approval.status, approval.approval_id, approval.qualified_name, approval.agent))?;
    Ok(())
}

fn pretty(text: &str) -> String {
    serde_json::from_str::<Value>(text).ok().and_then(|value| serde_json::to_string_pretty(&value).ok()).unwrap_or_else(|| text.to_owned())
}

fn approval_json(approval: &pb::CallApproval) -> Value {
    json!({
        "approval_id": approval.approval_id,
        "status": approval.status,
        "agent": approval.agent,
        "caller": approval.caller,
        "qualified_name": approval.qualified_name,
        "definition_hash": approval.definition_hash,
        "arguments": serde_json::from_str::<Value>(&approval.arguments_json).unwrap_or(Value::Null),
        "arguments_sha256": approval.arguments_sha256,
        "policy_revision": approval.policy_revision,
        "requested_at_unix_ms": approval.requested_at_unix_ms,
        "expires_at_unix_ms": approval.expires_at_unix_ms,
        "decided_by": approval.decided_by,
        "decided_at_unix_ms": approval.decided_at_unix_ms,
        "reason": approval.reason,
        "definition": serde_json::from_str::<Value>(&approval.definition_json).unwrap_or(Value::Null),
    })
}

/// A `toolhost call` that waits for a person's approval: says so at once on stderr (the
/// request, its expiry, the command that approves it and the one that prints the result), and
/// gives the task that follows the request, whose result the call then waits for. `None` for
/// any other answer, or a request no task follows (the error says what to do then).
pub(super) fn waiting_task(status: &tonic::Status) -> Option<String> {
    use std::io::Write;
    use tonic_types::StatusExt;
    let info = status.get_details_error_info()?;
    if info.reason != "APPROVAL_PENDING" {
        return None;
    }
    let detail = |key: &str| info.metadata.get(key).cloned().unwrap_or_default();
    let task = info.metadata.get("task_id").filter(|task| !task.is_empty())?.clone();
    let line = format!(
        "waiting for an operator's approval: request {} expires at {} (in {} s)\n  to approve: {}\n  the result: {} (waiting for it now)",
        detail("approval_id"),
        detail("expires_at"),
        detail("expires_in_seconds"),
        detail("approve_command"),
        detail("result_command"),
    );
    // The person at the terminal reads this while the call goes on waiting; stdout keeps the result.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{}", super::output::printable(&line));
    let _ = stderr.flush();
    Some(task)
}
