//! A scripted Streamable HTTP MCP server (legacy shape) for the tests: sessions, JSON and SSE
//! responses, a GET stream, resumable response streams, forgotten sessions, and a bearer token.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

#[derive(Default)]
pub struct Script {
    pub tools: Vec<Value>,
    pub page_size: usize,
    /// Answer requests with SSE streams rather than JSON.
    pub sse_responses: bool,
    /// Close a tools/call response stream after its priming event; the answer waits for the
    /// resuming GET (with Last-Event-ID).
    pub drop_call_streams: bool,
    /// Refuse requests without `Authorization: Bearer <token>` with 401.
    pub token: Option<String>,
    /// Speak 2026-07-28 only: server/discover, header checks, subscriptions/listen, no sessions.
    pub modern: bool,
    /// Answer tools/call with an event stream that never carries the answer (keep-alive
    /// comments only) until the client goes away.
    pub stall_calls: bool,
    /// Echo the request's Authorization header back: tools/call of `t0` in a 500 body, of `t1`
    /// in a JSON-RPC error message.
    pub echo_authorization_on_call: bool,
    /// Refuse tools/list with a JSON-RPC error that echoes the Authorization header.
    pub echo_authorization_on_list: bool,
    /// Close the connection on tools/call without a word: a server that dies mid-call.
    pub die_on_call: bool,
    /// Run a `tools/call` as a task when asked (both eras), in a store the whole server shares
    /// (a client that reconnects finds its tasks). A call ends `arguments.ms` (default 500)
    /// after it started.
    pub tasks: bool,
}

/// A task the server runs.
struct ServerTask {
    ends_at: std::time::Instant,
    arguments: Value,
    cancelled: bool,
}

pub struct HttpMcpServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    tls: bool,
}

struct State {
    script: Mutex<Script>,
    sessions: Mutex<HashSet<String>>,
    next_session: Mutex<u32>,
    seen: Mutex<Vec<Seen>>,
    /// Answers held for resuming GETs, by the event id they follow.
    held: Mutex<HashMap<String, String>>,
    /// Stalled tools/call streams whose client is still connected.
    stalled_open: std::sync::atomic::AtomicUsize,
    notifications: broadcast::Sender<String>,
    tasks: Mutex<HashMap<String, ServerTask>>,
}

impl HttpMcpServer {
    pub async fn start(script: Script) -> HttpMcpServer {
        HttpMcpServer::start_with(script, None).await
    }

    /// The same server behind TLS with a fresh self-signed certificate for 127.0.0.1 and
    /// localhost; returns the certificate (PEM) to trust.
    pub async fn start_tls(script: Script) -> (HttpMcpServer, String) {
        let (config, cert_pem) = crate::harness::self_signed_tls(&["127.0.0.1", "localhost"]);
        let mut server = HttpMcpServer::start_with(script, Some(tokio_rustls::TlsAcceptor::from(config))).await;
        server.tls = true;
        (server, cert_pem)
    }

    async fn start_with(script: Script, tls: Option<tokio_rustls::TlsAcceptor>) -> HttpMcpServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            script: Mutex::new(script),
            sessions: Mutex::default(),
            next_session: Mutex::new(0),
            seen: Mutex::default(),
            held: Mutex::default(),
            stalled_open: std::sync::atomic::AtomicUsize::new(0),
            notifications: broadcast::channel(64).0,
            tasks: Mutex::default(),
        });
        let accept_state = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = accept_state.clone();
                match tls.clone() {
                    None => {
                        tokio::spawn(connection(state, stream));
                    }
                    Some(acceptor) => {
                        tokio::spawn(async move {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                connection(state, stream).await;
                            }
                        });
                    }
                }
            }
        });
        HttpMcpServer { addr, state, tls: false }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}/mcp", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn set_tools(&self, tools: Vec<Value>) {
        self.state.script.lock().unwrap().tools = tools;
    }

    /// Sends list_changed on every open GET stream.
    pub fn announce_change(&self) {
        let _ = self.state.notifications.send(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.to_owned());
    }

    /// Stalled tools/call streams whose client has not gone away.
    pub fn stalled_open(&self) -> usize {
        self.state.stalled_open.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forgets every session: later requests that carry one get 404.
    /// The ids of the tasks a client cancelled.
    pub fn cancelled_tasks(&self) -> Vec<String> {
        self.state.tasks.lock().unwrap().iter().filter(|(_, task)| task.cancelled).map(|(id, _)| id.clone()).collect()
    }

    /// How many tasks the server was asked to run.
    pub fn tasks_started(&self) -> usize {
        self.state.tasks.lock().unwrap().len()
    }

    pub fn forget_sessions(&self) {
        self.state.sessions.lock().unwrap().clear();
    }
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin>(state: Arc<State>, stream: S) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
            return;
        }
        let method = request_line.split_whitespace().next().unwrap_or_default().to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        state.seen.lock().unwrap().push(Seen { method: method.clone(), headers: headers.clone(), body: body.clone() });
        let keep_open = respond(&state, &method, &headers, &body, reader.get_mut()).await;
        if !keep_open {
            return;
        }
    }
}

/// Answers one request; false when the connection must close (after a stream).
async fn respond<S: AsyncWrite + Unpin>(
    state: &State,
    method: &str,
    headers: &HashMap<String, String>,
    body: &Value,
    stream: &mut S,
) -> bool {
    let token = state.script.lock().unwrap().token.clone();
    if let Some(token) = token
        && headers.get("authorization") != Some(&format!("Bearer {token}"))
    {
        return write(stream, "401 Unauthorized", "application/json", "{}", &[]).await;
    }
    if state.script.lock().unwrap().die_on_call && body["method"] == "tools/call" {
        return false;
    }
    if state.script.lock().unwrap().modern {
        return respond_modern(state, method, headers, body, stream).await;
    }
    let session = headers.get("mcp-session-id").cloned();
    let known = session.as_ref().is_some_and(|s| state.sessions.lock().unwrap().contains(s));
    let is_initialize = body["method"] == "initialize";
    if !is_initialize && session.is_some() && !known {
        return write(stream, "404 Not Found", "application/json", "{}", &[]).await;
    }
    match method {
        "DELETE" => {
            if let Some(session) = session {
                state.sessions.lock().unwrap().remove(&session);
            }
            write(stream, "200 OK", "application/json", "", &[]).await
        }
        "GET" => {
            if let Some(last) = headers.get("last-event-id") {
                let held = state.held.lock().unwrap().remove(last);
                let events = held.map(|answer| format!("id: {last}-answer\ndata: {answer}\n\n")).unwrap_or_default();
                let _ = stream.write_all(sse_head().as_bytes()).await;
                let _ = stream.write_all(events.as_bytes()).await;
                return false;
            }
            let mut notifications = state.notifications.subscribe();
            if stream.write_all(sse_head().as_bytes()).await.is_err() {
                return false;
            }
            while let Ok(message) = notifications.recv().await {
                if stream.write_all(format!("data: {message}\n\n").as_bytes()).await.is_err() {
                    return false;
                }
            }
            false
        }
        _ => {
            let Some(id) = body.get("id").cloned() else {
                return write(stream, "202 Accepted", "application/json", "", &[]).await;
            };
            if body.get("method").is_none() {
                return write(stream, "202 Accepted", "application/json", "", &[]).await;
            }
            let message = match answer(state, body) {
                Some(Ok(result)) => json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
                Some(Err((code, message))) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string(),
                None => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}}).to_string(),
            };
            let mut extra = Vec::new();
            if is_initialize {
                let mut next = state.next_session.lock().unwrap();
                *next += 1;
                let session = format!("session-{next}");
                state.sessions.lock().unwrap().insert(session.clone());
                extra.push(("Mcp-Session-Id", session));
            }
            let (sse, drop_calls) = {
                let script = state.script.lock().unwrap();
                (script.sse_responses, script.drop_call_streams)
            };
            let (echo_call, echo_list) = {
                let script = state.script.lock().unwrap();
                (script.echo_authorization_on_call, script.echo_authorization_on_list)
            };
            let authorization = headers.get("authorization").cloned().unwrap_or_default();
            if echo_call && body["method"] == "tools/call" && body["params"]["name"] == "t0" {
                return write(
                    stream,
                    "500 Internal Server Error",
                    "text/plain",
                    &format!("upstream failure; you sent {authorization}"),
                    &[],
                )
                .await;
            }
            let echoed = |message: String| json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}}).to_string();
            if echo_call && body["method"] == "tools/call" && body["params"]["name"] == "t1" {
                return write(stream, "200 OK", "application/json", &echoed(format!("bad credentials {authorization}")), &[]).await;
            }
            if echo_list && body["method"] == "tools/list" {
                return write(stream, "200 OK", "application/json", &echoed(format!("cannot list with {authorization}")), &[]).await;
            }
            let stall = state.script.lock().unwrap().stall_calls;
            if stall && body["method"] == "tools/call" {
                use std::sync::atomic::Ordering::SeqCst;
                state.stalled_open.fetch_add(1, SeqCst);
                let _ = stream.write_all(sse_head().as_bytes()).await;
                // An absurd retry interval, then nothing but keep-alives until the client leaves.
                let mut alive = stream.write_all(b"id: s1\nretry: 99999999999999\ndata:\n\n").await.is_ok();
                let mut pace = crate::harness::pace(std::time::Duration::from_millis(50));
                while alive {
                    pace.tick().await;
                    alive = stream.write_all(b": keep-alive\n\n").await.is_ok() && stream.flush().await.is_ok();
                }
                state.stalled_open.fetch_sub(1, SeqCst);
                return false;
            }
            if drop_calls && body["method"] == "tools/call" {
                let event_id = format!("call-{id}");
                state.held.lock().unwrap().insert(event_id.clone(), message);
                let _ = stream.write_all(sse_head().as_bytes()).await;
                let _ = stream.write_all(format!("id: {event_id}\nretry: 100\ndata:\n\n").as_bytes()).await;
                return false;
            }
            if sse {
                let head = extra.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect::<String>();
                let _ = stream
                    .write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{head}Connection: close\r\n\r\n").as_bytes())
                    .await;
                let _ = stream.write_all(format!("id: e1\ndata:\n\nid: e2\ndata: {message}\n\n").as_bytes()).await;
                return false;
            }
            write(stream, "200 OK", "application/json", &message, &extra).await
        }
    }
}

/// The 2026-07-28 shape: every POST must carry matching version and method headers.
async fn respond_modern<S: AsyncWrite + Unpin>(
    state: &State,
    method: &str,
    headers: &HashMap<String, String>,
    body: &Value,
    stream: &mut S,
) -> bool {
    if method != "POST" {
        return write(stream, "405 Method Not Allowed", "application/json", "", &[]).await;
    }
    let id = body.get("id").cloned().unwrap_or(Value::Null);
    let rpc_method = body["method"].as_str().unwrap_or_default();
    let error = |code: i64, message: &str| {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": {"supported": ["2026-07-28"]}}}).to_string()
    };
    if rpc_method == "initialize" {
        return write(stream, "400 Bad Request", "application/json", &error(-32022, "Unsupported protocol version"), &[]).await;
    }
    let meta_version = body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str().unwrap_or_default();
    let headers_match = headers.get("mcp-protocol-version").map(String::as_str) == Some("2026-07-28")
        && meta_version == "2026-07-28"
        && headers.get("mcp-method").map(String::as_str) == Some(rpc_method)
        && (rpc_method != "tools/call" || headers.get("mcp-name").map(String::as_str) == body["params"]["name"].as_str());
    if body.get("id").is_none() {
        return write(stream, "202 Accepted", "application/json", "", &[]).await;
    }
    if !headers_match {
        return write(stream, "400 Bad Request", "application/json", &error(-32020, "Header mismatch"), &[]).await;
    }
    let complete = |mut result: Value| {
        if result.get("resultType").is_none() {
            result["resultType"] = json!("complete");
        }
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
    };
    match rpc_method {
        "server/discover" => {
            let mut capabilities = json!({"tools": {"listChanged": true}});
            if state.script.lock().unwrap().tasks {
                capabilities["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
            }
            let result =
                complete(json!({"supportedVersions": ["2026-07-28"], "capabilities": capabilities, "ttlMs": 0, "cacheScope": "public"}));
            write(stream, "200 OK", "application/json", &result, &[]).await
        }
        "subscriptions/listen" => {
            let mut notifications = state.notifications.subscribe();
            let tag = json!({"io.modelcontextprotocol/subscriptionId": id});
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"_meta": tag, "notifications": {"toolsListChanged": true}}});
            if stream.write_all(sse_head().as_bytes()).await.is_err()
                || stream.write_all(format!("data: {ack}\n\n").as_bytes()).await.is_err()
            {
                return false;
            }
            while notifications.recv().await.is_ok() {
                let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"_meta": tag}});
                if stream.write_all(format!("data: {changed}\n\n").as_bytes()).await.is_err() {
                    return false;
                }
            }
            false
        }
        _ => match answer(state, body) {
            Some(Err((code, message))) => {
                let line = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string();
                write(stream, "200 OK", "application/json", &line, &[]).await
            }
            Some(Ok(mut result)) => {
                if rpc_method == "tools/list" {
                    result["ttlMs"] = json!(60_000);
                    result["cacheScope"] = json!("public");
                }
                write(stream, "200 OK", "application/json", &complete(result), &[]).await
            }
            None => write(stream, "404 Not Found", "application/json", &error(-32601, "method not found"), &[]).await,
        },
    }
}

/// A request's result, or its JSON-RPC error; `None` for a method the server does not have.
fn answer(state: &State, body: &Value) -> Option<Result<Value, (i64, String)>> {
    if state.script.lock().unwrap().tasks
        && let Some(answer) = task_answer(state, body)
    {
        return Some(answer);
    }
    let script = state.script.lock().unwrap();
    Some(Ok(match body["method"].as_str().unwrap_or_default() {
        "initialize" if script.tasks => json!({"protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": true}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
            "serverInfo": {"name": "http-test", "version": "1"}}),
        "initialize" => {
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}}, "serverInfo": {"name": "http-test", "version": "1"}})
        }
        "tools/list" => {
            let offset: usize = body["params"]["cursor"].as_str().and_then(|c| c.parse().ok()).unwrap_or(0);
            let size = if script.page_size == 0 { script.tools.len().max(1) } else { script.page_size };
            let end = (offset + size).min(script.tools.len());
            let mut result = json!({"tools": script.tools[offset..end]});
            if end < script.tools.len() {
                result["nextCursor"] = json!(end.to_string());
            }
            result
        }
        "tools/call" => json!({"content": [{"type": "text", "text": body["params"]["arguments"].to_string()}]}),
        _ => return None,
    }))
}

/// The task methods, and a `tools/call` asked to run as a task; `None` for anything else.
fn task_answer(state: &State, body: &Value) -> Option<Result<Value, (i64, String)>> {
    let params = &body["params"];
    let modern = params["_meta"]["io.modelcontextprotocol/protocolVersion"].is_string();
    let now = std::time::Instant::now();
    let mut tasks = state.tasks.lock().unwrap();
    let view = |id: &str, task: &ServerTask| {
        let status = match (task.cancelled, now >= task.ends_at) {
            (true, _) => "cancelled",
            (false, true) => "completed",
            (false, false) => "working",
        };
        let mut fields =
            json!({"taskId": id, "status": status, "createdAt": "2026-12-01T00:00:00Z", "lastUpdatedAt": "2026-12-01T00:00:00Z"});
        if modern {
            fields["ttlMs"] = json!(600_000);
            fields["pollIntervalMs"] = json!(100);
            if status == "completed" {
                fields["result"] = json!({"content": [{"type": "text", "text": format!("job done: {}", task.arguments)}]});
            }
        } else {
            fields["ttl"] = json!(600_000);
            fields["pollInterval"] = json!(100);
        }
        fields
    };
    let unknown = || Err((-32602, "unknown task".to_owned()));
    let id = params["taskId"].as_str().unwrap_or_default().to_owned();
    Some(match body["method"].as_str().unwrap_or_default() {
        "tools/call" => Ok({
            let asked = params.get("task").is_some()
                || params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
                    .get("io.modelcontextprotocol/tasks")
                    .is_some();
            if !asked {
                return None;
            }
            let ms = params["arguments"]["ms"].as_u64().unwrap_or(500);
            let id = format!("job-{}", tasks.len() + 1);
            let task = ServerTask {
                ends_at: now + std::time::Duration::from_millis(ms),
                arguments: params["arguments"].clone(),
                cancelled: false,
            };
            let fields = view(&id, &task);
            tasks.insert(id, task);
            if modern {
                let mut handle = fields;
                handle["resultType"] = json!("task");
                handle
            } else {
                json!({"task": fields})
            }
        }),
        "tasks/get" => match tasks.get(&id) {
            Some(task) => Ok(view(&id, task)),
            None => unknown(),
        },
        "tasks/result" => match tasks.get(&id) {
            Some(task) if now >= task.ends_at && !task.cancelled => {
                Ok(json!({"content": [{"type": "text", "text": format!("job done: {}", task.arguments)}]}))
            }
            Some(_) => Err((-32603, "not done".to_owned())),
            None => unknown(),
        },
        "tasks/cancel" => match tasks.get_mut(&id) {
            Some(task) => {
                task.cancelled = true;
                Ok(view(&id, task))
            }
            None => unknown(),
        },
        _ => return None,
    })
}

fn sse_head() -> String {
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n".to_owned()
}

async fn write<S: AsyncWrite + Unpin>(stream: &mut S, status: &str, content_type: &str, body: &str, extra: &[(&str, String)]) -> bool {
    let head = extra.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect::<String>();
    let response = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{head}\r\n{body}", body.len());
    stream.write_all(response.as_bytes()).await.is_ok()
}
