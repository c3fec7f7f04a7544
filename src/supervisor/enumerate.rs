//! One complete enumeration pass: `tools/list` from no cursor, following `nextCursor` to the
//! end, bounded in pages, tools, bytes and time, and abandoned the moment the server announces
//! a change, so that pages of two tool sets are never mixed.

use std::collections::HashSet;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::catalog::model::{EntryError, Listing, ToolDef, define_entries};
use crate::config::EnumerationLimits;
use crate::mcp::jsonrpc::code::INVALID_PARAMS;
use crate::mcp::lifecycle::METHOD_TOOLS_LIST;
use crate::mcp::tools::{list_params, parse_list_page, peek_page};
use crate::upstream::{SessionHandle, UpstreamError};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// One page's entries, each defined or with the reason it was skipped.
type DefinedPage = Vec<Result<ToolDef, EntryError>>;

/// How often a pass that hit an invalid cursor may start over before it fails.
const INVALID_CURSOR_RESTARTS: u32 = 2;

/// Counters of one pass, for the enumeration record.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PassStats {
    pub(crate) pages: u32,
    pub(crate) tools: u32,
    pub(crate) bytes: u64,
    /// The smallest `ttlMs` of the pages, when the server sent any.
    pub(crate) ttl_ms: Option<u64>,
    /// A page said `cacheScope: "private"`.
    pub(crate) private: bool,
}

/// When a pass started: the wall-clock time for its record, the monotonic one for its duration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassClock {
    pub(crate) started_at_ms: i64,
    started: Instant,
}

impl PassClock {
    pub(crate) fn start() -> PassClock {
        PassClock { started_at_ms: crate::catalog::record::now_ms(), started: Instant::now() }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Why a pass produced no listing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PassEnd {
    /// A list_changed arrived while the pass ran: its pages may mix two tool sets.
    Superseded,
    /// An error or a bound cut the pass short.
    Failed(String),
}

/// What the pass needs to know about its server.
pub(crate) struct PassSettings<'a> {
    pub(crate) limits: &'a EnumerationLimits,
    pub(crate) request_timeout: Duration,
    pub(crate) enumeration_timeout: Duration,
}

/// Runs one pass. `changes` is marked seen at the start; any change after that supersedes it.
pub(crate) async fn enumerate(
    session: &SessionHandle,
    settings: &PassSettings<'_>,
    changes: &mut watch::Receiver<u64>,
    stats: &mut PassStats,
) -> Result<Listing, PassEnd> {
    changes.borrow_and_update();
    let deadline = crate::deadline::after(settings.enumeration_timeout);
    let limits = settings.limits;
    let mut cursor: Option<String> = None;
    // Cursors stay opaque: they are compared for equality only, to stop a server that loops.
    let mut seen_cursors: HashSet<String> = HashSet::new();
    // Each page is parsed, canonicalised and hashed on the blocking pool while the next page is
    // fetched: on two cores the server's work and toolhost's overlap.
    let mut pages: Vec<tokio::task::JoinHandle<Result<DefinedPage, crate::mcp::tools::ResultError>>> = Vec::new();
    let mut restarts = 0;
    loop {
        if stats.pages >= limits.max_pages {
            return Err(PassEnd::Failed(format!("the listing has more than {} pages (max_pages)", limits.max_pages)));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(PassEnd::Failed(format!("the listing took longer than {:?} (enumeration_timeout)", settings.enumeration_timeout)));
        }
        let params = list_params(cursor.as_deref());
        let page_number = stats.pages + 1;
        let mut operation = session.operation(METHOD_TOOLS_LIST, None);
        // Which page, never the cursor's value (opaque, and the server's to change).
        operation.span().set_attribute("toolhost.page", i64::from(page_number));
        let request = session
            .request(METHOD_TOOLS_LIST, params.as_deref(), settings.request_timeout.min(remaining), true)
            .instrument(operation.span().clone());
        let result = tokio::select! {
            biased;
            Ok(()) = changes.changed() => {
                operation.failed("superseded", "a newer list_changed superseded this listing");
                return Err(PassEnd::Superseded);
            }
            result = request => result,
        };
        crate::upstream::session::judge(&mut operation, &result);
        drop(operation);
        let result = match result {
            Ok(result) => result,
            Err(UpstreamError::Rpc(error)) if cursor.is_some() && error.code == INVALID_PARAMS && restarts < INVALID_CURSOR_RESTARTS => {
                // The server no longer accepts its own cursor: start over from the first page.
                tracing::info!(page = page_number, "the server rejected a cursor; restarting the listing from the first page");
                restarts += 1;
                cursor = None;
                seen_cursors.clear();
                pages.clear();
                continue;
            }
            Err(error) => return Err(PassEnd::Failed(crate::secrets::redact_owned(format!("tools/list page {page_number}: {error}")))),
        };
        stats.pages += 1;
        stats.bytes += result.get().len() as u64;
        if stats.bytes > limits.max_bytes {
            return Err(PassEnd::Failed(format!("the listing is larger than {} bytes (max_listing_bytes)", limits.max_bytes)));
        }
        let peek = peek_page(&result).map_err(|err| {
            PassEnd::Failed(crate::secrets::redact_owned(format!("tools/list page {page_number} is not a tools/list result: {err}")))
        })?;
        if let Some(ttl) = peek.ttl_ms {
            stats.ttl_ms = Some(stats.ttl_ms.map_or(ttl, |known| known.min(ttl)));
        }
        stats.private |= peek.private;
        let next_cursor = peek.next_cursor;
        pages.push(tokio::task::spawn_blocking(move || parse_list_page(&result).map(|page| define_entries(page.tools))));
        match next_cursor {
            None => break,
            Some(next) => {
                if !seen_cursors.insert(next.clone()) {
                    return Err(PassEnd::Failed(format!("the server repeated a cursor after page {page_number} (a pagination loop)")));
                }
                tracing::debug!(page = page_number, "following nextCursor");
                cursor = Some(next);
            }
        }
    }
    let mut entries = Vec::new();
    for (idx, page) in pages.into_iter().enumerate() {
        let defined = page.await.map_err(|err| PassEnd::Failed(format!("processing tools/list page {}: {err}", idx + 1)))?;
        let defined = defined.map_err(|err| {
            PassEnd::Failed(crate::secrets::redact_owned(format!("tools/list page {} is not a tools/list result: {err}", idx + 1)))
        })?;
        entries.extend(defined);
        stats.tools = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        if stats.tools > limits.max_tools {
            return Err(PassEnd::Failed(format!("the listing has more than {} tools (max_tools)", limits.max_tools)));
        }
    }
    // A change announced together with the last page also makes the pass suspect.
    if changes.has_changed().unwrap_or(false) {
        return Err(PassEnd::Superseded);
    }
    Ok(Listing::from_entries(entries))
}
