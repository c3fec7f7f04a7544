//! A minimal OTLP/gRPC collector on a loopback port: it keeps every span, every metric data
//! point and every log record a daemon exports, with their attributes as text, for tests to
//! read after the daemon's final flush.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{MetricsService, MetricsServiceServer};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric;

/// One exported span.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    /// OTLP's span kind: 2 server, 3 client, 1 internal.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 2 is an error.
    pub status: i32,
    pub status_message: String,
    pub service: String,
}

pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;
pub const ERROR: i32 = 2;

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// One exported metric data point.
#[derive(Debug, Clone)]
pub struct Point {
    pub metric: String,
    pub unit: String,
    pub attributes: BTreeMap<String, String>,
}

/// One exported log record.
#[derive(Debug, Clone)]
pub struct Log {
    pub event_name: String,
    pub severity_text: String,
    pub time_unix_nano: u64,
    pub body: String,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
}

#[derive(Default, Clone)]
pub struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    points: Arc<Mutex<Vec<Point>>>,
    logs: Arc<Mutex<Vec<Log>>>,
}

impl Collector {
    /// Starts the collector; the endpoint is for `OTEL_EXPORTER_OTLP_ENDPOINT`. It serves until
    /// the returned task is aborted.
    pub async fn start() -> (Collector, String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let collector = Collector::default();
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .add_service(MetricsServiceServer::new(collector.clone()))
            .add_service(LogsServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        let task = tokio::spawn(async move {
            let _ = server.await;
        });
        (collector, endpoint, task)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    pub fn logs(&self) -> Vec<Log> {
        self.logs.lock().unwrap().clone()
    }

    pub fn points(&self) -> Vec<Point> {
        self.points.lock().unwrap().clone()
    }

    /// The data points of metric `name`.
    pub fn points_of(&self, name: &str) -> Vec<Point> {
        self.points().into_iter().filter(|point| point.metric == name).collect()
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::IntValue(number)) => number.to_string(),
        Some(any_value::Value::BoolValue(flag)) => flag.to_string(),
        Some(any_value::Value::DoubleValue(number)) => number.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(pairs: &[KeyValue]) -> BTreeMap<String, String> {
    pairs.iter().map(|pair| (pair.key.clone(), text(pair.value.as_ref()))).collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource_spans in request.into_inner().resource_spans {
            let resource = resource_spans.resource.as_ref().map(|resource| attributes(&resource.attributes)).unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    let (status, status_message) = span.status.as_ref().map(|s| (s.code, s.message.clone())).unwrap_or_default();
                    self.spans.lock().unwrap().push(Span {
                        name: span.name,
                        kind: span.kind,
                        attributes: attributes(&span.attributes),
                        status,
                        status_message,
                        service: service.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        for resource in request.into_inner().resource_metrics {
            for scope in resource.scope_metrics {
                for metric in scope.metrics {
                    let sets: Vec<BTreeMap<String, String>> = match &metric.data {
                        Some(metric::Data::Histogram(histogram)) => {
                            histogram.data_points.iter().map(|p| attributes(&p.attributes)).collect()
                        }
                        Some(metric::Data::Sum(sum)) => sum.data_points.iter().map(|p| attributes(&p.attributes)).collect(),
                        Some(metric::Data::Gauge(gauge)) => gauge.data_points.iter().map(|p| attributes(&p.attributes)).collect(),
                        _ => vec![BTreeMap::new()],
                    };
                    let mut points = self.points.lock().unwrap();
                    for set in sets {
                        points.push(Point { metric: metric.name.clone(), unit: metric.unit.clone(), attributes: set });
                    }
                }
            }
        }
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        for resource_logs in request.into_inner().resource_logs {
            let resource = resource_logs.resource.as_ref().map(|resource| attributes(&resource.attributes)).unwrap_or_default();
            for scope in resource_logs.scope_logs {
                for record in scope.log_records {
                    self.logs.lock().unwrap().push(Log {
                        event_name: record.event_name,
                        severity_text: record.severity_text,
                        time_unix_nano: record.time_unix_nano,
                        body: text(record.body.as_ref()),
                        attributes: attributes(&record.attributes),
                        resource: resource.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(Default::default()))
    }
}
