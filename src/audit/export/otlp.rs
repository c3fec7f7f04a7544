//! The audit trail as OpenTelemetry logs (OTLP/gRPC, the logs service a collector serves): one
//! log record per audit record, its body the exported JSON, its attributes the GenAI and MCP
//! names (`gen_ai.operation.name`, `gen_ai.tool.name`, `mcp.method.name`, `error.type`) beside
//! toolhost's own (`toolhost.audit.*`, the chain's hashes among them).

use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{ExportError, Row};
use crate::audit::format;
use crate::telemetry::mcp;

/// The log records' event name and instrumentation scope.
const EVENT_NAME: &str = "toolhost.audit";

/// A client of the collector at `endpoint` (`http://host:port`).
pub(super) async fn connect(endpoint: &str) -> Result<LogsServiceClient<tonic::transport::Channel>, ExportError> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(ExportError::Endpoint)?
        .connect_timeout(Duration::from_secs(5))
        .timeout(super::EXCHANGE_TIMEOUT)
        .connect()
        .await
        .map_err(|error| ExportError::Unreachable(crate::upstream::web::error_chain(&error)))?;
    Ok(LogsServiceClient::new(channel))
}

/// Sends one batch; records the collector rejected are said (the collector keeps no others).
pub(super) async fn export(
    client: &mut LogsServiceClient<tonic::transport::Channel>,
    request: ExportLogsServiceRequest,
) -> Result<(), ExportError> {
    let response = client.export(request).await.map_err(|status| ExportError::Rejected(Box::new(status)))?;
    if let Some(partial) = response.into_inner().partial_success
        && partial.rejected_log_records > 0
    {
        tracing::error!(rejected = partial.rejected_log_records, reason = %partial.error_message, "the collector rejected audit records");
    }
    Ok(())
}

fn text(value: impl Into<String>) -> Option<AnyValue> {
    Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) })
}

fn attribute(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue { key: key.to_owned(), value: text(value), ..KeyValue::default() }
}

fn number(key: &str, value: i64) -> KeyValue {
    KeyValue { key: key.to_owned(), value: Some(AnyValue { value: Some(any_value::Value::IntValue(value)) }), ..KeyValue::default() }
}

/// One batch as one export request: this host as the resource, one scope, a log record each.
pub(super) fn request(rows: &[Row]) -> ExportLogsServiceRequest {
    let observed = u64::try_from(crate::catalog::record::now_ms()).unwrap_or(0).saturating_mul(1_000_000);
    let log_records = rows.iter().map(|row| log_record(row, observed)).collect();
    let mut resource = vec![attribute("service.name", "toolhost"), attribute("service.version", env!("CARGO_PKG_VERSION"))];
    resource.extend(super::hostname().map(|name| attribute("host.name", name)));
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource { attributes: resource, ..Resource::default() }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: EVENT_NAME.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                log_records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

fn log_record((id, record, prev_hash, hash): &Row, observed: u64) -> LogRecord {
    let line = format::record(*id, record, prev_hash.as_deref(), hash.as_deref());
    let disposition = format::disposition(&record.outcome);
    let event_type = format::event_type(&record.outcome);
    let (severity, severity_text) = match disposition {
        "allowed" | "deferred" => (SeverityNumber::Info, "INFO"),
        _ => (SeverityNumber::Warn, "WARN"),
    };
    let mut attributes = vec![
        number("toolhost.audit.record_id", *id),
        attribute("toolhost.audit.event_type", event_type),
        attribute("toolhost.audit.outcome", disposition),
        attribute("toolhost.audit.result", record.outcome.clone()),
        attribute("toolhost.agent", &*record.agent),
        attribute("toolhost.server", record.server.clone()),
        attribute("toolhost.audit.event_hash", hash.clone().unwrap_or_default()),
        attribute("toolhost.audit.previous_hash", prev_hash.clone().unwrap_or_default()),
    ];
    if event_type == "tool_call" {
        attributes.push(attribute(mcp::METHOD_NAME, "tools/call"));
        attributes.push(attribute(mcp::OPERATION_NAME, mcp::EXECUTE_TOOL));
        if !record.tool.is_empty() {
            attributes.push(attribute(mcp::TOOL_NAME, record.tool.clone()));
        }
        if disposition != "allowed" {
            attributes.push(attribute(mcp::ERROR_TYPE, record.outcome.split(':').next().unwrap_or_default()));
        }
    }
    LogRecord {
        time_unix_nano: u64::try_from(record.at_ms).unwrap_or(0).saturating_mul(1_000_000),
        observed_time_unix_nano: observed,
        severity_number: severity as i32,
        severity_text: severity_text.to_owned(),
        body: text(line.to_string()),
        attributes,
        event_name: EVENT_NAME.to_owned(),
        ..LogRecord::default()
    }
}
