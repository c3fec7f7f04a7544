//! The spans of a server's life, so that a trace shows the chain from a notification to the
//! published generation: `notifications/tools/list_changed SERVER` (received, coalesced) →
//! `toolhost.enumerate SERVER` per pass → a `tools/list` client span per page (the MCP
//! conventions, [`crate::telemetry::mcp`]) → `toolhost.commit SERVER` (diff, commit, watchers told). Refreshes are trace roots linked to their session's span (a
//! session can last for days) and, for a stale-tool refresh, to the call that triggered it.

use opentelemetry::trace::SpanContext;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::catalog::record::EnumerationReason;
use crate::mcp::lifecycle::{METHOD_TOOLS_LIST_CHANGED, ServerHello};
use crate::supervisor::enumerate::PassStats;

/// One span for a session's whole life.
pub(crate) fn session(server: &str, hello: &ServerHello, transport: &crate::config::Transport) -> Span {
    let span =
        tracing::info_span!(parent: None, "toolhost.session", otel.name = %format!("toolhost.session {server}"), otel.kind = "internal");
    span.set_attribute("toolhost.server", server.to_owned());
    span.set_attribute("mcp.protocol.version", hello.protocol_version.clone());
    span.set_attribute("network.transport", crate::telemetry::network_transport(transport.label()));
    span
}

/// The root span of one refresh: from the trigger to the published generation.
pub(crate) fn refresh(server: &str, reason: EnumerationReason, session: Option<SpanContext>, cause: Option<SpanContext>) -> Span {
    let trigger = match reason {
        EnumerationReason::ListChanged => METHOD_TOOLS_LIST_CHANGED,
        _ => "toolhost.refresh",
    };
    let span = tracing::info_span!(parent: None, "toolhost.refresh", otel.name = %format!("{trigger} {server}"), otel.kind = "internal");
    span.set_attribute("toolhost.server", server.to_owned());
    span.set_attribute("toolhost.enumeration.reason", reason.as_str());
    if reason == EnumerationReason::ListChanged {
        span.set_attribute("mcp.method.name", METHOD_TOOLS_LIST_CHANGED);
    }
    if let Some(session) = session {
        span.add_link_with_attributes(session, vec![opentelemetry::KeyValue::new("toolhost.link", "session")]);
    }
    if let Some(cause) = cause {
        span.add_link_with_attributes(cause, vec![opentelemetry::KeyValue::new("toolhost.link", "call that found the tool missing")]);
    }
    span
}

/// One enumeration pass, a child of the current (refresh) span.
pub(crate) fn pass(server: &str, reason: EnumerationReason) -> Span {
    let span = tracing::info_span!("toolhost.enumerate", otel.name = %format!("toolhost.enumerate {server}"), otel.kind = "internal");
    span.set_attribute("toolhost.server", server.to_owned());
    span.set_attribute("toolhost.enumeration.reason", reason.as_str());
    span
}

pub(crate) fn finish_pass(span: &Span, outcome: &'static str, stats: &PassStats, error: Option<&str>) {
    span.set_attribute("toolhost.enumeration.outcome", outcome);
    span.set_attribute("toolhost.enumeration.pages", i64::from(stats.pages));
    span.set_attribute("toolhost.enumeration.tools", i64::from(stats.tools));
    span.set_attribute("toolhost.enumeration.bytes", i64::try_from(stats.bytes).unwrap_or(i64::MAX));
    if let Some(error) = error {
        span.set_attribute("error.type", if outcome == "superseded" { "superseded" } else { "enumeration_failed" });
        span.set_attribute("toolhost.error", error.to_owned());
    }
}

/// The diff and commit of a complete listing.
pub(crate) fn commit(server: &str) -> Span {
    let span = tracing::info_span!("toolhost.commit", otel.name = %format!("toolhost.commit {server}"), otel.kind = "internal");
    span.set_attribute("toolhost.server", server.to_owned());
    span
}
