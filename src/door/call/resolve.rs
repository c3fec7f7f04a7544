//! Step 2, resolve: which tool the call means, on the one snapshot its policy was judged on.
//! A tool that snapshot holds is called only if the call finds it unchanged (its definition
//! hash, or the catalog revision the caller listed); a qualified name it does not hold is
//! pinned to the snapshot's revision, so that a tool published meanwhile is a stale-tool race
//! and never runs undecided. A task checks all of it before it is made ([`preflight`]).

use crate::calls::{CallError, CallRequest, ToolRef, locate};
use crate::door::Door;
use crate::registry::CatalogSnapshot;

/// `request` bound to `snapshot`: a qualified name it does not hold must be found unchanged at
/// its revision.
pub(in crate::door) fn pin<'a>(snapshot: &CatalogSnapshot, mut request: CallRequest<'a>) -> CallRequest<'a> {
    if matches!(request.tool, ToolRef::Qualified(_)) && locate(&snapshot.servers, &request.tool).is_none() {
        request.expected_revision = Some(snapshot.revision);
    }
    request
}

/// What a call of `tool` would be refused for before anything is sent, besides the caller's
/// policy: the arguments, an unknown, removed, changed or held tool ([`crate::calls::Calls::preflight`]).
///
/// # Errors
/// The [`CallError`] the call would get.
pub(in crate::door) async fn preflight(
    door: &Door,
    tool: &ToolRef,
    expected_hash: Option<&str>,
    expected_revision: Option<u64>,
    arguments: Option<&str>,
) -> Result<(), CallError> {
    crate::calls::check_arguments(arguments)?;
    door.calls.preflight(tool, expected_hash, expected_revision).await
}

/// The generation of `tool`'s server now and the tool's definition hash in it (0 and empty when
/// it has none): what a call is handed to, as far as its record can tell if it never ends.
pub(in crate::door) fn current(door: &Door, tool: &ToolRef) -> (u64, String) {
    let snapshot = door.registry.snapshot();
    let Some((view, idx)) = locate(&snapshot.servers, tool) else { return (0, String::new()) };
    let hash = view.generation().and_then(|generation| generation.tools.get(idx).map(|tool| tool.hash.clone()));
    (view.generation_number(), hash.unwrap_or_default())
}

/// The generation of `tool`'s server now (0 when it has none): what a task's call is kept as
/// handed to, read as it leaves.
pub(in crate::door) fn generation_now(door: &Door, tool: &ToolRef) -> u64 {
    locate(&door.registry.snapshot().servers, tool).map_or(0, |(view, _)| view.generation_number())
}
