//! W3C trace context in and out: from an agent's request (gRPC metadata, `_meta`, HTTP headers)
//! into toolhost's spans, and from toolhost's spans into the upstream request's `params._meta`.

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Pairs<'a>([(&'static str, Option<&'a str>); 2]);

impl Extractor for Pairs<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| *k).collect()
    }
}

/// Makes `span` a child of the trace named by a W3C `traceparent` (and `tracestate`), as an MCP
/// request carries them in `_meta`, or a gRPC or HTTP request in its headers.
pub fn continue_from_pairs(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    let parent = TraceContextPropagator::new().extract(&Pairs([("traceparent", Some(traceparent)), ("tracestate", tracestate)]));
    use opentelemetry::trace::TraceContextExt;
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// `"traceparent"` and `"tracestate"` of the current span, as `_meta` entries (empty when no
/// trace is being recorded).
pub fn current_meta() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    let context = tracing::Span::current().context();
    use opentelemetry::trace::TraceContextExt;
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
    }
    carrier
}
