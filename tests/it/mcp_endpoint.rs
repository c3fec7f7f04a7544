//! The MCP endpoint from the wire: a raw client on the Unix socket and raw HTTP requests, so
//! that every byte the spec prescribes is checked (the SDK clients are in `mcp_clients`).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use toolhost::app::App;
use toolhost::listen::BoundAddr;
use toolhost::registry::ServerState;

use crate::harness::*;

pub const MODERN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

/// `[mcp]` on a loopback port and a socket in the test directory.
pub fn mcp_section(extra: &str) -> String {
    format!("[mcp]\nlisten = [\"127.0.0.1:0\", \"unix:mcp.sock\"]\npage_size = 3\n{extra}\n")
}

pub fn mcp_socket(app: &App) -> PathBuf {
    app.mcp_addrs()
        .iter()
        .find_map(|addr| match addr {
            BoundAddr::Unix(path) => Some(path.clone()),
            BoundAddr::Tcp(_) => None,
        })
        .expect("an MCP socket")
}

pub fn mcp_http(app: &App) -> std::net::SocketAddr {
    app.mcp_addrs()
        .iter()
        .find_map(|addr| match addr {
            BoundAddr::Tcp(addr) => Some(*addr),
            BoundAddr::Unix(_) => None,
        })
        .expect("an MCP HTTP listener")
}

/// A line-oriented MCP client on the socket.
pub struct Line {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Line {
    pub async fn connect(path: &Path) -> Line {
        let (read, writer) = UnixStream::connect(path).await.expect("connect to the MCP socket").into_split();
        Line { reader: BufReader::new(read), writer }
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    pub async fn send_raw(&mut self, text: &str) {
        self.writer.write_all(format!("{text}\n").as_bytes()).await.unwrap();
    }

    /// The next message, or `None` at end of stream.
    pub async fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        let read = tokio::time::timeout(WAIT, self.reader.read_line(&mut line)).await.expect("a message in time").unwrap();
        (read > 0).then(|| serde_json::from_str(&line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}")))
    }

    /// Sends a request and returns its response, keeping aside nothing: notifications that
    /// arrive first are returned through `seen`.
    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        loop {
            let message = self.next().await.expect("a response before the end");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    pub async fn initialize(&mut self) {
        let response = self
            .request(
                0,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}),
            )
            .await;
        assert_eq!(response["result"]["protocolVersion"], "2025-11-25", "{response}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    }

    /// Every page of tools/list: the tools and the number of pages.
    pub async fn list_all(&mut self, meta: Option<&str>) -> (Vec<Value>, usize) {
        let (mut tools, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
        loop {
            let mut params = json!({});
            if let Some(cursor) = &cursor {
                params["cursor"] = json!(cursor);
            }
            if let Some(meta) = meta {
                params["_meta"] = serde_json::from_str(meta).unwrap();
            }
            let response = self.request(100 + pages as i64, "tools/list", params).await;
            pages += 1;
            let result = &response["result"];
            tools.extend(result["tools"].as_array().unwrap_or_else(|| panic!("{response}")).iter().cloned());
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return (tools, pages),
            }
        }
    }
}

/// One raw HTTP/1.1 exchange: status, headers (lower-case names) and body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: 127.0.0.1:{}\r\n", addr.port()));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    // A server may answer (413, say) and close before it has read everything sent: what it
    // answered is read all the same, and a reset after the answer is not a failure.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut response = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut response)).await.expect("an HTTP response in time");
    assert!(read.is_ok() || !response.is_empty(), "no HTTP response: {read:?}");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split_whitespace().nth(1)).and_then(|code| code.parse().ok()).unwrap_or(0);
    let headers =
        lines.filter_map(|line| line.split_once(':')).map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned())).collect();
    (status, headers, body.to_owned())
}

pub const JSON_HEADERS: [(&str, &str); 2] = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

async fn demo_app(dir: &TestDir, mcp_extra: &str, tools: Value) -> App {
    two_servers(dir, mcp_extra, "live", tools).await
}

/// `demo` (echo, add, sleep, fail) and a server called `changing` whose tools come from
/// `tools.json` (two a page), which it watches: write the file and it announces the change.
pub async fn two_servers(dir: &TestDir, mcp_extra: &str, changing: &str, tools: Value) -> App {
    std::fs::write(dir.path("tools.json"), tools.to_string()).unwrap();
    let demo = dir.script("demo", json!({}));
    let other = dir.script(changing, json!({"tools_file": dir.path("tools.json"), "watch_tools_file": true, "page_size": 2}));
    let servers = format!("{}{}", server_table("demo", &demo, ""), server_table(changing, &other, ""));
    let app = start(dir.config_with(&mcp_section(mcp_extra), &servers)).await;
    for server in ["demo", changing] {
        wait_for_server(app.registry(), server, "ready", |v| v.state() == ServerState::Ready).await;
    }
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_lists_every_page_calls_and_names_each_race() {
    let dir = TestDir::new();
    let app = demo_app(&dir, "", json!(tools("t", 5))).await;
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    mcp.initialize().await;
    let (listed, pages) = mcp.list_all(None).await;
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["demo__add", "demo__echo", "demo__fail", "demo__sleep", "live__t0", "live__t1", "live__t2", "live__t3", "live__t4"]);
    assert_eq!(pages, 3, "page_size 3 over 9 tools");
    let t3 = listed.iter().find(|t| t["name"] == "live__t3").unwrap();
    assert_eq!(t3["_meta"]["dev.toolhost/server"], "live");
    assert_eq!(t3["_meta"]["dev.toolhost/name"], "t3");
    assert_eq!(t3["_meta"]["dev.toolhost/generation"], 1);
    let t3_hash = t3["_meta"]["dev.toolhost/definitionHash"].as_str().unwrap().to_owned();

    // A call: the result exactly as the server wrote it.
    let response = mcp.request(1, "tools/call", json!({"name": "demo__add", "arguments": {"a": 2, "b": 40}})).await;
    assert_eq!(response["result"], json!({"content": [{"type": "text", "text": "42"}], "structuredContent": {"sum": 42.0}}));
    let response = mcp.request(2, "tools/call", json!({"name": "demo__fail"})).await;
    assert_eq!(response["result"]["isError"], true, "a tool's own failure is a result");

    // The server drops t4 and changes t3: the session hears about it.
    let mut changed = tools("t", 4);
    changed[3]["description"] = json!("changed");
    std::fs::write(dir.path("tools.json"), Value::Array(changed).to_string()).unwrap();
    wait_for_server(app.registry(), "live", "generation 2", |v| v.generation_number() == 2).await;
    let notification = mcp.next().await.unwrap();
    assert_eq!(notification, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));

    let removed = mcp.request(3, "tools/call", json!({"name": "live__t4"})).await;
    assert_eq!(removed["error"]["code"], -32602, "{removed}");
    assert_eq!(removed["error"]["data"]["reason"], "STALE_TOOL_REMOVED");
    assert_eq!(removed["error"]["data"]["removed_in_generation"], 2);
    let stale = mcp.request(4, "tools/call", json!({"name": "live__t3", "_meta": {"dev.toolhost/definitionHash": t3_hash}})).await;
    assert_eq!(stale["error"]["data"]["reason"], "STALE_TOOL_CHANGED", "{stale}");
    let unknown = mcp.request(5, "tools/call", json!({"name": "nobody__nothing"})).await;
    assert_eq!(unknown["error"]["data"]["reason"], "UNKNOWN_TOOL");
    let not_offered = mcp.request(6, "prompts/list", json!({})).await;
    assert_eq!(not_offered["error"]["code"], -32601);
    assert_eq!(mcp.request(7, "ping", json!({})).await["result"], json!({}));

    // Garbage, a batch and an oversized line each get their error; the session carries on.
    mcp.send_raw("this is not JSON").await;
    assert_eq!(mcp.next().await.unwrap()["error"]["code"], -32700);
    mcp.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).await;
    assert_eq!(mcp.next().await.unwrap()["error"]["code"], -32600);
    mcp.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5 << 20))).await;
    let oversized = mcp.next().await.unwrap();
    assert_eq!(oversized["error"]["code"], -32600, "{oversized}");
    assert!(oversized["error"]["message"].as_str().unwrap().contains("exceeds"));

    // A cursor from a revision no longer kept is refused; the client lists again. (A real
    // cursor, its revision changed: `th1.BINDING.REVISION.SERVER.TOOL`.)
    let first = mcp.request(8, "tools/list", json!({})).await;
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_owned();
    let parts: Vec<&str> = cursor.split('.').collect();
    assert_eq!(parts.len(), 5, "{cursor}");
    let old = format!("{}.{}.99999999.{}.{}", parts[0], parts[1], parts[3], parts[4]);
    let expired = mcp.request(8, "tools/list", json!({"cursor": old})).await;
    assert_eq!(expired["error"]["code"], -32602, "{expired}");
    assert!(expired["error"]["message"].as_str().unwrap().contains("expired"), "{expired}");
    // One bound to another caller (here: its binding changed) or not toolhost's at all.
    let other = format!("{}.000000000000.{}.{}.{}", parts[0], parts[2], parts[3], parts[4]);
    let elsewhere = mcp.request(9, "tools/list", json!({"cursor": other})).await;
    assert!(elsewhere["error"]["message"].as_str().unwrap().contains("another caller"), "{elsewhere}");
    let forged = mcp.request(9, "tools/list", json!({"cursor": "not-ours"})).await;
    assert_eq!(forged["error"]["code"], -32602);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_the_server_and_progress_reaches_the_caller() {
    let dir = TestDir::new();
    let app = demo_app(&dir, "", json!(tools("t", 1))).await;
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    mcp.initialize().await;
    mcp.send(
        json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": {"name": "demo__sleep", "arguments": {"ms": 20000}}}),
    )
    .await;
    eventually("the call reaches the server", async || dir.methods("demo").iter().any(|m| m == "tools/call").then_some(())).await;
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow", "reason": "changed my mind"}}))
        .await;
    eventually("the server hears of the cancellation", async || {
        dir.methods("demo").iter().any(|m| m == "notifications/cancelled").then_some(())
    })
    .await;
    // No answer for the cancelled call; the next request is answered.
    let ping = mcp.request(1, "ping", json!({})).await;
    assert_eq!(ping["result"], json!({}));

    mcp.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "demo__sleep", "arguments": {"ms": 300}, "_meta": {"progressToken": "mine"}}})).await;
    let progress = mcp.next().await.unwrap();
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(progress["params"]["progressToken"], "mine");
    assert_eq!(progress["params"]["message"], "halfway");
    let done = mcp.next().await.unwrap();
    assert_eq!(done["id"], 2);
    assert_eq!(done["result"]["content"][0]["text"], "slept 300 ms");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_on_the_socket_gets_cache_hints_and_subscribes() {
    let dir = TestDir::new();
    let app = demo_app(&dir, "", json!(tools("t", 2))).await;
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    let meta: Value = serde_json::from_str(MODERN_META).unwrap();
    let discover = mcp.request(1, "server/discover", json!({"_meta": meta})).await;
    assert!(discover["result"]["supportedVersions"].as_array().unwrap().contains(&json!("2026-07-28")), "{discover}");
    assert_eq!(
        discover["result"]["capabilities"],
        json!({"tools": {"listChanged": true}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    let page = mcp.request(2, "tools/list", json!({"_meta": meta})).await;
    assert_eq!(page["result"]["resultType"], "complete");
    assert_eq!(page["result"]["cacheScope"], "private");
    assert!(page["result"]["ttlMs"].as_u64().is_some());
    let old = mcp
        .request(
            3,
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}}),
        )
        .await;
    assert_eq!(old["error"]["code"], -32022);
    assert_eq!(old["error"]["data"]["supported"], json!(["2026-07-28"]));

    mcp.send(json!({"jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen", "params": {"notifications": {"toolsListChanged": true}, "_meta": meta}})).await;
    let ack = mcp.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub");
    std::fs::write(dir.path("tools.json"), json!(tools("t", 3)).to_string()).unwrap();
    let change = mcp.next().await.unwrap();
    assert_eq!(change["method"], "notifications/tools/list_changed");
    assert_eq!(change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_input_gets_the_specs_answers_and_disturbs_nothing() {
    let dir = TestDir::new();
    let app = demo_app(&dir, "", json!(tools("t", 1))).await;
    let addr = mcp_http(&app);
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}"#;
    let (status, headers, body) = http(addr, "POST", "/mcp", &JSON_HEADERS, initialize).await;
    assert_eq!(status, 200, "{body}");
    let session = header(&headers, "mcp-session-id").expect("a session id").to_owned();
    let with_session = [JSON_HEADERS[0], JSON_HEADERS[1], ("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hi"}}}"#;

    // What is sent, with which headers and body, and the HTTP status and JSON-RPC code expected.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u16, Option<i64>);
    let cases: Vec<Case<'_>> = vec![
        ("malformed JSON", with_session.to_vec(), "{nope".into(), 400, Some(-32700)),
        ("a batch", with_session.to_vec(), format!("[{call}]"), 400, Some(-32600)),
        (
            "an oversized body",
            with_session.to_vec(),
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5 << 20)),
            413,
            None,
        ),
        ("an unknown session", vec![JSON_HEADERS[0], JSON_HEADERS[1], ("Mcp-Session-Id", "0123456789abcdef")], call.into(), 404, None),
        ("no session", JSON_HEADERS.to_vec(), call.into(), 400, None),
        (
            "a wrong protocol version",
            vec![JSON_HEADERS[0], JSON_HEADERS[1], ("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "1999-01-01")],
            call.into(),
            400,
            None,
        ),
        (
            "an Origin from elsewhere",
            vec![JSON_HEADERS[0], JSON_HEADERS[1], ("Origin", "http://evil.example")],
            initialize.into(),
            403,
            None,
        ),
        ("a Host from elsewhere", vec![JSON_HEADERS[0], JSON_HEADERS[1], ("Host", "evil.example")], initialize.into(), 403, None),
        ("not JSON", vec![("Content-Type", "text/plain")], call.into(), 415, None),
    ];
    for (what, headers, body, expected, code) in cases {
        let (status, _, answer) = http(addr, "POST", "/mcp", &headers, &body).await;
        assert_eq!(status, expected, "{what}: {answer}");
        if let Some(code) = code {
            let answer: Value = serde_json::from_str(&answer).unwrap_or_else(|_| panic!("{what}: {answer}"));
            assert_eq!(answer["error"]["code"], code, "{what}");
        }
    }
    // A 2026 request whose headers disagree with its body.
    let modern_call = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"demo__echo","arguments":{{"text":"hi"}},"_meta":{MODERN_META}}}}}"#
    );
    let modern = |name: &'static str| {
        [JSON_HEADERS[0], JSON_HEADERS[1], ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", name)]
    };
    let (status, _, answer) = http(addr, "POST", "/mcp", &modern("demo__add"), &modern_call).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("-32020"), "HeaderMismatch: {answer}");
    let (status, _, answer) = http(addr, "POST", "/mcp", &modern("demo__echo"), &modern_call).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""text":"{\"text\":\"hi\"}""#), "{answer}");
    let (status, _, _) = http(addr, "GET", "/mcp", &[("Accept", "text/event-stream")], "").await;
    assert_eq!(status, 405, "GET without a session (the 2026 shape)");
    let (status, _, _) = http(addr, "POST", "/elsewhere", &JSON_HEADERS, initialize).await;
    assert_eq!(status, 404);

    // Nothing was disturbed: the session still works, and DELETE ends it.
    let (status, _, answer) = http(addr, "POST", "/mcp", &with_session, call).await;
    assert_eq!(status, 200);
    assert!(answer.contains(r#""text":"{\"text\":\"hi\"}""#), "{answer}");
    let (status, _, _) = http(addr, "DELETE", "/mcp", &with_session, "").await;
    assert_eq!(status, 204);
    let (status, _, _) = http(addr, "POST", "/mcp", &with_session, call).await;
    assert_eq!(status, 404, "a deleted session is unknown");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_decides_what_an_mcp_caller_sees_and_calls() {
    let dir = TestDir::new();
    std::fs::write(dir.path("token"), "mcp-agent-token-0123456789").unwrap();
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"remote\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__echo\", \"live__*\"]\ndeny = [\"live__t1\"]\n",
        dir.path("token").display()
    );
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!(tools("t", 2)).to_string()).unwrap();
    let demo = dir.script("demo", json!({}));
    let live = dir.script("live", json!({"tools_file": tools_file}));
    let servers = format!("{}{}", server_table("demo", &demo, ""), server_table("live", &live, ""));
    let app = start(dir.config_with(&format!("{}\n{access}", mcp_section("")), &servers)).await;
    for server in ["demo", "live"] {
        wait_for_server(app.registry(), server, "ready", |v| v.state() == ServerState::Ready).await;
    }
    let addr = mcp_http(&app);
    let bearer = [JSON_HEADERS[0], JSON_HEADERS[1], ("Authorization", "Bearer mcp-agent-token-0123456789")];
    let modern = |method: &'static str, name: &'static str| {
        [
            JSON_HEADERS[0],
            JSON_HEADERS[1],
            ("Authorization", "Bearer mcp-agent-token-0123456789"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
            ("Mcp-Name", name),
        ]
    };
    let list = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{MODERN_META}}}}}"#);
    let (status, _, answer) = http(addr, "POST", "/mcp", &modern("tools/list", ""), &list).await;
    assert_eq!(status, 200, "{answer}");
    let names: Vec<String> = serde_json::from_str::<Value>(&answer).unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["demo__echo", "live__t0"], "only what the agent may use");
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"demo__add","arguments":{{"a":1,"b":2}},"_meta":{MODERN_META}}}}}"#
    );
    let (_, _, answer) = http(addr, "POST", "/mcp", &modern("tools/call", "demo__add"), &call).await;
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["error"]["data"]["reason"], "UNKNOWN_TOOL", "a tool it may not use looks like no tool: {answer}");
    // A wrong token is a failed authentication, whoever the kernel says the caller is (a token
    // presented decides).
    let (status, headers, _) =
        http(addr, "POST", "/mcp", &[JSON_HEADERS[0], JSON_HEADERS[1], ("Authorization", "Bearer wrong-token-0123456789")], &list).await;
    assert_eq!(status, 401, "a wrong token over loopback");
    assert!(header(&headers, "www-authenticate").is_some_and(|value| value.starts_with("Bearer")), "{headers:?}");
    let (status, _, _) = http(addr, "POST", "/mcp", &bearer, &list).await;
    assert_eq!(status, 400, "a 2026 body without the 2026 headers");
    eventually("the refused call is audited", async || {
        let audit = app.store().audit().query(0, Some("remote"), 10).await.unwrap();
        match audit.iter().any(|r| r.qualified_name == "demo__add" && r.outcome == "denied" && r.transport == "tcp") {
            true => Ok(()),
            false => Err(format!("{audit:?}")),
        }
    })
    .await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_with_original_names_fronts_one_server() {
    let dir = TestDir::new();
    let profile = "[mcp.profiles.live]\ntools = [\"live__*\"]\nnames = \"original\"\n[mcp.profiles.echo]\ntools = [\"demo__echo\"]\n";
    let app = demo_app(&dir, profile, json!(tools("t", 2))).await;
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/toolhost/profile", "params": {"name": "live"}})).await;
    mcp.initialize().await;
    let (listed, _) = mcp.list_all(None).await;
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["t0", "t1"]);
    let response = mcp.request(1, "tools/call", json!({"name": "t1", "arguments": {"x": 1}})).await;
    assert_eq!(response["result"]["structuredContent"], json!({"x": 1}), "{response}");
    let outside = mcp.request(2, "tools/call", json!({"name": "echo", "arguments": {"text": "x"}})).await;
    assert_eq!(outside["error"]["code"], -32602, "a tool outside the profile is unknown here");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/toolhost/profile", "params": {"name": "echo"}})).await;
    assert_eq!(mcp.next().await.unwrap()["error"]["code"], -32600, "the profile is chosen before the first request");
    assert_eq!(mcp.list_all(None).await.0.len(), 2, "and stays what it was");

    let (status, _, answer) = http(
        mcp_http(&app),
        "POST",
        "/mcp/echo",
        &JSON_HEADERS,
        &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{MODERN_META}}}}}"#),
    )
    .await;
    assert_eq!(status, 400, "headers missing: {answer}");
    let modern = [JSON_HEADERS[0], JSON_HEADERS[1], ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
    let (status, _, answer) = http(
        mcp_http(&app),
        "POST",
        "/mcp/echo",
        &modern,
        &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{MODERN_META}}}}}"#),
    )
    .await;
    assert_eq!(status, 200);
    let tools: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(tools["result"]["tools"].as_array().unwrap().len(), 1);
    assert_eq!(tools["result"]["tools"][0]["name"], "demo__echo");
    let (status, _, _) = http(mcp_http(&app), "POST", "/mcp/nope", &modern, "{}").await;
    assert_eq!(status, 404, "an unknown profile");

    let mut unknown = Line::connect(&mcp_socket(&app)).await;
    unknown.send(json!({"jsonrpc": "2.0", "method": "notifications/toolhost/profile", "params": {"name": "nope"}})).await;
    let refused = unknown.next().await.unwrap();
    assert_eq!(refused["error"]["code"], -32602);
    assert!(unknown.next().await.is_none(), "the connection ends");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_profiles_for_the_next_connection() {
    let dir = TestDir::new();
    let mut app = demo_app(&dir, "", json!(tools("t", 2))).await;
    let choose = |name: &str| json!({"jsonrpc": "2.0", "method": "notifications/toolhost/profile", "params": {"name": name}});
    let mut before = Line::connect(&mcp_socket(&app)).await;
    before.send(choose("echo")).await;
    assert_eq!(before.next().await.unwrap()["error"]["code"], -32602, "no such profile yet");

    let demo = dir.path("demo.json");
    let live = dir.path("live.json");
    let servers = format!("{}{}", server_table("demo", &demo, ""), server_table("live", &live, ""));
    let config = dir.config_with(&mcp_section("[mcp.profiles.echo]\ntools = [\"demo__echo\"]\n"), &servers);
    app.reload(config).await.unwrap();
    let mut after = Line::connect(&mcp_socket(&app)).await;
    after.send(choose("echo")).await;
    after.initialize().await;
    let (listed, _) = after.list_all(None).await;
    assert_eq!(listed.iter().map(|t| t["name"].as_str().unwrap()).collect::<Vec<_>>(), ["demo__echo"]);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_profile_shows_few_tools_and_finds_and_calls_the_rest() {
    let dir = TestDir::new();
    let profile = "[mcp.profiles.agent]\nlazy = true\ntools = [\"demo__echo\"]\nfind = [\"demo__*\"]\n";
    let app = demo_app(&dir, profile, json!(tools("t", 2))).await;
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/toolhost/profile", "params": {"name": "agent"}})).await;
    mcp.initialize().await;
    let (listed, _) = mcp.list_all(None).await;
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["find_tools", "call_tool", "demo__echo"], "two meta-tools and the pinned one");

    let found = mcp.request(1, "tools/call", json!({"name": "find_tools", "arguments": {"query": "add two numbers", "limit": 3}})).await;
    let tools = found["result"]["structuredContent"]["tools"].as_array().unwrap_or_else(|| panic!("{found}")).clone();
    assert_eq!(tools[0]["name"], "demo__add", "{found}");
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["a", "b"]));
    assert!(tools.iter().all(|t| t["server"] == "demo"), "the profile's find scope: {tools:?}");
    let hash = tools[0]["definitionHash"].as_str().unwrap().to_owned();

    let called = mcp
        .request(
            2,
            "tools/call",
            json!({"name": "call_tool", "arguments": {"name": "demo__add", "arguments": {"a": 1, "b": 2}, "definition_hash": hash}}),
        )
        .await;
    assert_eq!(called["result"]["structuredContent"], json!({"sum": 3.0}), "{called}");
    let stale = mcp.request(3, "tools/call", json!({"name": "call_tool", "arguments": {"name": "demo__add", "arguments": {"a": 1, "b": 2}, "definition_hash": "0".repeat(64)}})).await;
    assert_eq!(stale["error"]["data"]["reason"], "STALE_TOOL_CHANGED", "{stale}");
    let outside = mcp.request(4, "tools/call", json!({"name": "call_tool", "arguments": {"name": "live__t0", "arguments": {}}})).await;
    assert_eq!(outside["error"]["data"]["reason"], "UNKNOWN_TOOL", "outside the find scope: {outside}");
    let bad = mcp.request(5, "tools/call", json!({"name": "find_tools", "arguments": {"limit": 2}})).await;
    assert_eq!(bad["error"]["code"], -32602, "no query: {bad}");
    app.shutdown().await;
}

/// What an answer must satisfy.
type Check = Box<dyn Fn(&Value) -> bool>;

/// The endpoint's protocol without a transport, one line in, one answer out: the table of what
/// each kind of message gets, in both eras.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_answers_each_kind_of_message_as_the_table_says() {
    let dir = TestDir::new();
    let app = demo_app(&dir, "", json!(tools("t", 3))).await;
    let me = || {
        toolhost::access::Identity::unix(toolhost::access::UnixPeer::new(
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
            std::process::id() as i32,
        ))
    };
    let modern_meta = MODERN_META;
    let table: Vec<(String, Option<&str>, Check)> = vec![
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{}}}"#.into(),
            Some("an unknown version gets the newest legacy one"),
            Box::new(|a| a["result"]["protocolVersion"] == "2025-11-25"),
        ),
        (r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#.into(), Some("a legacy ping"), Box::new(|a| a["result"] == json!({}))),
        (
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{"_meta":{modern_meta}}}}}"#),
            Some("a 2026 ping"),
            Box::new(|a| a["result"]["resultType"] == "complete"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}"#
                .into(),
            Some("an unknown 2026-style version"),
            Box::new(|a| a["error"]["code"] == -32022 && a["error"]["data"]["supported"][0] == "2026-07-28"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"resources/list"}"#.into(),
            Some("a method toolhost does not serve"),
            Box::new(|a| a["error"]["code"] == -32601),
        ),
        ("not json".into(), Some("garbage"), Box::new(|a| a["error"]["code"] == -32700 && a["id"].is_null())),
        (r#"[{"jsonrpc":"2.0","id":6,"method":"ping"}]"#.into(), Some("a batch"), Box::new(|a| a["error"]["code"] == -32600)),
        (r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#.into(), Some("the wrong jsonrpc"), Box::new(|a| a["error"]["code"] == -32600)),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":7}"#.into(),
            Some("params that are not an object"),
            Box::new(|a| a["error"]["code"] == -32602),
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nosuch__tool"}}"#.into(),
            Some("an unknown tool"),
            Box::new(|a| a["error"]["code"] == -32602 && a["error"]["data"]["reason"] == "UNKNOWN_TOOL"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"demo__add","arguments":{"a":2,"b":40}}}"#.into(),
            Some("a call"),
            Box::new(|a| a["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("42"))),
        ),
        (
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"demo__fail"}}"#.into(),
            Some("a tool's own failure is a result"),
            Box::new(|a| a["result"]["isError"] == true),
        ),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/list"}"#.into(),
            Some("a first page with a cursor"),
            Box::new(|a| a["result"]["tools"].as_array().is_some_and(|t| t.len() == 3) && a["result"]["nextCursor"].is_string()),
        ),
        (
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/list","params":{"cursor":"made-up"}}"#.into(),
            Some("a cursor toolhost never issued"),
            Box::new(|a| a["error"]["code"] == -32602 && a["error"]["data"]["reason"] == "CURSOR_EXPIRED"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":14,"method":"subscriptions/listen"}"#.into(),
            Some("a stream without a transport"),
            Box::new(|a| a["error"]["code"] == -32000),
        ),
        (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(), None, Box::new(|_| true)),
        (r#"{"jsonrpc":"2.0","id":"x","result":{}}"#.into(), None, Box::new(|_| true)),
    ];
    for (line, expected, check) in table {
        let answer = app.endpoint().answer_line(me(), line.as_bytes()).await;
        match (expected, answer) {
            (None, None) => {}
            (None, Some(answer)) => panic!("{line}: no answer expected, got {answer}"),
            (Some(what), None) => panic!("{what}: no answer to {line}"),
            (Some(what), Some(answer)) => {
                let answer: Value = serde_json::from_str(&answer).unwrap_or_else(|_| panic!("{what}: not JSON: {answer}"));
                assert!(check(&answer), "{what}: {line} got {answer}");
            }
        }
    }
    app.shutdown().await;
}
