//! Sends the audit trail where security teams read it, as it is written: JSON Lines appended to
//! a file, or written to a Unix stream socket (a log shipper, a SIEM's agent). Each sink follows
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
    let mut connection: Option<tokio::net::UnixStream> = None;
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
async fn send_some(
    store: &Store,
    sink: &AuditExport,
    cursor_key: &str,
    connection: &mut Option<tokio::net::UnixStream>,
) -> Result<usize, String> {
    let cursor = store.fleet_cursor(cursor_key).await.map_err(|error| error.to_string())?;
    let rows = store.audit_chained_after(cursor, BATCH).await.map_err(|error| error.to_string())?;
    let Some((first, ..)) = rows.first() else { return Ok(0) };
    if cursor > 0 && *first > cursor + 1 {
        tracing::error!(sink = %sink.name(), lost = first - cursor - 1, "audit records were removed by retention before this sink got them");
    }
    let mut text = String::new();
    for (id, record, prev_hash, hash) in &rows {
        text.push_str(&line(*id, record, prev_hash.as_deref(), hash.as_deref()).to_string());
        text.push('\n');
    }
    match sink {
        AuditExport::File(path) => {
            let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await.map_err(|error| error.to_string())?;
            file.write_all(text.as_bytes()).await.map_err(|error| error.to_string())?;
            file.sync_data().await.map_err(|error| error.to_string())?;
        }
        AuditExport::Unix(path) => {
            let stream = match connection {
                Some(stream) => stream,
                None => connection.insert(tokio::net::UnixStream::connect(path).await.map_err(|error| error.to_string())?),
            };
            stream.write_all(text.as_bytes()).await.map_err(|error| error.to_string())?;
            stream.flush().await.map_err(|error| error.to_string())?;
        }
    }
    let last = rows.last().map_or(cursor, |(id, ..)| *id);
    store.set_fleet_cursor(cursor_key, last).await.map_err(|error| error.to_string())?;
    Ok(rows.len())
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
