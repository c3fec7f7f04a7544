//! A tool call, as a pipeline of named steps over one request, one file per step:
//!
//! 1. [`admit`]: the caller and its entry's decision on the tool; after the gate, its limits
//!    (slot, rate, quotas): one [`admit::Admitted`] value.
//! 2. [`resolve`]: the tool on the snapshot the policy was judged on.
//! 3. [`gate`]: a person's approval (waiting, or following a request); a task's steps kept.
//! 4. [`send`]: the continued round, then [`crate::calls::Calls::call`].
//! 5. [`classify`]: the continuation kept or given back.
//! 6. [`record`]: the call's one audit record, begun at admission, finished once here whatever
//!    the exit.
//!
//! [`Door::call`], a task's call ([`super::tasks`]) and a task started to follow an approval
//! run [`run`]; a task is checked before it is made by [`preflight`]. Nothing calls back into
//! [`Door::call`].

pub(in crate::door) mod admit;
pub(in crate::door) mod classify;
pub(in crate::door) mod gate;
pub(in crate::door) mod record;
pub(in crate::door) mod resolve;
pub(in crate::door) mod send;

use crate::access::Caller;
use crate::calls::{CallError, CallRequest, CallResult, ToolRef};
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
        run(self, caller, request, None).await
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
    let mut record = CallRecord::begin(caller, &request.tool, request.arguments);
    let result = steps(door, caller, &mut record, request, following).await;
    record.finish(door, &result);
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
    // Every decision of the policy is made on one snapshot: a tool it did not hold is called
    // only if the call finds it unchanged there (else a stale-tool race), so that nothing
    // published meanwhile runs undecided.
    let snapshot = door.registry.snapshot();
    let mut admitted = admit::admit(caller, &snapshot, &request.tool, record)?;
    let mut request = resolve::pin(&snapshot, shorten(request));
    let approved = gate::approval(door, &admitted, &request, record, following).await?;
    if let Some(approved) = &approved {
        request.arguments = Some(&approved.record.arguments);
        request.expected_hash = Some(&approved.record.definition_hash);
    }
    admitted.limit(door, &request.tool).await?;
    let answer = request.answer;
    let resumed = send::resume(door, caller, answer.as_ref())?;
    gate::sending(door, following, &request.tool).await?;
    let result = send::send(door, request, resumed.as_ref()).await;
    classify::classify(door, caller, answer, resumed, result)
}

/// What a call of `tool` would be refused for before anything is sent: the caller's policy
/// (a tool it may not use answers like one that does not exist), the arguments, an unknown,
/// removed, changed or held tool. A refusal is recorded as the call's would be; a task is
/// made only when there is none.
///
/// # Errors
/// The [`CallError`] the call would get.
pub(in crate::door) async fn preflight(
    door: &Door,
    caller: &Caller,
    tool: &ToolRef,
    expected_hash: Option<&str>,
    expected_revision: Option<u64>,
    arguments: Option<&str>,
) -> Result<(), CallError> {
    let mut record = CallRecord::begin(caller, tool, arguments);
    let checked = match admit::admit(caller, &door.registry.snapshot(), tool, &mut record) {
        Ok(_) => resolve::preflight(door, tool, expected_hash, expected_revision, arguments).await,
        Err(refused) => Err(refused),
    };
    let Err(refused) = checked else { return Ok(()) };
    let refused = Err(refused);
    record.finish(door, &refused);
    refused.map(|_: CallResult| ())
}

/// The one normalisation of what a caller sent, whichever door it came through: an empty or
/// blank string, a zero revision and an absent field all mean "not given". (A zero timeout is
/// a deadline already spent, not an absent one.)
fn normalise(mut request: CallRequest<'_>) -> CallRequest<'_> {
    request.arguments = given(request.arguments);
    request.expected_hash = given(request.expected_hash);
    request.expected_revision = request.expected_revision.filter(|revision| *revision > 0);
    request
}

/// A call request borrowed for less long: what the gate substitutes (an approval's arguments)
/// lives only as long as the call.
fn shorten<'short, 'long: 'short>(request: CallRequest<'long>) -> CallRequest<'short> {
    request
}
