//! Sends the audit trail where security teams read it, as it is written: JSON Lines appended to
//! a file or written to a Unix stream socket (a log shipper, a SIEM's agent); syslog messages
//! (RFC 5424, octet-counted over TCP as RFC 6587 says, or over TLS as RFC 5425 does) carrying
//! the same JSON; or OpenTelemetry logs to a collector (OTLP/gRPC), with the GenAI and MCP
//! attribute names. Each record is the shape `format` gives it, chain fields kept.
//!
//! Each sink follows the stored trail from its own cursor (kept in the store): the store is the
//! buffer, bounded by the trail's retention, so a slow or dead sink never slows a call, nothing
//! is lost while it is down, and a restart resumes where it stopped. Records retention removed
//! before a sink got them are counted (`toolhost.audit.export.lost`) and said, never silently
//! skipped.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::catalog::record::AuditRecord;
use crate::config::AuditExport;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::throttle::Throttle;

mod otlp;

/// Records sent in one write.
const BATCH: u32 = 500;
/// How often a sink that is caught up looks for new records.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between tries of a sink that fails.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The longest a connection, a write or an export may take before the sink counts as failed.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a batch did not reach its sink (it waits in the store for the next try).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("no progress within {:?}", EXCHANGE_TIMEOUT)]
    Stalled,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Tls(#[from] crate::tls_client::TlsError),
    #[error("{0:?} is not a name TLS can check")]
    NotATlsName(String),
    #[error("{0}")]
    Endpoint(tonic::transport::Error),
    /// The collector cannot be reached: the error and its causes.
    #[error("{0}")]
    Unreachable(String),
    #[error("the collector answered {:?}: {}", .0.code(), .0.message())]
    Rejected(Box<tonic::Status>),
    /// A sink and a payload or connection of another kind (a bug, said rather than panicked).
    #[error("{0}")]
    Mismatch(&'static str),
}

/// Follows the trail into `sink` until `cancel`, counting what it sent and what it lost.
pub async fn run(store: Store, sink: AuditExport, metrics: Metrics, cancel: CancellationToken) {
    let cursor_key = format!("audit.export.{}", sink.name());
    let failures = Throttle::new(1);
    let mut connection: Option<Connection> = None;
    let mut backoff = FOLLOW_EVERY;
    loop {
        let sent = tokio::select! {
            () = cancel.cancelled() => return,
            sent = tokio::time::timeout(EXCHANGE_TIMEOUT, send_some(&store, &sink, &cursor_key, &mut connection, &metrics)) => {
                sent.unwrap_or(Err(ExportError::Stalled))
            }
        };
        let wait = match sent {
            Ok(0) => FOLLOW_EVERY,
            Ok(_) => {
                backoff = FOLLOW_EVERY;
                Duration::ZERO
            }
            Err(problem) => {
                connection = None;
                if let Some(suppressed) = failures.admit() {
                    tracing::warn!(sink = %sink.name(), %problem, suppressed, "cannot export audit records; they wait in the store");
                }
                backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
                backoff
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// A sink's open stream or client.
enum Connection {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
    Otlp(LogsServiceClient<tonic::transport::Channel>),
}

/// What one batch becomes on the wire.
enum Payload {
    Bytes(Vec<u8>),
    Logs(ExportLogsServiceRequest),
}

impl Connection {
    async fn send(&mut self, payload: Payload) -> Result<(), ExportError> {
        match (self, payload) {
            (Connection::Unix(stream), Payload::Bytes(bytes)) => {
                stream.write_all(&bytes).await?;
                Ok(stream.flush().await?)
            }
            (Connection::Tcp(stream), Payload::Bytes(bytes)) => {
                stream.write_all(&bytes).await?;
                Ok(stream.flush().await?)
            }
            (Connection::Tls(stream), Payload::Bytes(bytes)) => {
                stream.write_all(&bytes).await?;
                Ok(stream.flush().await?)
            }
            (Connection::Otlp(client), Payload::Logs(request)) => otlp::export(client, request).await,
            _ => Err(ExportError::Mismatch("a sink was given a payload of another kind")),
        }
    }
}

/// Sends the next batch after the sink's cursor and moves the cursor past it; how many.
async fn send_some(
    store: &Store,
    sink: &AuditExport,
    cursor_key: &str,
    connection: &mut Option<Connection>,
    metrics: &Metrics,
) -> Result<usize, ExportError> {
    let cursor = store.fleet().cursor(cursor_key).await?;
    let rows = store.audit().chained_after(cursor, BATCH).await?;
    let Some((first, ..)) = rows.first() else { return Ok(0) };
    let lost = if cursor > 0 { first.saturating_sub(cursor.saturating_add(1)) } else { 0 };
    if lost > 0 {
        tracing::error!(sink = %sink.name(), lost, "audit records were removed by retention before this sink got them");
    }
    let payload = encode(sink, &rows);
    match sink {
        AuditExport::File(path) => {
            let Payload::Bytes(bytes) = payload else { return Err(ExportError::Mismatch("a file takes lines")) };
            let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await?;
            file.write_all(&bytes).await?;
            file.sync_data().await?;
        }
        AuditExport::Unix(_) | AuditExport::Syslog { .. } | AuditExport::Otlp(_) => {
            let stream = match connection {
                Some(stream) => stream,
                None => connection.insert(connect(sink).await?),
            };
            stream.send(payload).await?;
        }
    }
    let last = rows.last().map_or(cursor, |(id, ..)| *id);
    store.fleet().set_cursor(cursor_key, last).await?;
    metrics.record_audit_export(&sink.name(), u64::try_from(rows.len()).unwrap_or(u64::MAX), u64::try_from(lost).unwrap_or(0));
    Ok(rows.len())
}

type Row = (i64, AuditRecord, Option<String>, Option<String>);

/// A batch as the sink takes it.
fn encode(sink: &AuditExport, rows: &[Row]) -> Payload {
    if let AuditExport::Otlp(_) = sink {
        return Payload::Logs(otlp::request(rows));
    }
    let mut text = String::new();
    for (id, record, prev_hash, hash) in rows {
        let json = super::format::record(*id, record, prev_hash.as_deref(), hash.as_deref()).to_string();
        match sink {
            AuditExport::Syslog { .. } => {
                let message = syslog_message(*id, record.at_ms, hash.as_deref().unwrap_or("-"), &json);
                text.push_str(&format!("{} {message}", message.len()));
            }
            _ => {
                text.push_str(&json);
                text.push('\n');
            }
        }
    }
    Payload::Bytes(text.into_bytes())
}

async fn connect(sink: &AuditExport) -> Result<Connection, ExportError> {
    match sink {
        AuditExport::Unix(path) => Ok(Connection::Unix(tokio::net::UnixStream::connect(path).await?)),
        AuditExport::Syslog { addr, tls: None } => Ok(Connection::Tcp(tokio::net::TcpStream::connect(addr.as_str()).await?)),
        AuditExport::Syslog { addr, tls: Some(tls) } => {
            let config = crate::tls_client::client_config(tls.ca.as_deref())?;
            let host = addr.rsplit_once(':').map_or(addr.as_str(), |(host, _)| host).trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|_| ExportError::NotATlsName(host.to_owned()))?;
            let stream = tokio::net::TcpStream::connect(addr.as_str()).await?;
            let stream = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, stream).await?;
            Ok(Connection::Tls(Box::new(stream)))
        }
        AuditExport::Otlp(endpoint) => Ok(Connection::Otlp(otlp::connect(endpoint).await?)),
        AuditExport::File(_) => Err(ExportError::Mismatch("a file is not connected to")),
    }
}

/// One record as an RFC 5424 message: facility authpriv (10), severity informational (6), the
/// record's id and hash as structured data, the JSON line as the message.
fn syslog_message(id: i64, at_ms: i64, hash: &str, json: &str) -> String {
    format!(
        "<86>1 {} {} toolhost {} audit [toolhost@32473 id=\"{id}\" hash=\"{hash}\"] {json}",
        super::format::rfc3339(at_ms),
        hostname().unwrap_or("-"),
        std::process::id()
    )
}

/// This host's name, read once.
fn hostname() -> Option<&'static str> {
    static NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|name| name.trim().to_owned()).filter(|name| !name.is_empty())
    })
    .as_deref()
}
