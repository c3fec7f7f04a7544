//! Step 3, gate: what lets a call leave besides its caller's policy. A call a person approves
//! first waits here, holding no slot, and runs (once, with exactly the approved arguments and
//! definition) only once approved; a plain call that stops waiting is answered with its
//! request, and [`Door::call`], once the call is recorded, leaves a task following it
//! ([`follow_approval`]): the gate itself starts no task, so a task's call never starts one.
//! A task's call is kept in its row at each step ([`Following`]): waiting for request X, then
//! handed to generation G, before it is sent. (A held tool is refused by the send itself,
//! checked again as the request leaves.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::access::Caller;
use crate::calls::{CallError, CallRequest, ToolRef};
use crate::catalog::record::now_ms;
use crate::door::Door;
use crate::door::approvals::{self, Approved, Asked};
use crate::door::call::admit::Admitted;
use crate::door::call::record::{self, CallRecord};
use crate::door::call::resolve;
use crate::store::Store;
use crate::store::call_approvals::ApprovalRecord;

/// How long a call waits for a person's approval when neither it nor its server sets a deadline.
const DEFAULT_APPROVAL_WAIT: Duration = Duration::from_secs(30);

/// The approval the call needs, once given: `None` when it needs none. A task following a
/// request after a restart waits for it whatever the policy is now.
///
/// # Errors
/// [`CallError::Approval`] (pending past the wait, denied, expired, stale, too many), [`CallError::Store`].
pub(in crate::door) async fn approval(
    door: &Door,
    admitted: &Admitted<'_>,
    request: &CallRequest<'_>,
    record: &CallRecord<'_>,
    following: Option<&Following>,
) -> Result<Option<Approved>, CallError> {
    if !admitted.needs_approval && following.is_none_or(|following| following.request.is_none()) {
        return Ok(None);
    }
    let (caller, target, started) = (admitted.caller, &request.tool, record.started());
    let arguments = request.arguments.unwrap_or("{}");
    let deadline = request.timeout.unwrap_or_else(|| {
        target.server().and_then(|server| door.registry.server(server)).map_or(DEFAULT_APPROVAL_WAIT, |view| view.shared().request_timeout)
    });
    // Stop waiting a little before the caller's deadline, so that the answer naming the
    // request (and the task that follows it) reaches the caller before its own timer.
    let mut wait = deadline.saturating_sub((deadline / 4).min(Duration::from_secs(2)));
    if following.is_none() && request.upstream_task.is_none() {
        wait = wait.min(door.approvals.answer_after());
    }
    let followed = following.and_then(|following| following.request.as_deref());
    let asked = Asked { caller, tool: target, arguments, wait, progress: request.progress.as_ref(), followed };
    let requested = |asked: &ApprovalRecord| {
        record::event(door, caller, &asked.qualified_name, format!("approval_requested:{}", asked.id), started);
    };
    let gated = ask(door, &asked, following, requested).await;
    let ended = match &gated {
        Ok(Some(_)) => Some("approved"),
        Ok(None) => None,
        Err(CallError::Approval(refusal)) => Some(approvals::outcome(refusal)),
        Err(_) => Some("error"),
    };
    if let Some(ended) = ended {
        let server = target.server().unwrap_or_default();
        door.metrics().record_approval_wait(server, ended, started.1.elapsed());
        tracing::info!(agent = %caller.agent.name, tool = %target.qualified(), outcome = ended, "toolhost.approval");
    }
    gated
}

/// Asks for `asked`'s approval (or follows its request), keeps the request a task waits for in
/// its row, and waits for the decision.
async fn ask(
    door: &Door,
    asked: &Asked<'_>,
    following: Option<&Following>,
    requested: impl FnOnce(&ApprovalRecord),
) -> Result<Option<Approved>, CallError> {
    let Some(request) = door.approvals.request(asked, &door.registry, requested).await? else { return Ok(None) };
    if let Some(following) = following {
        following.waiting(&request.id).await;
    }
    door.approvals.decision(asked, request, &door.registry).await.map(Some)
}

/// The task that follows approval request `id` for `caller`'s plain call of `tool` (already
/// recorded as pending): the one already following it while it works, else a new one (its call
/// finds the same request and waits for it; its check writes no second record of the call).
/// `None` when no task can be started (the caller's task limits). Run by [`Door::call`] after
/// the call, never by a call's steps.
pub(in crate::door) async fn follow_approval(door: &Door, caller: &Caller, tool: &ToolRef, arguments: &str, id: &str) -> Option<String> {
    let request = door.approvals.get(id).await.ok()??;
    if let Some(follower) = &request.task_id
        && door.tasks.get(caller, follower).await.is_ok_and(|task| !task.status.is_terminal())
    {
        return Some(follower.clone());
    }
    let started = (now_ms(), std::time::Instant::now());
    let task = door.tasks.start_follower(door, caller, tool.clone(), arguments.to_owned()).await.ok()?;
    record::event(door, caller, &task.qualified_name, format!("task_started:{}", task.id), started);
    match door.approvals.follow(id, request.task_id.as_deref(), &task.id).await {
        Ok(true) => Some(task.id),
        // Another call of the same request made its own follower first: that one is followed,
        // and ours ends quietly (the caller cancelled nothing: no event in its name).
        _ => {
            let _ = door.tasks.cancel(caller, &task.id).await;
            door.approvals.get(id).await.ok()?.and_then(|request| request.task_id)
        }
    }
}

/// The last step before a task's call is sent: kept as handed to its server's generation now.
///
/// # Errors
/// [`CallError::Store`]: not kept, not sent.
pub(in crate::door) async fn sending(door: &Door, following: Option<&Following>, target: &ToolRef) -> Result<(), CallError> {
    match following {
        Some(following) => following.sending(resolve::generation_now(door, target)).await,
        None => Ok(()),
    }
}

/// Where a task's call is, as far as the next start needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::door) enum Stage {
    /// Nothing sent, nothing to follow.
    Before,
    /// Waiting for the approval request kept in the task's row: nothing sent.
    Waiting,
    /// Handed to this generation of its server: it may run from here.
    Sent(u64),
}

/// What the gate tells a task's call as it goes, each step kept in the task's row first, and
/// the approval request it follows (after a restart: by id, as the caller that asked is not
/// there to be matched again).
pub(in crate::door) struct Following {
    store: Store,
    task: String,
    request: Option<String>,
    stage: Mutex<Stage>,
    /// Set when the daemon stops under the call and the next start follows it again: the
    /// call's outcome is that start's to record, so the dropped call writes none.
    handed_on: AtomicBool,
}

impl Following {
    /// Task `task`'s call, following approval request `request` (then already kept in its row).
    pub(in crate::door) fn new(store: Store, task: String, request: Option<String>) -> Following {
        let stage = if request.is_some() { Stage::Waiting } else { Stage::Before };
        Following { store, task, request, stage: Mutex::new(stage), handed_on: AtomicBool::new(false) }
    }

    /// The call waits for approval request `id`: kept, so that the next start follows it again.
    async fn waiting(&self, id: &str) {
        match self.store.tasks().set_approval(&self.task, id).await {
            Ok(()) => self.set(Stage::Waiting),
            Err(error) => {
                tracing::warn!(task = %self.task, %error, "cannot keep the approval request a task waits for: a restart will not follow it");
            }
        }
    }

    /// The call is handed to `generation` of its server. Kept first, or it is not sent: the
    /// next start must never take a call that may have run for one that did not.
    async fn sending(&self, generation: u64) -> Result<(), CallError> {
        self.store.tasks().set_sent(&self.task, generation).await.map_err(|error| {
            CallError::Store(format!("cannot record that task {} sends its call, so it was not sent: {error}", self.task))
        })?;
        self.set(Stage::Sent(generation));
        Ok(())
    }

    fn set(&self, stage: Stage) {
        *self.stage.lock().unwrap_or_else(PoisonError::into_inner) = stage;
    }

    /// The next start follows this call again (the daemon stops under it): its record is
    /// that start's to write.
    pub(in crate::door) fn hand_on(&self) {
        self.handed_on.store(true, Ordering::Release);
    }

    /// What [`Following::hand_on`] sets, for the call's record to read when it is dropped.
    pub(in crate::door) fn handed_on(&self) -> &AtomicBool {
        &self.handed_on
    }

    /// Where the call is now.
    pub(in crate::door) fn stage(&self) -> Stage {
        *self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
