//! The MCP semantic conventions, end to end: a daemon exporting to a real OTLP receiver, called
//! through both doors (gRPC; MCP over its Unix socket and over HTTP, in both eras) and calling
//! servers over both transports (stdio and Streamable HTTP, in both eras). Every span and metric
//! the conventions name is checked by name, kind and attribute.

use std::collections::BTreeMap;

use serde_json::json;
use toolhost::api::pb;

use crate::collector::{CLIENT, Collector, ERROR, Point, SERVER, Span};
use crate::harness::*;
use crate::http::http_table;
use crate::http_server::{HttpMcpServer, Script};
use crate::mcp_endpoint::{JSON_HEADERS, Line, MODERN_META, http};

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

/// The one span named `name` whose attributes include `with`.
fn span<'a>(spans: &'a [Span], name: &str, with: &[(&str, &str)]) -> &'a Span {
    let found: Vec<&Span> =
        spans.iter().filter(|span| span.name == name && with.iter().all(|(key, value)| span.attr(key) == Some(*value))).collect();
    assert!(
        !found.is_empty(),
        "no span {name:?} with {with:?}; spans of that name: {:#?}",
        spans.iter().filter(|span| span.name == name).collect::<Vec<_>>()
    );
    found[0]
}

/// Asserts that `span` has exactly these values for these keys (`None`: the key is absent).
fn has(span: &Span, expected: &[(&str, Option<&str>)]) {
    for (key, value) in expected {
        assert_eq!(span.attr(key), *value, "{key} of span {:?}: {:#?}", span.name, span.attributes);
    }
}

/// Whether some data point of `metric` carries all of `with` and none of the keys in `without`.
fn point<'a>(points: &'a [Point], metric: &str, with: &[(&str, &str)], without: &[&str]) -> &'a Point {
    points
        .iter()
        .find(|point| {
            point.metric == metric
                && with.iter().all(|(key, value)| point.attributes.get(*key).map(String::as_str) == Some(*value))
                && without.iter().all(|key| !point.attributes.contains_key(*key))
        })
        .unwrap_or_else(|| {
            let sets: Vec<&BTreeMap<String, String>> = points.iter().filter(|p| p.metric == metric).map(|p| &p.attributes).collect();
            panic!("no {metric} point with {with:?} and without {without:?}; points: {sets:#?}")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_follows_the_mcp_conventions_on_both_doors_and_both_transports() {
    let (collector, endpoint, collector_task) = Collector::start().await;
    let remote = HttpMcpServer::start(Script { tools: tools("t", 1), ..Script::default() }).await;
    let remote_modern = HttpMcpServer::start(Script { tools: tools("t", 1), modern: true, ..Script::default() }).await;
    let dir = TestDir::new();
    let piped = dir.script("piped", json!({}));
    let piped_modern = dir.script("piped_modern", json!({"era": "modern"}));
    let config = dir.path("semconv.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"semconv.db\"\n[grpc]\nlisten = [\"unix:semconv.sock\"]\n[mcp]\nlisten = [\"127.0.0.1:0\", \"unix:semconv-mcp.sock\"]\n\
             [telemetry]\nmetrics_interval = \"1h\"\n{}{}{}{}",
            server_table("piped", &piped, ""),
            server_table("piped_modern", &piped_modern, ""),
            http_table("remote", &remote.url(), ""),
            http_table("remote_modern", &remote_modern.url(), ""),
        ),
    )
    .unwrap();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_SERVICE_NAME", "toolhost-semconv")];
    let (mut daemon, mut grpc) = crate::telemetry::serve(&config, dir.path("semconv.sock"), &env).await;
    let log = config.with_extension("daemon.log");
    // The MCP listener's port, as the daemon logged it when it bound port 0.
    let mcp_port: u16 = eventually("the MCP endpoint's address in the log", async || {
        let text = std::fs::read_to_string(&log).ok()?;
        let at = text.find("Tcp(127.0.0.1:")? + "Tcp(127.0.0.1:".len();
        text[at..].split(')').next()?.parse().ok()
    })
    .await;
    let mcp_http: std::net::SocketAddr = ([127, 0, 0, 1], mcp_port).into();
    let call = |name: &str| pb::CallToolRequest { qualified_name: name.into(), arguments_json: "{}".into(), ..Default::default() };
    // Every server ready: each answers a call.
    for name in ["piped__echo", "piped_modern__echo", "remote__t0", "remote_modern__t0"] {
        eventually(&format!("{name} answers"), async || grpc.call_tool(call(name)).await.ok()).await;
    }
    // gRPC: a tool error, and a tool nobody has.
    let failed = grpc.call_tool(call("piped__fail")).await.unwrap().into_inner();
    assert!(failed.is_error);
    grpc.call_tool(call("madeup__tool")).await.unwrap_err();

    // MCP over the Unix socket, 2025 era: initialize, then a call.
    let mut line = Line::connect(&dir.path("semconv-mcp.sock")).await;
    let init = line
        .request(1, "initialize", json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    assert_eq!(init["result"]["protocolVersion"], LEGACY);
    assert!(line.request(7, "tools/call", json!({"name": "piped_modern__echo", "arguments": {"text": "x"}})).await["result"].is_object());
    assert!(line.request(8, "tools/call", json!({"name": "nosuch__tool", "arguments": {}})).await["error"].is_object());
    assert_eq!(line.request(9, "x/made-up", json!({})).await["error"]["code"], -32601);
    drop(line);

    // MCP over HTTP, 2025 era: a session.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let (status, headers, answer) = http(mcp_http, "POST", "/mcp", &JSON_HEADERS, &body).await;
    assert_eq!(status, 200, "{answer}");
    let session = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("mcp-session-id")).map(|(_, v)| v.clone()).unwrap();
    let in_session = [JSON_HEADERS[0], JSON_HEADERS[1], ("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", LEGACY)];
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remote__t0", "arguments": {}}}).to_string();
    let (status, _, answer) = http(mcp_http, "POST", "/mcp", &in_session, &body).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _, _) = http(mcp_http, "DELETE", "/mcp", &in_session, "").await;
    assert_eq!(status, 204, "the session ended");

    // MCP over HTTP, 2026-07-28: no session.
    let modern_headers = [
        JSON_HEADERS[0],
        JSON_HEADERS[1],
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "remote_modern__t0"),
    ];
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"m-3","method":"tools/call","params":{{"name":"remote_modern__t0","arguments":{{}},"_meta":{MODERN_META}}}}}"#
    );
    let (status, _, answer) = http(mcp_http, "POST", "/mcp", &modern_headers, &body).await;
    assert_eq!(status, 200, "{answer}");

    // A clean stop ends every session and flushes both signals.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success());
    collector_task.abort();
    let spans = collector.spans();
    let points = collector.points();

    // --- The gRPC door: server spans of tools/call.
    let grpc_call = span(&spans, "tools/call piped__echo", &[("toolhost.front_door", "grpc"), ("rpc.response.status_code", "OK")]);
    assert_eq!(grpc_call.kind, SERVER);
    assert_eq!(grpc_call.service, "toolhost-semconv");
    has(
        grpc_call,
        &[
            ("mcp.method.name", Some("tools/call")),
            ("gen_ai.operation.name", Some("execute_tool")),
            ("gen_ai.tool.name", Some("piped__echo")),
            ("network.transport", Some("unix")),
            ("network.protocol.name", Some("http")),
            ("rpc.system", Some("grpc")),
            ("rpc.response.status_code", Some("OK")),
            ("error.type", None),
            ("mcp.session.id", None),
        ],
    );
    let grpc_failed = span(&spans, "tools/call piped__fail", &[]);
    has(grpc_failed, &[("error.type", Some("tool_error"))]);
    assert_eq!(grpc_failed.status, ERROR);
    assert_eq!(grpc_failed.status_message, "the tool reported an error");
    // An unknown tool is the caller's error, not the server's: named, not failed, on both doors.
    let made_up = span(&spans, "tools/call madeup__tool", &[]);
    has(
        made_up,
        &[
            ("rpc.response.status_code", Some("NOT_FOUND")),
            ("toolhost.outcome", Some("unknown_tool")),
            ("error.type", None),
            ("gen_ai.tool.name", None),
        ],
    );
    assert_ne!(made_up.status, ERROR);

    // --- Upstream client spans, over a pipe and over TCP, in both eras.
    let to_piped = span(&spans, "tools/call echo", &[("toolhost.server", "piped")]);
    assert_eq!(to_piped.kind, CLIENT);
    has(
        to_piped,
        &[
            ("mcp.method.name", Some("tools/call")),
            ("gen_ai.tool.name", Some("echo")),
            ("gen_ai.operation.name", Some("execute_tool")),
            ("network.transport", Some("pipe")),
            ("mcp.protocol.version", Some(LEGACY)),
            ("server.address", None),
            ("mcp.session.id", None),
        ],
    );
    assert!(to_piped.attr("jsonrpc.request.id").is_some_and(|id| id.parse::<u64>().is_ok()));
    let to_piped_modern = span(&spans, "tools/call echo", &[("toolhost.server", "piped_modern")]);
    has(to_piped_modern, &[("mcp.protocol.version", Some(MODERN)), ("network.transport", Some("pipe"))]);
    let to_remote = span(&spans, "tools/call t0", &[("toolhost.server", "remote")]);
    let port = remote.addr.port().to_string();
    has(
        to_remote,
        &[
            ("network.transport", Some("tcp")),
            ("network.protocol.name", Some("http")),
            ("server.address", Some("127.0.0.1")),
            ("server.port", Some(&port)),
            // The version the test server agrees to.
            ("mcp.protocol.version", Some("2025-06-18")),
        ],
    );
    assert!(to_remote.attr("mcp.session.id").is_some_and(|id| !id.is_empty()), "a 2025 HTTP session's id: {to_remote:#?}");
    let to_remote_modern = span(&spans, "tools/call t0", &[("toolhost.server", "remote_modern")]);
    has(to_remote_modern, &[("mcp.protocol.version", Some(MODERN)), ("mcp.session.id", None), ("network.transport", Some("tcp"))]);
    let to_fail = span(&spans, "tools/call fail", &[("toolhost.server", "piped")]);
    has(to_fail, &[("error.type", Some("tool_error"))]);
    assert_eq!(to_fail.status, ERROR);
    // The handshakes and the listings are client operations too.
    assert_eq!(span(&spans, "initialize", &[("toolhost.server", "piped")]).kind, CLIENT);
    has(span(&spans, "server/discover", &[("toolhost.server", "piped_modern")]), &[("mcp.protocol.version", Some(MODERN))]);
    let listing = span(&spans, "tools/list", &[("toolhost.server", "remote")]);
    assert_eq!(listing.kind, CLIENT);
    has(listing, &[("toolhost.page", Some("1")), ("gen_ai.operation.name", None)]);

    // --- The MCP door: every request is a server span.
    let over_socket = span(&spans, "tools/call piped_modern__echo", &[("toolhost.front_door", "mcp")]);
    assert_eq!(over_socket.kind, SERVER);
    has(
        over_socket,
        &[
            ("network.transport", Some("unix")),
            ("network.protocol.name", None),
            ("mcp.protocol.version", Some(LEGACY)),
            ("jsonrpc.request.id", Some("7")),
            ("gen_ai.tool.name", Some("piped_modern__echo")),
            ("gen_ai.operation.name", Some("execute_tool")),
            ("mcp.session.id", None),
        ],
    );
    has(span(&spans, "initialize", &[("toolhost.front_door", "mcp")]), &[("mcp.protocol.version", Some(LEGACY))]);
    let unknown_tool = span(&spans, "tools/call nosuch__tool", &[]);
    // Invalid params is the caller's error, not the server's.
    has(
        unknown_tool,
        &[
            ("rpc.response.status_code", Some("-32602")),
            ("toolhost.outcome", Some("unknown_tool")),
            ("error.type", None),
            ("gen_ai.tool.name", None),
        ],
    );
    assert_ne!(unknown_tool.status, ERROR);
    has(span(&spans, "_OTHER", &[]), &[("mcp.method.name", Some("_OTHER")), ("rpc.response.status_code", Some("-32601"))]);
    let in_session = span(&spans, "tools/call remote__t0", &[("toolhost.front_door", "mcp")]);
    has(
        in_session,
        &[
            ("mcp.session.id", Some(&session)),
            ("network.transport", Some("tcp")),
            ("network.protocol.name", Some("http")),
            ("client.address", Some("127.0.0.1")),
            ("mcp.protocol.version", Some(LEGACY)),
        ],
    );
    assert!(in_session.attr("client.port").is_some());
    let stateless = span(&spans, "tools/call remote_modern__t0", &[("toolhost.front_door", "mcp")]);
    has(stateless, &[("mcp.protocol.version", Some(MODERN)), ("mcp.session.id", None), ("jsonrpc.request.id", Some("\"m-3\""))]);

    // --- The histograms, in seconds, with the conventions' attributes.
    for name in
        ["mcp.client.operation.duration", "mcp.server.operation.duration", "mcp.client.session.duration", "mcp.server.session.duration"]
    {
        let of: Vec<&Point> = points.iter().filter(|p| p.metric == name).collect();
        assert!(!of.is_empty(), "{name} was not exported");
        assert!(of.iter().all(|p| p.unit == "s"), "{name} is in seconds");
    }
    let client_ops = "mcp.client.operation.duration";
    point(
        &points,
        client_ops,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "echo"),
            ("gen_ai.operation.name", "execute_tool"),
            ("network.transport", "pipe"),
            ("mcp.protocol.version", LEGACY),
            ("toolhost.server", "piped"),
        ],
        &["error.type", "server.address"],
    );
    point(&points, client_ops, &[("toolhost.server", "piped"), ("gen_ai.tool.name", "fail"), ("error.type", "tool_error")], &[]);
    point(
        &points,
        client_ops,
        &[("toolhost.server", "remote"), ("server.address", "127.0.0.1"), ("server.port", &port), ("network.protocol.name", "http")],
        &[],
    );
    point(&points, client_ops, &[("mcp.method.name", "tools/list"), ("toolhost.server", "remote_modern")], &["gen_ai.tool.name"]);
    point(&points, client_ops, &[("mcp.method.name", "initialize"), ("toolhost.server", "piped")], &[]);
    point(&points, client_ops, &[("mcp.method.name", "server/discover"), ("toolhost.server", "piped_modern")], &[]);
    let server_ops = "mcp.server.operation.duration";
    point(
        &points,
        server_ops,
        &[("toolhost.front_door", "grpc"), ("gen_ai.tool.name", "piped__echo"), ("network.transport", "unix")],
        &["error.type"],
    );
    point(&points, server_ops, &[("toolhost.front_door", "grpc"), ("gen_ai.tool.name", "piped__fail"), ("error.type", "tool_error")], &[]);
    point(
        &points,
        server_ops,
        &[("toolhost.front_door", "mcp"), ("gen_ai.tool.name", "piped_modern__echo"), ("mcp.protocol.version", LEGACY)],
        &["error.type", "client.address"],
    );
    point(
        &points,
        server_ops,
        &[("toolhost.front_door", "mcp"), ("rpc.response.status_code", "-32602")],
        &["error.type", "gen_ai.tool.name"],
    );
    point(&points, server_ops, &[("mcp.method.name", "_OTHER")], &[]);
    let dump = format!("{points:?}");
    for made_up in ["madeup__tool", "nosuch__tool", "x/made-up"] {
        assert!(!dump.contains(made_up), "a caller's made-up name {made_up:?} became a metric attribute");
    }
    // Sessions: only the 2025 ones, on both sides.
    let client_sessions = collector.points_of("mcp.client.session.duration");
    point(
        &client_sessions,
        "mcp.client.session.duration",
        &[("toolhost.server", "piped"), ("mcp.protocol.version", LEGACY)],
        &["error.type"],
    );
    point(&client_sessions, "mcp.client.session.duration", &[("toolhost.server", "remote"), ("server.address", "127.0.0.1")], &[]);
    assert!(
        client_sessions.iter().all(|p| !p.attributes.values().any(|v| v == "piped_modern" || v == "remote_modern")),
        "a 2026-07-28 server has no session: {client_sessions:#?}"
    );
    let server_sessions = collector.points_of("mcp.server.session.duration");
    point(&server_sessions, "mcp.server.session.duration", &[("mcp.protocol.version", LEGACY), ("network.protocol.name", "http")], &[]);
    point(&server_sessions, "mcp.server.session.duration", &[("mcp.protocol.version", LEGACY)], &["network.protocol.name"]);
}
