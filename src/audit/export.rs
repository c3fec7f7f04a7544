//! Sends the audit trail where security teams read it, as it is written: JSON Lines appended to
//! a file or written to a Unix stream socket (a log shipper, a SIEM's agent), or syslog
//! messages (RFC 5424, octet-counted over TCP as RFC 6587 says) carrying the same JSON. Each sink follows
//! the stored trail from its own cursor (kept in the store): the store is the buffer, so a slow
//! or dead sink never slows a call, nothing is lost while it is down, and a restart resumes where
//! it stopped. Records retention removed before a sink got them are counted and said, never
//! silently skipped. Every line keeps the chain fields (`prev_hash`, `hash`).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::catalog::record::AuditRecord;
use crate::catalog::store::Store;
use crate::config::AuditExport;
use crate::telemetry::throttle::Throttle;

/// Records sent in one write.
const BATCH: u32 = 500;
/// How often a sink that is caught up looks for new records.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between tries of a sink that fails.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Follows the trail into `sink` until `cancel`.
pub async fn run(store: Store, sink: AuditExport, cancel: CancellationToken) {
    let cursor_key = format!("audit.export.{}", sink.name());
    let failures = Throttle::new(1);
    let mut connection: Option<Connection> = None;
    let mut backoff = FOLLOW_EVERY;
    loop {
        let wait = match send_some(&store, &sink, &cursor_key, &mut connection).await {
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

/// Sends the next batch after the sink's cursor and moves the cursor past it; how many.
/// A sink's open stream.
enum Connection {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

impl Connection {
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Connection::Unix(stream) => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
            Connection::Tcp(stream) => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
        }
    }
}

async fn send_some(store: &Store, sink: &AuditExport, cursor_key: &str, connection: &mut Option<Connection>) -> Result<usize, String> {
    let cursor = store.fleet_cursor(cursor_key).await.map_err(|error| error.to_string())?;
    let rows = store.audit_chained_after(cursor, BATCH).await.map_err(|error| error.to_string())?;
    let Some((first, ..)) = rows.first() else { return Ok(0) };
    if cursor > 0 && *first > cursor + 1 {
        tracing::error!(sink = %sink.name(), lost = first - cursor - 1, "audit records were removed by retention before this sink got them");
    }
    let mut text = String::new();
    for (id, record, prev_hash, hash) in &rows {
        let json = line(*id, record, prev_hash.as_deref(), hash.as_deref()).to_string();
        match sink {
            AuditExport::Syslog(_) => {
                let message = syslog_message(*id, record.at_ms, hash.as_deref().unwrap_or("-"), &json);
                text.push_str(&format!("{} {message}", message.len()));
            }
            _ => {
                text.push_str(&json);
                text.push('\n');
            }
        }
    }
    match sink {
        AuditExport::File(path) => {
            let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await.map_err(|error| error.to_string())?;
            file.write_all(text.as_bytes()).await.map_err(|error| error.to_string())?;
            file.sync_data().await.map_err(|error| error.to_string())?;
        }
        AuditExport::Unix(_) | AuditExport::Syslog(_) => {
            let stream = match connection {
                Some(stream) => stream,
                None => connection.insert(connect(sink).await.map_err(|error| error.to_string())?),
            };
            stream.send(text.as_bytes()).await.map_err(|error| error.to_string())?;
        }
    }
    let last = rows.last().map_or(cursor, |(id, ..)| *id);
    store.set_fleet_cursor(cursor_key, last).await.map_err(|error| error.to_string())?;
    Ok(rows.len())
}

async fn connect(sink: &AuditExport) -> std::io::Result<Connection> {
    match sink {
        AuditExport::Unix(path) => Ok(Connection::Unix(tokio::net::UnixStream::connect(path).await?)),
        AuditExport::Syslog(addr) => Ok(Connection::Tcp(tokio::net::TcpStream::connect(addr.as_str()).await?)),
        AuditExport::File(_) => Err(std::io::Error::other("a file is not connected to")),
    }
}

/// One record as an RFC 5424 message: facility authpriv (10), severity informational (6), the
/// record's id and hash as structured data, the JSON line as the message.
fn syslog_message(id: i64, at_ms: i64, hash: &str, json: &str) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|name| name.trim().to_owned()).filter(|name| !name.is_empty());
    format!(
        "<86>1 {} {} toolhost {} audit [toolhost@32473 id=\"{id}\" hash=\"{hash}\"] {json}",
        humantime::format_rfc3339_millis(at),
        host.as_deref().unwrap_or("-"),
        std::process::id()
    )
}

/// One record as a line: its fields, its id and time, its chain hashes.
fn line(id: i64, record: &AuditRecord, prev_hash: Option<&str>, hash: Option<&str>) -> serde_json::Value {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(record.at_ms).unwrap_or(0));
    serde_json::json!({
        "id": id,
        "time": humantime::format_rfc3339_millis(at).to_string(),
        "at_ms": record.at_ms,
        "agent": &*record.agent,
        "caller": record.caller,
        "transport": record.transport,
        "qualified_name": record.qualified_name,
        "server": record.server,
        "tool": record.tool,
        "generation": record.generation,
        "definition_hash": record.definition_hash,
        "outcome": record.outcome,
        "duration_us": record.duration_us,
        "arguments": record.arguments,
        "prev_hash": prev_hash,
        "hash": hash,
    })
}
