//! The metrics toolhost records. Instruments come from the global meter provider, which is a
//! no-op unless telemetry export is on, so recording costs next to nothing when it is off.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableGauge};

/// Operation buckets, seconds: from a fast local server's answer to a slow tool's.
const OPERATION_BUCKETS: [f64; 17] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Session buckets, seconds: from a failed start to a day.
const SESSION_BUCKETS: [f64; 10] = [0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 43200.0, 86400.0];

/// Every instrument, created once and shared.
#[derive(Clone)]
pub struct Metrics {
    /// The MCP semantic conventions' histograms ([`super::mcp`]): each request toolhost sends
    /// to a server, each it answers for an agent, and the 2025-era sessions on either side.
    pub client_operation_duration: Histogram<f64>,
    pub server_operation_duration: Histogram<f64>,
    pub client_session_duration: Histogram<f64>,
    pub server_session_duration: Histogram<f64>,
    enumeration_duration: Histogram<f64>,
    calls: Counter<u64>,
    enumerations: Counter<u64>,
    propagation: Histogram<f64>,
    races: Counter<u64>,
    restarts: Counter<u64>,
    worker_panics: Counter<u64>,
    fleet_drift: Counter<u64>,
    oauth_tokens: Counter<u64>,
    refusals: Counter<u64>,
    approval_wait: Histogram<f64>,
    approval_decisions: Counter<u64>,
    audit_exported: Counter<u64>,
    audit_export_lost: Counter<u64>,
}

/// `toolhost.store.degraded`: 1 while the catalog store is degraded (its filesystem full), else
/// 0. Dropping it unregisters the callback.
pub fn register_store_gauge(meter: &Meter, degraded: tokio::sync::watch::Receiver<Option<Arc<str>>>) -> ObservableGauge<u64> {
    meter
        .u64_observable_gauge("toolhost.store.degraded")
        .with_description(
            "1 while the catalog store cannot be written (its filesystem is full): the stored catalog is served, changes wait",
        )
        .with_callback(move |observer| observer.observe(u64::from(degraded.borrow().is_some()), &[]))
        .build()
}

impl Metrics {
    pub fn new(meter: &Meter) -> Metrics {
        Metrics {
            client_operation_duration: meter
                .f64_histogram("mcp.client.operation.duration")
                .with_unit("s")
                .with_description("MCP requests toolhost sent to its servers, from sent to answered")
                .with_boundaries(OPERATION_BUCKETS.to_vec())
                .build(),
            server_operation_duration: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("MCP requests toolhost answered for agents, from received to answered")
                .with_boundaries(OPERATION_BUCKETS.to_vec())
                .build(),
            client_session_duration: meter
                .f64_histogram("mcp.client.session.duration")
                .with_unit("s")
                .with_description("2025-era MCP sessions toolhost held with its servers")
                .with_boundaries(SESSION_BUCKETS.to_vec())
                .build(),
            server_session_duration: meter
                .f64_histogram("mcp.server.session.duration")
                .with_unit("s")
                .with_description("2025-era MCP sessions agents held with toolhost")
                .with_boundaries(SESSION_BUCKETS.to_vec())
                .build(),
            enumeration_duration: meter
                .f64_histogram("toolhost.enumeration.duration")
                .with_unit("s")
                .with_description("Complete enumerations of a server's tools, every page, by reason and outcome")
                .with_boundaries(OPERATION_BUCKETS.to_vec())
                .build(),
            calls: meter.u64_counter("toolhost.calls").with_description("Tool calls by outcome").build(),
            enumerations: meter.u64_counter("toolhost.enumerations").with_description("Enumerations by reason and outcome").build(),
            propagation: meter
                .f64_histogram("toolhost.list_changed.duration")
                .with_unit("s")
                .with_description("From tools/list_changed received to the generation published or found unchanged")
                .with_boundaries(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
                .build(),
            races: meter.u64_counter("toolhost.stale_tool.races").with_description("Stale-tool races by kind").build(),
            restarts: meter.u64_counter("toolhost.server.restarts").with_description("Sessions started after a server's first").build(),
            worker_panics: meter
                .u64_counter("toolhost.worker.panics")
                .with_description("Server workers that panicked and were restarted by the supervisor")
                .build(),
            fleet_drift: meter
                .u64_counter("toolhost.fleet.drift.detected")
                .with_description("Tools found offered to another host of the fleet with a different definition")
                .build(),
            oauth_tokens: meter
                .u64_counter("toolhost.oauth.token_requests")
                .with_description("Token requests to authorization servers, by grant and outcome")
                .build(),
            refusals: meter
                .u64_counter("toolhost.agent.limited")
                .with_description("Calls refused before they started because an agent entry was over a limit, by agent and reason")
                .build(),
            approval_wait: meter
                .f64_histogram("toolhost.approval.wait.duration")
                .with_unit("s")
                .with_description("How long calls waited for a person's approval, by how the wait ended")
                .build(),
            approval_decisions: meter
                .u64_counter("toolhost.approval.decisions")
                .with_description("Operators' decisions on calls waiting for approval (approved, denied)")
                .build(),
            audit_exported: meter.u64_counter("toolhost.audit.exported").with_description("Audit records a sink took, by sink").build(),
            audit_export_lost: meter
                .u64_counter("toolhost.audit.export.lost")
                .with_description("Audit records retention removed before a sink got them, by sink")
                .build(),
        }
    }

    /// Instruments on the global meter provider.
    pub fn global() -> Metrics {
        Metrics::new(&opentelemetry::global::meter(super::SCOPE))
    }

    /// A call as an agent made it, by outcome; its time is in the operation histograms.
    pub fn record_call(&self, server: &str, outcome: &'static str) {
        self.calls.add(1, &[KeyValue::new("toolhost.server", server.to_owned()), KeyValue::new("toolhost.call.outcome", outcome)]);
    }

    /// A call refused at an agent entry's limit (`concurrency_limited`, `rate_limited`,
    /// `quota_exhausted`).
    pub fn record_limited(&self, agent: &str, reason: &'static str) {
        self.refusals.add(1, &[KeyValue::new("toolhost.agent", agent.to_owned()), KeyValue::new("toolhost.limit.reason", reason)]);
    }

    /// A call's wait for approval ended: `approved` (it ran), `denied`, `expired`, `stale`,
    /// `pending` (its caller's deadline came first) or `exhausted`.
    pub fn record_approval_wait(&self, server: &str, ended: &'static str, waited: Duration) {
        let attributes = [KeyValue::new("toolhost.server", server.to_owned()), KeyValue::new("toolhost.approval.outcome", ended)];
        self.approval_wait.record(waited.as_secs_f64(), &attributes);
    }

    /// An operator's decision on a pending call.
    /// `records` more taken by the audit export `sink`, and `lost` that retention removed first.
    pub fn record_audit_export(&self, sink: &str, records: u64, lost: u64) {
        let attributes = [KeyValue::new("toolhost.audit.sink", sink.to_owned())];
        self.audit_exported.add(records, &attributes);
        if lost > 0 {
            self.audit_export_lost.add(lost, &attributes);
        }
    }

    pub fn record_approval_decision(&self, server: &str, decision: &'static str) {
        self.approval_decisions
            .add(1, &[KeyValue::new("toolhost.server", server.to_owned()), KeyValue::new("toolhost.approval.decision", decision)]);
    }

    pub fn record_enumeration(&self, server: &str, reason: &'static str, outcome: &'static str, duration: Duration) {
        let attributes = [
            KeyValue::new("toolhost.server", server.to_owned()),
            KeyValue::new("toolhost.enumeration.reason", reason),
            KeyValue::new("toolhost.enumeration.outcome", outcome),
        ];
        self.enumerations.add(1, &attributes);
        self.enumeration_duration.record(duration.as_secs_f64(), &attributes);
    }

    pub fn record_propagation(&self, server: &str, duration: Duration) {
        self.propagation.record(duration.as_secs_f64(), &[KeyValue::new("toolhost.server", server.to_owned())]);
    }

    pub fn record_race(&self, server: &str, kind: &'static str) {
        self.races.add(1, &[KeyValue::new("toolhost.server", server.to_owned()), KeyValue::new("toolhost.race.kind", kind)]);
    }

    pub fn record_restart(&self, server: &str) {
        self.restarts.add(1, &[KeyValue::new("toolhost.server", server.to_owned())]);
    }

    /// One token request: `grant` is its `grant_type`, `outcome` "ok", "required" (an operator
    /// must act) or "unavailable".
    pub fn record_token_request(&self, server: &str, grant: &'static str, outcome: &'static str) {
        self.oauth_tokens.add(
            1,
            &[
                KeyValue::new("toolhost.server", server.to_owned()),
                KeyValue::new("oauth.grant_type", grant),
                KeyValue::new("toolhost.outcome", outcome),
            ],
        );
    }

    pub fn record_fleet_drift(&self, server: &str) {
        self.fleet_drift.add(1, &[KeyValue::new("toolhost.server", server.to_owned())]);
    }

    pub fn record_worker_panic(&self, server: &str) {
        self.worker_panics.add(1, &[KeyValue::new("toolhost.server", server.to_owned())]);
    }
}
