//! Step 4, send: the pending round a 2026 client's answers continue (its `requestState`, kept
//! by the door, never by the client), then the call itself through [`crate::calls::Calls::call`]:
//! resolved again on the snapshot of the moment, a server slot, one request, one answer.

use crate::access::Caller;
use crate::calls::{Answer, CallError, CallRequest, CallResult, Pending};
use crate::door::Door;

/// The round `answer` continues, taken from the caller's continuations (bad answers do not use
/// up the token: the caller may correct them); `None` for a first call.
///
/// # Errors
/// Malformed answers; a token that is unknown, expired or another caller's.
pub(in crate::door) fn resume(door: &Door, caller: &Caller, answer: Option<&Answer<'_>>) -> Result<Option<Pending>, CallError> {
    let Some(answer) = answer else { return Ok(None) };
    crate::calls::continuation::check_responses(answer.responses)?;
    Ok(Some(door.continuations.take(caller, answer.token)?))
}

/// Sends `request` (continuing `resumed`) to its server.
///
/// # Errors
/// [`CallError`]; a tool's own failure is an `Ok` result with `is_error` set.
pub(in crate::door) async fn send(door: &Door, request: CallRequest<'_>, resumed: Option<&Pending>) -> Result<CallResult, CallError> {
    door.calls.call(request, resumed).await
}
