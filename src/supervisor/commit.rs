//! A worker's bookkeeping after a pass: committing a complete listing to the store and
//! publishing it (with its trace span and metrics), and recording passes that committed nothing.

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::catalog::integrity::{self, Approval, ToolIntegrity};
use crate::catalog::model::{Generation, Listing};
use crate::catalog::record::{EnumerationOutcome, EnumerationReason, EnumerationRecord, now_ms};
use crate::store::CommitOutcome;
use crate::store::approvals::ACCEPTED_BY_POLICY;
use crate::supervisor::enumerate::{PassClock, PassStats};
use crate::supervisor::integrity::compact as integrity_states;
use crate::supervisor::trace;
use crate::supervisor::worker::Worker;
use crate::telemetry::span_context;

impl Worker {
    /// Offers a complete listing to the store and publishes the result. Returns false if the
    /// store failed (the listing is then not published either).
    pub(crate) async fn commit(&self, listing: Listing, reason: EnumerationReason, clock: PassClock, stats: PassStats) -> bool {
        // The refresh span: a stale-tool race on this generation will link to it.
        let refresh_context = span_context(&tracing::Span::current());
        let span = trace::commit(&self.seed.name);
        self.commit_in(listing, reason, clock, stats, refresh_context).instrument(span).await
    }

    async fn commit_in(
        &self,
        listing: Listing,
        reason: EnumerationReason,
        clock: PassClock,
        stats: PassStats,
        refresh_context: Option<SpanContext>,
    ) -> bool {
        let span = tracing::Span::current();
        if let Some(first) = listing.diagnostics.first() {
            // One line per listing, however many entries were skipped; the record keeps the first few.
            tracing::warn!(server = %self.seed.name, skipped = listing.skipped, first = %first, "tools/list entries skipped");
        }
        let record = self.record(reason, EnumerationOutcome::Committed, None, clock, stats, listing.diagnostics.clone());
        let Some(shared) = self.seed.registry.server(&self.seed.name).map(|view| view.shared().clone()) else { return false };
        // The integrity lock: an operator's approval cannot interleave with this evaluation.
        let mut approvals = shared.approvals.lock().await;
        let Some(current) = self.seed.registry.server(&self.seed.name) else { return false };
        let previous = current.generation().cloned();
        let evaluation = integrity::evaluate(&self.seed.spec.integrity, &listing.tools, &approvals, |name| {
            let before = previous.as_ref()?.tool(name)?;
            listing.tools.iter().find(|tool| tool.name == name).filter(|tool| tool.hash != before.hash)?;
            Some(before.fields().description.clone())
        });
        let private_to = stats.private.then(|| self.seed.spec.credential_fingerprint(&self.seed.name));
        let committed = self
            .seed
            .store
            .generations()
            .commit_accepting(&self.seed.name, listing, record.clone(), previous.as_deref(), &evaluation.accepted, private_to.as_deref())
            .await;
        let outcome = match committed {
            Ok(CommitOutcome::Committed { generation, diff }) => {
                for (name, hash) in &evaluation.accepted {
                    let approval = Approval { hash: hash.clone(), approved_by: ACCEPTED_BY_POLICY.to_owned(), approved_at_ms: now_ms() };
                    approvals.insert(name.clone(), approval);
                }
                let mut states = evaluation.tools;
                // A definition unchanged since the last generation keeps what was said of its description then.
                for (state, tool) in states.iter_mut().zip(&generation.tools) {
                    if let Some(before) = previous.as_ref().and_then(|p| p.position(&tool.name).map(|idx| (idx, &p.tools[idx])))
                        && before.1.hash == tool.hash
                    {
                        state.flags.description_changed = current.integrity_at(before.0).is_some_and(|old| old.flags.description_changed);
                    }
                }
                self.report_holds(&generation, previous.as_deref(), &states, &span);
                let states = integrity_states(&generation.tools, states);
                tracing::info!(
                    server = %self.seed.name, generation = generation.number, tools = generation.tools.len(),
                    added = diff.added.len(), removed = diff.removed.len(), changed = diff.changed.len(), reason = reason.as_str(),
                    "published a new tool generation"
                );
                let number = generation.number;
                diff_attributes(&span, [diff.added.len(), diff.removed.len(), diff.changed.len()], number);
                if let Some(context) = refresh_context
                    && let Some(view) = self.seed.registry.server(&self.seed.name)
                {
                    view.shared().remember_generation_span(number, context);
                }
                self.seed.registry.update(&self.seed.name, |view| view.published(generation, states, record));
                EnumerationOutcome::Committed
            }
            Ok(CommitOutcome::Unchanged { generation }) => {
                tracing::debug!(server = %self.seed.name, generation, reason = reason.as_str(), "tool set unchanged");
                span.set_attribute("toolhost.generation", generation as i64);
                // A stored generation held back at boot (private to another credential) is this
                // credential's now: publish it.
                if previous.is_none()
                    && let Some(unpublished) = self.unpublished_generation(&mut approvals).await
                {
                    self.seed.registry.update(&self.seed.name, |view| view.stored_generation_released(unpublished.0, unpublished.1));
                }
                self.seed.registry.update(&self.seed.name, |view| {
                    view.verified(EnumerationRecord { outcome: EnumerationOutcome::Unchanged, generation, ..record });
                });
                EnumerationOutcome::Unchanged
            }
            Err(error) => {
                // Nothing was published: the registry keeps the last durable generation. The
                // server shows the fault until a later pass commits (the worker retries).
                tracing::error!(server = %self.seed.name, %error, "cannot commit the tool generation");
                span.set_attribute("error.type", "store");
                self.seed.metrics.record_enumeration(&self.seed.name, reason.as_str(), "store_failed", clock.elapsed());
                let message = format!("the new tool generation could not be stored, so it was not published: {error}");
                // The attempt is shown even though the store could not record it.
                self.seed.registry.update(&self.seed.name, |view| view.commit_failed(message, record));
                return false;
            }
        };
        span.set_attribute("toolhost.enumeration.outcome", outcome.as_str());
        span.add_event(
            "watchers notified",
            vec![KeyValue::new("toolhost.catalog.revision", self.seed.registry.snapshot().revision as i64)],
        );
        self.seed.metrics.record_enumeration(&self.seed.name, reason.as_str(), outcome.as_str(), clock.elapsed());
        true
    }

    /// The store's current generation with its integrity states, when the registry has none.
    /// (What the policy accepts in it is stored, and joins `approvals`.)
    async fn unpublished_generation(
        &self,
        approvals: &mut std::collections::HashMap<String, Approval>,
    ) -> Option<(std::sync::Arc<Generation>, std::sync::Arc<[ToolIntegrity]>)> {
        let stored = self.seed.store.generations().load_current(&self.seed.name).await.ok()??;
        let previous = self
            .seed
            .store
            .generations()
            .previous_definitions(Some(&self.seed.name))
            .await
            .ok()?
            .remove(&*self.seed.name)
            .unwrap_or_default();
        let (states, updated) = crate::supervisor::integrity::evaluate_stored(
            &self.seed.store,
            &self.seed.name,
            &self.seed.spec.integrity,
            &stored.generation,
            approvals.clone(),
            &previous,
        )
        .await
        .ok()?;
        *approvals = updated;
        Some((stored.generation, states))
    }

    /// A WARN and a span event for each tool held or flagged in a new generation, with what
    /// changed; the held-tools gauge follows the registry.
    fn report_holds(&self, generation: &Generation, previous: Option<&Generation>, states: &[ToolIntegrity], span: &tracing::Span) {
        for (tool, state) in generation.tools.iter().zip(states) {
            if state.held.is_none() && !state.flags.any() {
                continue;
            }
            let hold = state.held.map_or("none", |hold| hold.as_str());
            let flags = state.flags.names().join(",");
            // What changed since the definition before it, as paths ("~ /description, + /inputSchema/…").
            let summary = previous
                .and_then(|previous| previous.tool(&tool.name))
                .filter(|before| before.hash != tool.hash)
                .map(|before| {
                    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
                    let changes = integrity::changes(&parse(&before.definition), &parse(&tool.definition));
                    let paths: Vec<&str> = changes.iter().filter_map(|line| line.split(':').next()).take(10).collect();
                    paths.join(", ")
                })
                .unwrap_or_default();
            // Held needs an operator: a WARN. Flagged but accepted by the server's policy is news,
            // not a problem: an INFO that says so.
            match state.held {
                Some(_) => tracing::warn!(
                    server = %self.seed.name, tool = %tool.name, hold, flags = %flags, offered = %tool.hash, changes = %summary,
                    approved = state.approved(&tool.hash).unwrap_or("none"), "tool definition held until an operator approves it"
                ),
                None => tracing::info!(
                    server = %self.seed.name, tool = %tool.name, flags = %flags, hash = %tool.hash, changes = %summary,
                    "tool definition flagged, and accepted by the server's policy"
                ),
            }
            span.add_event(
                "toolhost.definition_held",
                vec![
                    KeyValue::new("gen_ai.tool.name", tool.name.clone()),
                    KeyValue::new("toolhost.hold", hold),
                    KeyValue::new("toolhost.flags", flags),
                    KeyValue::new("toolhost.definition_hash", tool.hash.clone()),
                    KeyValue::new("toolhost.approved_hash", state.approved(&tool.hash).unwrap_or_default().to_owned()),
                    KeyValue::new("toolhost.changes", summary),
                ],
            );
        }
    }

    pub(crate) async fn record_failure(
        &self,
        reason: EnumerationReason,
        outcome: EnumerationOutcome,
        error: Option<String>,
        clock: PassClock,
        stats: PassStats,
    ) {
        let record = self.record(reason, outcome, error, clock, stats, Vec::new());
        if let Err(store_error) = self.seed.store.generations().record_enumeration(&self.seed.name, record.clone()).await {
            tracing::error!(server = %self.seed.name, error = %store_error, "cannot record the enumeration");
        }
        self.seed.registry.update(&self.seed.name, |view| view.enumerated(record));
    }

    fn record(
        &self,
        reason: EnumerationReason,
        outcome: EnumerationOutcome,
        error: Option<String>,
        clock: PassClock,
        stats: PassStats,
        diagnostics: Vec<String>,
    ) -> EnumerationRecord {
        EnumerationRecord {
            started_at_ms: clock.started_at_ms,
            duration_ms: i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX),
            reason,
            outcome,
            pages: stats.pages,
            tools: stats.tools,
            bytes: stats.bytes,
            generation: 0,
            error: error.map(crate::secrets::redact_owned),
            diagnostics: diagnostics.into_iter().map(crate::secrets::redact_owned).collect(),
        }
    }
}

/// A published generation's span says its number and how many tools were added, removed and
/// changed.
fn diff_attributes(span: &tracing::Span, [added, removed, changed]: [usize; 3], generation: u64) {
    span.set_attribute("toolhost.diff.added", added as i64);
    span.set_attribute("toolhost.diff.removed", removed as i64);
    span.set_attribute("toolhost.diff.changed", changed as i64);
    span.set_attribute("toolhost.generation", generation as i64);
}
