//! Step 5, classify: what the caller gets of the server's answer. An `input_required` outcome's
//! `requestState` stays with the door and the caller gets a token for it; a retry that never
//! reached the server gives its round back, so that the caller may send the same answers again.
//! (The call's errors are typed by [`crate::calls`]; what each means at a door, by
//! [`crate::door::error`].)

use std::time::Instant;

use crate::access::Caller;
use crate::calls::{Answer, CallError, CallResult, ContinuationError, Pending};
use crate::door::Door;

/// `result` as the caller gets it, given the round `answer` continued (`resumed`).
pub(in crate::door) fn classify(
    door: &Door,
    caller: &Caller,
    answer: Option<Answer<'_>>,
    resumed: Option<Pending>,
    mut result: Result<CallResult, CallError>,
) -> Result<CallResult, CallError> {
    match (&mut result, resumed) {
        (Ok(done), _) if done.outcome.input_required.is_some() => {
            if let Err(error) = keep_continuation(door, caller, done) {
                result = Err(error.into());
            }
        }
        // The retry never reached the server: the caller may send the same answers again.
        (Err(CallError::Unavailable { .. } | CallError::Overloaded { .. } | CallError::DefinitionHeld { .. }), Some(pending)) => {
            if let Some(answer) = answer {
                door.continuations.restore(answer.token, pending);
            }
        }
        _ => {}
    }
    result
}

/// Keeps the server's `requestState` of an `input_required` outcome for `caller`, and hands
/// the caller a token for it instead.
fn keep_continuation(door: &Door, caller: &Caller, result: &mut CallResult) -> Result<(), ContinuationError> {
    let Some(input) = result.outcome.input_required.as_mut() else { return Ok(()) };
    let pending = Pending::new(
        result.server.clone(),
        result.name.clone(),
        result.generation,
        result.definition_hash.clone(),
        input.request_state.take(),
    );
    let (token, expires) = door.continuations.issue(caller, pending)?;
    let left = expires.saturating_duration_since(Instant::now());
    let expires_at_ms = crate::catalog::record::now_ms().saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX));
    result.continuation = Some((token, expires_at_ms));
    Ok(())
}
