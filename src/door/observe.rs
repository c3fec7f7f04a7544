//! The one span and metric builder of the front doors. Every request a door answers is a server
//! operation (its span, `mcp.server.operation.duration`) built here, and a call's outcome is
//! judged here once for every door: a failure that is the caller's (an unknown tool, a refusal,
//! bad arguments, a limit) is named (`toolhost.outcome`) but is not an error of toolhost's; one
//! that is toolhost's or the server's (unavailable, timed out, the upstream's failure, an
//! internal one) marks the span and the metric (`error.type`), and so does a stale-tool race,
//! nobody's mistake but what operators watch most. The door adds only its protocol's status
//! code.

use opentelemetry::KeyValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::Door;
use super::error::{Kind, kind_of_call};
use super::model::{CallError, CallResult, Caller, names};
use crate::telemetry::mcp::{Operation, Side};

pub use crate::telemetry::mcp::{REQUEST_ID, SessionLife, Wire};
pub use crate::telemetry::throttle::Throttle;

/// Which front door answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    Grpc,
    Mcp,
}

impl Front {
    fn as_str(self) -> &'static str {
        match self {
            Front::Grpc => "grpc",
            Front::Mcp => "mcp",
        }
    }
}

/// One request a door answers: its server span and its duration.
pub struct DoorSpan {
    operation: Operation,
    /// Set once a call's result judged the outcome: the door's status code is then recorded
    /// without judging again.
    judged: bool,
}

/// Whether a failure of this kind is toolhost's or the server's rather than the caller's.
fn is_fault(kind: Kind) -> bool {
    matches!(kind, Kind::Unavailable | Kind::DeadlineExceeded | Kind::Upstream | Kind::Internal)
}

impl DoorSpan {
    /// Starts the span of `method` (naming `target`, a tool as the caller named it, bounded by
    /// the door), a child of the current span.
    pub fn start(door: &Door, front: Front, method: &str, target: Option<&str>, wire: &Wire) -> DoorSpan {
        let mut operation = Operation::start(Side::Server, &door.metrics().server_operation_duration, method, target, wire);
        operation.attribute(KeyValue::new("toolhost.front_door", front.as_str()));
        DoorSpan { operation, judged: false }
    }

    pub fn span(&self) -> &tracing::Span {
        self.operation.span()
    }

    /// Whether anything is exported: attributes only worth building then.
    pub fn observed(&self) -> bool {
        self.operation.observed()
    }

    /// Continues the caller's trace (W3C `traceparent` and `tracestate`).
    pub fn continue_trace(&self, traceparent: &str, tracestate: Option<&str>) {
        crate::telemetry::propagation::continue_from_pairs(self.operation.span(), traceparent, tracestate);
    }

    /// The admitted caller's agent entry.
    pub fn caller(&self, caller: &Caller) {
        if self.operation.observed() {
            self.operation.span().set_attribute("toolhost.agent", caller.agent.name.to_string());
        }
    }

    /// A span attribute only (never a metric's: it may be anything the caller sent).
    pub fn note(&self, key: &'static str, value: String) {
        if self.operation.observed() {
            self.operation.span().set_attribute(key, value);
        }
    }

    pub fn session(&self, id: &str) {
        self.operation.session(id);
    }

    pub fn protocol_version(&mut self, version: &str) {
        self.operation.protocol_version(version);
    }

    /// What a call came to: the tool, only once the call reached a real one (a made-up name
    /// never becomes a time series), a tool's own failure, toolhost's outcome, and whether it
    /// is a fault (see the module's comment).
    pub fn call_ended(&mut self, result: &Result<CallResult, CallError>) {
        self.judged = true;
        if !self.operation.observed() {
            return;
        }
        match result {
            Ok(done) => {
                self.operation.tool(&names::qualify(&done.server, &done.name));
                if done.outcome.is_error {
                    self.operation.tool_error();
                }
            }
            Err(error) => {
                if let Some((server, tool)) = error.resolved_tool() {
                    self.operation.tool(&names::qualify(server, tool));
                }
                self.operation.attribute(KeyValue::new("toolhost.outcome", error.kind()));
                if is_fault(kind_of_call(error)) || matches!(error, CallError::Stale(_)) {
                    self.operation.failed(error.kind(), &error.to_string());
                }
            }
        }
    }

    /// The JSON-RPC error `code` a door answered: unless a call's result judged the request
    /// already, judged as JSON-RPC's conventions say (the caller's errors are not the server's).
    pub fn rpc_error(&mut self, code: i64, message: &str) {
        match self.judged {
            true => self.operation.status_code(&code.to_string()),
            false => self.operation.rpc_error(code, message),
        }
    }

    /// The door's own status code of its answer (`OK`, `NOT_FOUND`, `-32602`). Unless a call's
    /// result judged the request already, `fault` says whether the door's
    /// protocol counts this code as the server's failure.
    pub fn answered(&mut self, code: &str, fault: Option<&str>) {
        self.operation.status_code(code);
        if !self.judged
            && let Some(message) = fault
        {
            self.operation.failed(code, message);
        }
    }
}

/// A 2025 session's life on a door, in `mcp.server.session.duration`.
pub fn session_life(door: &Door, version: &str, wire: &Wire) -> SessionLife {
    SessionLife::start(&door.metrics().server_session_duration, version, wire, Side::Server)
}
