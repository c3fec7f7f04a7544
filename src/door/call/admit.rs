//! Step 1, admit: the caller, its entry's decision on the tool (allowed, needs a person's
//! approval) and, once the gate lets the call through, its limits (the in-flight slot, the
//! rate, the quotas): one [`Admitted`] value, whose slot is given back when it is dropped.
//!
//! The limits are taken after the gate, not at once: a call waiting for a person holds no slot
//! and spends no rate, so one agent's pending approvals never stop its other calls. Both are
//! judged on the call's one snapshot (the quotas that cover the tool by the same names the
//! entry's decision was made by).

use crate::access::{Caller, InFlight, Limited};
use crate::calls::{CallError, ToolRef};
use crate::door::{Door, judge, refused_tool};
use crate::registry::CatalogSnapshot;

/// A caller admitted to call one tool.
pub(in crate::door) struct Admitted<'c> {
    pub(in crate::door) caller: &'c Caller,
    /// Its entry (or the tool's server) has a person approve each call first.
    pub(in crate::door) needs_approval: bool,
    /// The call counted against its entry's `concurrency` until this value is dropped.
    in_flight: Option<InFlight>,
}

/// Judges `caller`'s use of `target` on `snapshot`, by both the tool's names. A tool its
/// policy excludes is refused exactly as one that does not exist (operators get the truth);
/// every refusal here is the policy's (the caller records it as denied).
///
/// # Errors
/// The [`CallError`] of a missing tool ([`refused_tool`]).
pub(in crate::door) fn admit<'c>(caller: &'c Caller, snapshot: &CatalogSnapshot, target: &ToolRef) -> Result<Admitted<'c>, CallError> {
    let (allowed, needs_approval) = judge(snapshot, target, |tool| (caller.agent.may_use(tool), caller.agent.needs_approval(tool)));
    if !allowed {
        return Err(refused_tool(caller, snapshot, target));
    }
    Ok(Admitted { caller, needs_approval, in_flight: None })
}

impl Admitted<'_> {
    /// Takes the call's share of its entry's limits: a slot (one agent's flood waits behind no
    /// one but itself), the rate, then every quota that covers `target` as `snapshot` (the one
    /// the call was admitted on) names it (counted in the store; closed when the count cannot
    /// be written). A refusal is counted in the metrics.
    ///
    /// # Errors
    /// [`CallError::CallerBusy`], [`CallError::RateLimited`], [`CallError::QuotaExhausted`],
    /// [`CallError::Store`].
    pub(in crate::door) async fn limit(&mut self, door: &Door, snapshot: &CatalogSnapshot, target: &ToolRef) -> Result<(), CallError> {
        let agent = &self.caller.agent;
        let taken = match agent.begin_call() {
            Ok(in_flight) => in_flight,
            Err(limited) => {
                let name = agent.name.to_string();
                let refused = match limited {
                    Limited::Concurrency { limit } => CallError::CallerBusy { agent: name, limit },
                    Limited::Rate { calls, per, retry_after } => CallError::RateLimited { agent: name, calls, per, retry_after },
                };
                door.metrics().record_limited(&agent.name, refused.kind());
                return Err(refused);
            }
        };
        self.in_flight = Some(taken);
        if let Err(refused) = self.take_quotas(door, snapshot, target).await {
            if matches!(refused, CallError::QuotaExhausted { .. }) {
                door.metrics().record_limited(&agent.name, refused.kind());
            }
            return Err(refused);
        }
        Ok(())
    }

    /// Counts the call against every quota of the caller's entry that covers `target`.
    async fn take_quotas(&self, door: &Door, snapshot: &CatalogSnapshot, target: &ToolRef) -> Result<(), CallError> {
        let agent = &self.caller.agent;
        if agent.quotas.is_empty() {
            return Ok(());
        }
        let applies: Vec<_> = judge(snapshot, target, |tool| agent.quotas.iter().filter(|quota| quota.applies_to(tool)).collect());
        for quota in applies {
            let taken = quota
                .take(&door.store, &agent.name, crate::catalog::record::now_ms())
                .await
                .map_err(|error| CallError::Store(format!("cannot count the call against agent {:?}'s quota: {error}", agent.name)))?;
            if let Some(retry_after) = taken {
                return Err(CallError::QuotaExhausted {
                    agent: agent.name.to_string(),
                    tool: target.qualified().into_owned(),
                    calls: quota.calls,
                    per: quota.per,
                    retry_after,
                });
            }
        }
        Ok(())
    }
}
