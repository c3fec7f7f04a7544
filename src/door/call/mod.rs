//! A tool call, as a pipeline of named steps over one request, one file per step:
//!
//! 1. [`admit`]: the caller and its entry's decision on the tool; after the gate, its limits
//!    (slot, rate, quotas): one [`admit::Admitted`] value.
//! 2. [`resolve`]: the tool on the snapshot the policy was judged on.
//! 3. [`gate`]: a person's approval (waiting, or following a request); a task's steps kept.
//! 4. [`send`]: the continued round, then [`crate::calls::Calls::call`].
//! 5. [`classify`]: the continuation kept or given back.
//! 6. [`record`]: the call's one audit record, begun at admission, finished once here, or
//!    written as `cancelled` when the call is dropped before it ends.
//!
//! [`Door::call`] and a task's call ([`super::tasks`]) run [`run`]; a task is checked before it
//! is made by [`preflight`]. A plain call left pending on a person's approval is recorded, then
//! [`Door::call`] starts the task that follows its request ([`gate::follow_approval`]): the
//! steps start no task, so a task's call never leads back into another (no cycle of futures).

pub(in crate::door) mod admit;
pub(in crate::door) mod classify;
pub(in crate::door) mod gate;
pub(in crate::door) mod record;
pub(in crate::door) mod resolve;
pub(in crate::door) mod send;

use crate::access::Caller;
use crate::calls::{ApprovalError, CallError, CallRequest, CallResult, ToolRef};
use crate::door::{Door, given};
use gate::Following;
use record::CallRecord;

impl Door {
    /// Calls a tool for `caller`: refused (and audited as refused) when its policy excludes the
    /// tool, else routed through [`crate::calls::Calls`] and audited with its outcome.
    ///
    /// # Errors
    /// [`CallError`]; a refusal is the error a missing tool would give (operators get the truth).
    pub async fn call(&self, caller: &Caller, request: CallRequest<'_>) -> Result<CallResult, CallError> {
        let request = normalise(request);
        let (tool, arguments) = (request.tool.clone(), request.arguments);
        let task_of_its_own = request.upstream_task.is_some();
        let result = run(self, caller, request, None).await;
        match result {
            // Recorded as pending: a task follows the request from here, so that the caller that
            // stops waiting gets the decision by the task's id.
            Err(CallError::Approval(ApprovalError::Pending { id, expires_at_ms, task: None })) if !task_of_its_own => {
                // Seen through on the tasks' tracker: a client that goes away meanwhile must not
                // leave a follower started but never linked to its request (nor its event unwritten).
                let (door, who, arguments, request) = (self.clone(), caller.clone(), arguments.unwrap_or("{}").to_owned(), id.clone());
                let follow = async move { gate::follow_approval(&door, &who, &tool, &arguments, &request).await };
                let task = self.tasks.see_through(follow).await.ok().flatten();
                Err(CallError::Approval(ApprovalError::Pending { id, expires_at_ms, task }))
            }
            other => other,
        }
    }
}

/// The call of `request` for `caller`, every step in turn, and its one audit record.
/// `following`: a task's call, each step kept in the task first.
pub(in crate::door) async fn run(
    door: &Door,
    caller: &Caller,
    request: CallRequest<'_>,
    following: Option<&Following>,
) -> Result<CallResult, CallError> {
    let request = normalise(request);
    // Dropped with the call's future (cancelled), it writes the record itself.
    let mut record = CallRecord::begin(door, caller, &request.tool, request.arguments);
    if let Some(following) = following {
        record.handed_on_by(following.handed_on());
    }
    let result = steps(door, caller, &mut record, request, following).await;
    record.finish(&result);
    result
}

/// The steps between admission and the record; the first refusal ends the call.
async fn steps<'a>(
    door: &Door,
    caller: &Caller,
    record: &mut CallRecord<'_>,
    request: CallRequest<'a>,
    following: Option<&Following>,
) -> Result<CallResult, CallError> {
    // The policy's decisions (the entry's, the quotas that cover the tool) are made on one
    // snapshot, and a qualified name it did not hold is pinned to it: the tool is called only
    // if the send, which resolves it again on the snapshot of its moment, finds it unchanged
    // (else a stale-tool race), so that nothing published meanwhile runs undecided. An
    // approval binds the definition current when it is asked, and the send must find that one.
    let snapshot = door.registry.snapshot();
    let mut admitted = admit::admit(caller, &snapshot, &request.tool).inspect_err(|_| record.denied())?;
    let mut request = resolve::pin(&snapshot, shorten(request));
    let approved = gate::approval(door, &admitted, &request, record, following).await?;
    if let Some(approved) = &approved {
        request.arguments = Some(&approved.record.arguments);
        request.expected_hash = Some(&approved.record.definition_hash);
    }
    admitted.limit(door, &snapshot, &request.tool).await?;
    let answer = request.answer;
    let resumed = send::resume(door, caller, answer.as_ref())?;
    gate::sending(door, following, &request.tool).await?;
    let (generation, hash) = resolve::current(door, &request.tool);
    record.sending(generation, hash);
    let result = send::send(door, request, resumed.as_ref()).await;
    classify::classify(door, caller, answer, resumed, result)
}

/// Whether a check writes the refusal it finds as the call's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::door) enum Audit {
    /// A task a caller asked for: refused, it is recorded as the call would be.
    Refusal,
    /// The task following a plain call's approval request: that call has its record already.
    Silent,
}

/// What a call of `tool` would be refused for before anything is sent: the caller's policy
/// (a tool it may not use answers like one that does not exist), the arguments, an unknown,
/// removed, changed or held tool. A refusal is recorded as the call's would be (unless
/// [`Audit::Silent`]); a task is made only when there is none.
///
/// # Errors
/// The [`CallError`] the call would get.
pub(in crate::door) async fn preflight(
    door: &Door,
    caller: &Caller,
    call: Given<'_>,
    tool: &ToolRef,
    audit: Audit,
) -> Result<(), CallError> {
    let started = (crate::catalog::record::now_ms(), std::time::Instant::now());
    let (refused, denied) = match admit::admit(caller, &door.registry.snapshot(), tool) {
        Ok(_) => match resolve::preflight(door, tool, call.expected_hash, call.expected_revision, call.arguments).await {
            Ok(()) => return Ok(()),
            Err(refused) => (refused, false),
        },
        Err(refused) => (refused, true),
    };
    let refused = Err(refused);
    if audit == Audit::Refusal {
        // Begun only now: a check dropped half-way (its caller went away) made no call.
        let mut record = CallRecord::begin_at(door, caller, tool, call.arguments, started);
        if denied {
            record.denied();
        }
        record.finish(&refused);
    }
    refused.map(|_: CallResult| ())
}

/// What a caller sent of a call besides the tool, as the door takes it.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::door) struct Given<'r> {
    pub(in crate::door) arguments: Option<&'r str>,
    pub(in crate::door) expected_hash: Option<&'r str>,
    pub(in crate::door) expected_revision: Option<u64>,
}

impl<'r> Given<'r> {
    /// The one normalisation of what a caller sent, whichever door it came through and whether
    /// it is a call or a task's ([`Door::start_task`]): an empty or blank string, a zero
    /// revision and an absent field all mean "not given". (A zero timeout is a deadline
    /// already spent, not an absent one.)
    pub(in crate::door) fn normalised(self) -> Given<'r> {
        Given {
            arguments: given(self.arguments),
            expected_hash: given(self.expected_hash),
            expected_revision: self.expected_revision.filter(|revision| *revision > 0),
        }
    }
}

/// `request` with [`Given::normalised`] fields.
fn normalise(mut request: CallRequest<'_>) -> CallRequest<'_> {
    let sent = Given { arguments: request.arguments, expected_hash: request.expected_hash, expected_revision: request.expected_revision };
    let Given { arguments, expected_hash, expected_revision } = sent.normalised();
    (request.arguments, request.expected_hash, request.expected_revision) = (arguments, expected_hash, expected_revision);
    request
}

/// A call request borrowed for less long: what the gate substitutes (an approval's arguments)
/// lives only as long as the call.
fn shorten<'short, 'long: 'short>(request: CallRequest<'long>) -> CallRequest<'short> {
    request
}
