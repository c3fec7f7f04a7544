//! Change propagation through each path of the `peers` scenario: the agent calls `mutate` (the
//! server changes one tool's description and sends `notifications/tools/list_changed`), then
//! waits for the path to tell it and lists again; the time is from the mutate call's answer to
//! a listing that shows the new description. Pass-through bridges forward the notification and
//! the agent re-lists through them; toolhost re-lists itself, publishes, and then tells the agent.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use toolhost::api::pb;
use toolhost::upstream::SessionHandle;

/// Changes measured per path, 300 ms apart (each is isolated: none other in the 100 ms before).
pub(crate) const CHANGES: usize = 7;
/// How long a path has to show a change before it counts as not delivered.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(3);

/// One path's measurements: the propagation times, and the changes it never showed.
#[derive(Default)]
pub(crate) struct Propagation {
    pub(crate) times: Vec<Duration>,
    pub(crate) missed: usize,
}

impl Propagation {
    pub(crate) fn record(&mut self, took: Option<Duration>) {
        match took {
            Some(took) => self.times.push(took),
            None => self.missed += 1,
        }
    }

    /// `p50 ms (n/CHANGES)` for the table.
    pub(crate) fn cell(&mut self) -> String {
        self.times.sort();
        match self.times.get(self.times.len() / 2) {
            Some(p50) if self.missed == 0 => format!("{:.2}", p50.as_secs_f64() * 1000.0),
            Some(p50) => format!("{:.2} ({} of {CHANGES} not shown)", p50.as_secs_f64() * 1000.0, self.missed),
            None => format!("not shown ({CHANGES} of {CHANGES})"),
        }
    }
}

pub(crate) fn shows(listing: &str, revision: usize) -> bool {
    listing.contains(&format!("benchmark tool 0 r{revision}"))
}

/// The direct stdio session: its own list_changed watch, then `tools/list` on the session.
pub(crate) async fn direct(session: &SessionHandle, revision: usize) -> Option<Duration> {
    let mut changes = session.list_changed();
    changes.borrow_and_update();
    let mutate = serde_json::value::RawValue::from_string(r#"{"name":"mutate","arguments":{}}"#.to_owned()).ok()?;
    session.request("tools/call", Some(&mutate), Duration::from_secs(10), true).await.ok()?;
    let started = Instant::now();
    tokio::time::timeout(GIVE_UP, changes.changed()).await.ok()?.ok()?;
    let listing = session.request("tools/list", None, Duration::from_secs(10), true).await.ok()?;
    shows(listing.get(), revision).then(|| started.elapsed())
}

/// toolhost over gRPC: the WatchCatalog event, then ListTools of the server.
pub(crate) async fn grpc<T>(
    client: &mut pb::tool_host_client::ToolHostClient<T>,
    watch: &mut tonic::Streaming<pb::CatalogEvent>,
    revision: usize,
) -> Option<Duration>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: hyper::body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    // Events of earlier changes (made on the other paths) are not this one's.
    while tokio::time::timeout(Duration::from_millis(5), watch.message()).await.is_ok() {}
    client.call_tool(crate::scenarios::call_request("bench__mutate")).await.ok()?;
    let started = Instant::now();
    tokio::time::timeout(GIVE_UP, async {
        loop {
            let event = watch.message().await.ok()??;
            if let Some(pb::catalog_event::Event::GenerationPublished(_)) = event.event {
                return Some(());
            }
        }
    })
    .await
    .ok()??;
    let listing = client.list_tools(pb::ListToolsRequest { servers: vec!["bench".into()], ..Default::default() }).await.ok()?.into_inner();
    let text = listing.tools.iter().map(|tool| tool.description.as_str()).collect::<Vec<_>>().join("\n");
    shows(&text, revision).then(|| started.elapsed())
}

/// toolhost's MCP endpoint on the Unix socket, as an initialized 2025 session.
pub(crate) struct SocketSession {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next_id: u64,
}

impl SocketSession {
    pub(crate) async fn connect(path: &std::path::Path) -> SocketSession {
        let (read, writer) = tokio::net::UnixStream::connect(path).await.expect("the MCP socket").into_split();
        let mut session = SocketSession { reader: BufReader::new(read), writer, next_id: 0 };
        let init = r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}"#;
        session.request("initialize", init).await;
        session.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
        session
    }

    async fn send(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.expect("write");
        self.writer.write_all(b"\n").await.expect("write");
    }

    /// Sends a request; returns its response line and whether a list_changed came first.
    async fn request(&mut self, method: &str, params: &str) -> (String, bool) {
        self.next_id += 1;
        self.send(&format!(r#"{{"jsonrpc":"2.0","id":{},"method":"{method}","params":{params}}}"#, self.next_id)).await;
        let mut changed = false;
        loop {
            let line = self.line().await;
            if line.contains("list_changed") {
                changed = true;
            } else if line.contains(&format!(r#""id":{}"#, self.next_id)) {
                return (line, changed);
            }
        }
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).await.expect("read");
        line
    }

    pub(crate) async fn propagate(&mut self, revision: usize) -> Option<Duration> {
        // Notifications of earlier changes (made on the other paths) are not this one's.
        while tokio::time::timeout(Duration::from_millis(5), self.line()).await.is_ok() {}
        let (_, mut changed) = self.request("tools/call", r#"{"name":"bench__mutate","arguments":{}}"#).await;
        let started = Instant::now();
        while !changed {
            changed = tokio::time::timeout(GIVE_UP, self.line()).await.ok()?.contains("list_changed");
        }
        let (listing, _) = self.request("tools/list", "{}").await;
        shows(&listing, revision).then(|| started.elapsed())
    }
}

/// A Streamable HTTP session's GET stream: every `list_changed` on it is sent to the channel.
pub(crate) async fn listen(
    client: &hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    session: Option<&str>,
) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(64);
    let mut request = http::Request::get(url).header("accept", "text/event-stream").header("mcp-protocol-version", "2025-06-18");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let request = request.body(Full::new(Bytes::new())).expect("a request");
    let Ok(response) = client.request(request).await else { return rx };
    if !response.status().is_success() {
        return rx;
    }
    tokio::spawn(async move {
        let mut body = response.into_body();
        while let Some(Ok(frame)) = body.frame().await {
            if frame.data_ref().is_some_and(|data| String::from_utf8_lossy(data).contains("list_changed")) && tx.send(()).await.is_err() {
                return;
            }
        }
    });
    rx
}
