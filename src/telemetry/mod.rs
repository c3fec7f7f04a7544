//! Logs, traces and metrics. Logs always go to stderr (text, or JSON lines); traces and metrics
//! go to an OpenTelemetry collector over OTLP/gRPC when one is configured (`[telemetry]
//! otlp_endpoint` or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`), and nowhere otherwise.
//!
//! Export never blocks the daemon: spans go through the SDK's batch processor (a bounded queue on
//! its own thread that drops when full) and metrics through a periodic reader, both with an
//! export timeout. A collector that is down costs a failed export every interval, nothing more.

pub mod mcp;
pub mod metrics;
pub mod propagation;
pub mod throttle;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::TelemetryConfig;

/// The instrumentation scope of every span and instrument toolhost makes.
pub const SCOPE: &str = "toolhost";

/// Whether span attributes and metric data points are worth building: [`init`] clears them when
/// nothing is exported, so that a call pays for no attribute nobody reads. Set until then (a
/// test that installs its own exporter gets everything).
static TRACES_EXPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
static METRICS_EXPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub fn traces_exported() -> bool {
    TRACES_EXPORTED.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn metrics_exported() -> bool {
    METRICS_EXPORTED.load(std::sync::atomic::Ordering::Relaxed)
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot build the OTLP {signal} exporter: {detail}")]
    Exporter { signal: &'static str, detail: String },
    #[error("cannot install the log subscriber: {0}")]
    Subscriber(String),
}

/// Log line format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Owns the exporters; [`Telemetry::shutdown`] flushes them.
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
}

/// Installs the global subscriber (logs, plus traces when enabled) and the global meter provider.
///
/// # Errors
/// [`TelemetryError`] when an exporter cannot be built or a subscriber is already installed.
pub fn init(config: &TelemetryConfig, format: LogFormat) -> Result<Telemetry, TelemetryError> {
    let enabled = export_enabled(config);
    let resource = resource(config);
    let tracer_provider = if enabled && config.traces { Some(tracer_provider(config, resource.clone())?) } else { None };
    let meter_provider = if enabled && config.metrics { Some(meter_provider(config, resource)?) } else { None };
    TRACES_EXPORTED.store(tracer_provider.is_some(), std::sync::atomic::Ordering::Relaxed);
    METRICS_EXPORTED.store(meter_provider.is_some(), std::sync::atomic::Ordering::Relaxed);
    if let Some(provider) = &meter_provider {
        opentelemetry::global::set_meter_provider(provider.clone());
    }
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).boxed(),
        // Colour codes only on a terminal: journald stores them verbatim otherwise.
        LogFormat::Text => {
            use std::io::IsTerminal;
            tracing_subscriber::fmt::layer().with_ansi(std::io::stderr().is_terminal()).with_writer(std::io::stderr).boxed()
        }
    };
    let traces = tracer_provider.as_ref().map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer(SCOPE)));
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|err| TelemetryError::Subscriber(err.to_string()))?;
    if enabled {
        tracing::info!(traces = config.traces, metrics = config.metrics, "exporting telemetry over OTLP");
    }
    Ok(Telemetry { tracer_provider, meter_provider })
}

impl Telemetry {
    /// Flushes and stops the exporters (bounded by their export timeout).
    pub fn shutdown(self) {
        if let Some(provider) = self.tracer_provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "flushing spans failed");
        }
        if let Some(provider) = self.meter_provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "flushing metrics failed");
        }
    }
}

/// Export is on when an endpoint is configured here or in the standard variables, unless
/// `OTEL_SDK_DISABLED=true`.
fn export_enabled(config: &TelemetryConfig) -> bool {
    if std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        return false;
    }
    config.otlp_endpoint.is_some()
        || ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"]
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// `service.name` from the configuration, else `OTEL_SERVICE_NAME`, else "toolhost";
/// `OTEL_RESOURCE_ATTRIBUTES` is read by the SDK's own detector.
fn resource(config: &TelemetryConfig) -> Resource {
    let builder = Resource::builder();
    match (&config.service_name, std::env::var_os("OTEL_SERVICE_NAME")) {
        (Some(name), _) => builder.with_service_name(name.clone()).build(),
        (None, Some(_)) => builder.build(),
        (None, None) => builder.with_service_name(SCOPE).build(),
    }
}

fn tracer_provider(config: &TelemetryConfig, resource: Resource) -> Result<SdkTracerProvider, TelemetryError> {
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic().with_timeout(config.export_timeout);
    if let Some(endpoint) = &config.otlp_endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let exporter = builder.build().map_err(|err| TelemetryError::Exporter { signal: "trace", detail: err.to_string() })?;
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

fn meter_provider(config: &TelemetryConfig, resource: Resource) -> Result<SdkMeterProvider, TelemetryError> {
    let mut builder = opentelemetry_otlp::MetricExporter::builder().with_tonic().with_timeout(config.export_timeout);
    if let Some(endpoint) = &config.otlp_endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let exporter = builder.build().map_err(|err| TelemetryError::Exporter { signal: "metrics", detail: err.to_string() })?;
    let reader = PeriodicReader::builder(exporter).with_interval(config.metrics_interval).build();
    Ok(SdkMeterProvider::builder().with_reader(reader).with_resource(resource).build())
}

/// `network.transport` as the semantic conventions name it for a server whose transport is
/// `label` ([`crate::config::Transport::label`]): a stdio server is a pipe, a Streamable HTTP
/// server is reached over TCP.
pub fn network_transport(label: &str) -> &'static str {
    if label == "http" { "tcp" } else { "pipe" }
}

/// The OpenTelemetry context of a tracing span, if a trace is being recorded for it.
pub fn span_context(span: &tracing::Span) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = span.context().span().span_context().clone();
    context.is_valid().then_some(context)
}
