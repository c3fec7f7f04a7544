//! Traces and metrics: span names, attributes, events, links and parents checked with the SDK's
//! in-memory exporter, and an end-to-end export to an OTLP/gRPC receiver started by the test.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use opentelemetry::Value;
use opentelemetry::trace::{SpanKind, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use toolhost::api::pb;
use toolhost::registry::ServerState;
use tracing_subscriber::layer::SubscriberExt;

use crate::collector::Collector;
use crate::harness::*;

/// The process-wide in-memory exporter; spans of every test land here, told apart by server name.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("info"))
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("toolhost")));
        tracing::subscriber::set_global_default(subscriber).expect("the test binary's only global subscriber");
        // The provider must outlive every test.
        std::mem::forget(provider);
        exporter
    })
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> String {
    attr(span, key).map(|v| v.as_str().into_owned()).unwrap_or_default()
}

/// Finished spans whose name mentions `needle`, waiting for them to appear.
async fn spans_named(needle: &str, at_least: usize) -> Vec<SpanData> {
    eventually(&format!("{at_least} spans named like {needle:?}"), async || {
        let spans: Vec<SpanData> = exporter().get_finished_spans().unwrap().into_iter().filter(|s| s.name.contains(needle)).collect();
        (spans.len() >= at_least).then_some(spans)
    })
    .await
}

fn event<'a>(span: &'a SpanData, name: &str) -> Option<&'a opentelemetry::trace::Event> {
    span.events.iter().find(|e| e.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_continues_the_agents_trace_and_passes_it_upstream() {
    exporter();
    let dir = TestDir::new();
    let script = dir.script("traced", json!({}));
    let app = start(dir.config(&server_table("traced", &script, ""))).await;
    wait_for_server(app.registry(), "traced", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(pb::CallToolRequest {
        qualified_name: "traced__echo".into(),
        arguments_json: r#"{"text":"hi"}"#.into(),
        ..Default::default()
    });
    request.metadata_mut().insert("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01").parse().unwrap());
    client.call_tool(request).await.unwrap();

    let server_span = spans_named("tools/call traced__echo", 1).await.remove(0);
    assert_eq!(server_span.span_kind, SpanKind::Server);
    assert_eq!(server_span.span_context.trace_id().to_string(), trace_id, "the agent's trace continues");
    assert_eq!(server_span.parent_span_id.to_string(), "00f067aa0ba902b7");
    assert_eq!(attr_str(&server_span, "mcp.method.name"), "tools/call");
    assert_eq!(attr_str(&server_span, "toolhost.server"), "traced");
    assert_eq!(attr(&server_span, "toolhost.generation"), Some(&Value::I64(1)));
    assert_eq!(attr_str(&server_span, "toolhost.definition_hash").len(), 64);
    assert!(attr(&server_span, "toolhost.catalog.revision").is_some());

    let upstream = spans_named("tools/call echo", 1).await.into_iter().find(|s| attr_str(s, "toolhost.server") == "traced").unwrap();
    assert_eq!(upstream.span_kind, SpanKind::Client);
    assert_eq!(upstream.parent_span_id, server_span.span_context.span_id(), "the upstream call is a child of the gRPC span");
    assert_eq!(attr_str(&upstream, "gen_ai.tool.name"), "echo");
    assert_eq!(attr_str(&upstream, "mcp.protocol.version"), "2025-11-25");
    assert_eq!(attr_str(&upstream, "network.transport"), "pipe");
    let request_id = attr_str(&upstream, "jsonrpc.request.id");
    let received = dir.received("traced");
    let call = received.iter().find(|m| m["method"] == "tools/call").unwrap();
    assert_eq!(call["id"].to_string(), request_id);
    let traceparent = call["params"]["_meta"]["traceparent"].as_str().expect("traceparent in params._meta");
    assert_eq!(traceparent, format!("00-{trace_id}-{}-01", upstream.span_context.span_id()));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_continues_the_trace_from_meta_or_from_http_headers() {
    use crate::mcp_endpoint::{JSON_HEADERS, Line, http, mcp_http, mcp_section, mcp_socket};
    exporter();
    let dir = TestDir::new();
    let script = dir.script("mcptraced", json!({}));
    let app = start(dir.config_with(&mcp_section(""), &server_table("mcptraced", &script, ""))).await;
    wait_for_server(app.registry(), "mcptraced", "ready", |v| v.state() == ServerState::Ready).await;
    let in_meta = "4bf92f3577b34da6a3ce929d0e0e4731";
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    let params = json!({"name": "mcptraced__echo", "arguments": {"text": "a"}, "_meta": {"traceparent": format!("00-{in_meta}-00f067aa0ba902b7-01")}});
    assert!(mcp.request(1, "tools/call", params).await["result"].is_object());
    let in_header = "4bf92f3577b34da6a3ce929d0e0e4732";
    let traceparent = format!("00-{in_header}-00f067aa0ba902b8-01");
    let headers = [
        JSON_HEADERS[0],
        JSON_HEADERS[1],
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "mcptraced__add"),
        ("traceparent", traceparent.as_str()),
    ];
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"mcptraced__add","arguments":{{"a":1,"b":2}},"_meta":{}}}}}"#,
        crate::mcp_endpoint::MODERN_META
    );
    let (status, _, answer) = http(mcp_http(&app), "POST", "/mcp", &headers, &body).await;
    assert_eq!(status, 200, "{answer}");

    let from_meta = spans_named("tools/call mcptraced__echo", 1).await.remove(0);
    assert_eq!(from_meta.span_kind, SpanKind::Server);
    assert_eq!(from_meta.span_context.trace_id().to_string(), in_meta);
    assert_eq!(attr_str(&from_meta, "toolhost.front_door"), "mcp");
    assert_eq!(attr_str(&from_meta, "toolhost.server"), "mcptraced");
    let from_header = spans_named("tools/call mcptraced__add", 1).await.remove(0);
    assert_eq!(from_header.span_context.trace_id().to_string(), in_header);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enumeration_shows_the_chain_from_notification_to_watchers() {
    exporter();
    let dir = TestDir::new();
    let file = dir.path("tools.json");
    std::fs::write(&file, json!(tools("t", 5)).to_string()).unwrap();
    let script =
        dir.script("chain", json!({"tools_file": file, "watch_tools_file": true, "page_size": 2, "cursor_prefix": "SECRET-CURSOR-"}));
    let app = start(dir.config(&server_table("chain", &script, ""))).await;
    wait_for_server(app.registry(), "chain", "ready", |v| v.state() == ServerState::Ready).await;
    std::fs::write(&file, json!(tools("t", 6)).to_string()).unwrap();
    wait_for_server(app.registry(), "chain", "generation 2", |v| v.generation_number() == 2).await;

    let refresh = spans_named("notifications/tools/list_changed chain", 1).await.remove(0);
    assert_eq!(attr_str(&refresh, "toolhost.enumeration.reason"), "list_changed");
    assert!(event(&refresh, "notification received").is_some());
    assert!(refresh.links.iter().next().is_some(), "the refresh links to its session's span");
    let trace = refresh.span_context.trace_id();
    let all: Vec<SpanData> = exporter().get_finished_spans().unwrap().into_iter().filter(|s| s.span_context.trace_id() == trace).collect();
    let pass = all.iter().find(|s| s.name == "toolhost.enumerate chain").expect("a pass span");
    assert_eq!(pass.parent_span_id, refresh.span_context.span_id());
    assert_eq!(attr(pass, "toolhost.enumeration.pages"), Some(&Value::I64(3)));
    assert_eq!(attr_str(pass, "toolhost.enumeration.outcome"), "complete");
    let pages: Vec<&SpanData> = all.iter().filter(|s| s.name == "tools/list").collect();
    assert_eq!(pages.len(), 3, "one client span per page");
    assert!(pages.iter().all(|p| p.parent_span_id == pass.span_context.span_id()
        && p.span_kind == SpanKind::Client
        && attr(p, "jsonrpc.request.id").is_some()
        && attr_str(p, "toolhost.server") == "chain"));
    let numbers: Vec<Option<&Value>> = pages.iter().map(|p| attr(p, "toolhost.page")).collect();
    assert_eq!(numbers, [Some(&Value::I64(1)), Some(&Value::I64(2)), Some(&Value::I64(3))]);
    let commit = all.iter().find(|s| s.name == "toolhost.commit chain").expect("a commit span");
    assert_eq!(commit.parent_span_id, refresh.span_context.span_id());
    assert_eq!((attr(commit, "toolhost.diff.added"), attr(commit, "toolhost.generation")), (Some(&Value::I64(1)), Some(&Value::I64(2))));
    assert!(event(commit, "watchers notified").is_some());
    for span in &all {
        for kv in &span.attributes {
            assert!(!kv.value.as_str().contains("SECRET-CURSOR-"), "{} carries a cursor in {}", span.name, kv.key);
        }
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_race_is_an_event_linked_to_the_enumeration_behind_it() {
    exporter();
    let dir = TestDir::new();
    let file = dir.path("tools.json");
    std::fs::write(&file, json!([{"name": "stays"}, {"name": "goes"}, {"name": "ghost"}]).to_string()).unwrap();
    let script = dir.script("racing", json!({"tools_file": file, "watch_tools_file": true, "unknown_tools_on_call": ["ghost"]}));
    let app = start(dir.config(&server_table("racing", &script, ""))).await;
    wait_for_server(app.registry(), "racing", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let listed = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner();
    let stays_hash = listed.tools.iter().find(|t| t.name == "stays").unwrap().definition_hash.clone();
    std::fs::write(&file, json!([{"name": "stays", "description": "changed"}, {"name": "ghost"}]).to_string()).unwrap();
    wait_for_server(app.registry(), "racing", "generation 2", |v| v.generation_number() == 2).await;
    let publishing = spans_named("notifications/tools/list_changed racing", 1).await.remove(0);

    let call = |name: &str, hash: &str| pb::CallToolRequest {
        qualified_name: name.into(),
        expected_definition_hash: hash.into(),
        ..Default::default()
    };
    client.call_tool(call("racing__goes", "")).await.unwrap_err();
    client.call_tool(call("racing__stays", &stays_hash)).await.unwrap_err();
    client.call_tool(call("racing__ghost", "")).await.unwrap_err();

    let kinds: HashMap<String, SpanData> = spans_named("tools/call racing__", 3)
        .await
        .into_iter()
        .map(|span| {
            let kind = event(&span, "toolhost.stale_tool")
                .and_then(|e| {
                    e.attributes.iter().find(|kv| kv.key.as_str() == "toolhost.race.kind").map(|kv| kv.value.as_str().into_owned())
                })
                .unwrap_or_default();
            (kind, span)
        })
        .collect();
    for kind in ["removed_before_call", "changed_since_listed"] {
        let span = &kinds[kind];
        assert_eq!(attr_str(span, "error.type"), "stale_tool");
        let link = span.links.iter().next().unwrap_or_else(|| panic!("{kind}: no link"));
        assert_eq!(
            link.span_context.span_id(),
            publishing.span_context.span_id(),
            "{kind} links to the enumeration that published generation 2"
        );
    }
    assert_eq!(attr_str(&kinds["changed_since_listed"], "toolhost.listed.definition_hash"), stays_hash);
    // The upstream race triggered a refresh whose trace links back to the call.
    let ghost_call = &kinds["upstream_unknown_tool"];
    let triggered = eventually("a stale_tool refresh span", async || {
        spans_named("toolhost.refresh racing", 1).await.into_iter().find(|s| attr_str(s, "toolhost.enumeration.reason") == "stale_tool")
    })
    .await;
    assert!(triggered.links.iter().any(|l| l.span_context.span_id() == ghost_call.span_context.span_id()), "the refresh links to the call");
    app.shutdown().await;
}

/// Starts `toolhost serve` on `config` (which listens on `socket`) with extra environment, its
/// log beside `config` (`NAME.daemon.log`: a scripted server's own log is `NAME.log`), and
/// connects to it.
pub(crate) async fn serve(
    config: &std::path::Path,
    socket: std::path::PathBuf,
    env: &[(&str, &str)],
) -> (std::process::Child, pb::tool_host_client::ToolHostClient<tonic::transport::Channel>) {
    let daemon = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(config.with_extension("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let addr = toolhost::config::ListenAddr::Unix(socket);
    let channel = eventually("the daemon listens", async || toolhost::cli::connect(&addr).await.ok()).await;
    (daemon, pb::tool_host_client::ToolHostClient::new(channel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_exports_spans_and_metrics_to_an_otlp_receiver() {
    let (receiver, endpoint, collector) = Collector::start().await;

    let dir = TestDir::new();
    let script = dir.script("wire", json!({}));
    let config = dir.path("wire.toml");
    std::fs::write(
        &config,
        format!("[store]\npath = \"wire.db\"\n[grpc]\nlisten = [\"unix:wire.sock\"]\n{}", server_table("wire", &script, "")),
    )
    .unwrap();
    let (mut daemon, mut client) =
        serve(&config, dir.path("wire.sock"), &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "toolhost-e2e")]).await;
    let call = pb::CallToolRequest { qualified_name: "wire__add".into(), arguments_json: r#"{"a":1,"b":2}"#.into(), ..Default::default() };
    eventually("the server answers", async || match client.call_tool(call.clone()).await {
        Ok(_) => Some(()),
        Err(status) if status.code() == tonic::Code::Unavailable || status.code() == tonic::Code::NotFound => None,
        Err(status) => panic!("{status:?}"),
    })
    .await;
    // A clean stop flushes both exporters.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success());
    let spans = receiver.spans();
    let call_span = spans
        .iter()
        .find(|span| span.name == "tools/call wire__add")
        .unwrap_or_else(|| panic!("no call span in {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()));
    assert_eq!(call_span.service, "toolhost-e2e", "service.name from OTEL_SERVICE_NAME");
    assert!(spans.iter().any(|span| span.name == "tools/call add"), "the upstream child span arrived");
    assert!(spans.iter().any(|span| span.name == "toolhost.commit wire"), "the enumeration's spans arrived");
    let metrics: Vec<String> = receiver.points().into_iter().map(|point| point.metric).collect();
    for name in [
        "mcp.client.operation.duration",
        "toolhost.calls",
        "toolhost.enumerations",
        "toolhost.sessions",
        "toolhost.tools",
        "toolhost.tools.held",
    ] {
        assert!(metrics.iter().any(|m| m == name), "metric {name} missing from {metrics:?}");
    }
    collector.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_neither_blocks_calls_nor_the_stop() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = TestDir::new();
    let script = dir.script("down", json!({}));
    let config = dir.path("down.toml");
    std::fs::write(&config, format!("[store]\npath = \"down.db\"\n[grpc]\nlisten = [\"unix:down.sock\"]\n[telemetry]\notlp_endpoint = \"{endpoint}\"\nmetrics_interval = \"100ms\"\n{}", server_table("down", &script, ""))).unwrap();
    let (mut daemon, mut client) = serve(&config, dir.path("down.sock"), &[]).await;
    let call = pb::CallToolRequest { qualified_name: "down__echo".into(), arguments_json: "{}".into(), ..Default::default() };
    eventually("the server answers", async || client.call_tool(call.clone()).await.ok()).await;
    for _ in 0..50 {
        client.call_tool(call.clone()).await.expect("a call while the collector is down");
    }
    let stopping = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success(), "the daemon stops cleanly");
    assert!(stopping.elapsed() < Duration::from_secs(15), "the final flush is bounded ({:?})", stopping.elapsed());
}

#[test]
fn the_shipped_dashboard_is_valid_json_over_the_metrics_the_daemon_emits() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/toolhost-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dashboard["uid"], "toolhost");
    // Prometheus names of the instruments in src/telemetry/metrics.rs, as the collector exports them.
    for name in [
        "toolhost_stale_tool_races_total",
        "toolhost_calls_total",
        "mcp_client_operation_duration_seconds_bucket",
        "toolhost_list_changed_duration_seconds_bucket",
        "toolhost_enumerations_total",
        "toolhost_sessions",
        "toolhost_tools",
        "toolhost_tools_held",
        "toolhost_server_restarts_total",
        "toolhost_agent_limited_total",
        "mcp_server_operation_duration_seconds_bucket",
        "mcp_client_session_duration_seconds_bucket",
        "mcp_server_session_duration_seconds_bucket",
        "toolhost_enumeration_duration_seconds_bucket",
    ] {
        assert!(text.contains(name), "the dashboard does not chart {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_an_upstream_echoes_appears_in_no_output_at_all() {
    use crate::http_server::{HttpMcpServer, Script};
    let (receiver, endpoint, collector) = Collector::start().await;
    let calls_echo = HttpMcpServer::start(Script { tools: tools("t", 2), echo_authorization_on_call: true, ..Script::default() }).await;
    let list_echoes = HttpMcpServer::start(Script { tools: tools("t", 2), echo_authorization_on_list: true, ..Script::default() }).await;
    let dir = TestDir::new();
    let token = "tok-SECRET-4242-xyzzy";
    std::fs::write(dir.path("token"), format!("{token}\n")).unwrap();
    let header = format!("headers = {{ Authorization = \"Bearer ${{file:{}}}\" }}", dir.path("token").display());
    let table = |name: &str, url: &str| {
        format!(
            "[servers.{name}]\nurl = {url:?}\nrequest_timeout = \"5s\"\nrestart = {{ initial_backoff = \"50ms\", max_backoff = \"200ms\" }}\n{header}\n"
        )
    };
    let config = dir.path("secret.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"secret.db\"\n[grpc]\nlisten = [\"unix:secret.sock\"]\n{}\n{}",
            table("echoer", &calls_echo.url()),
            table("lister", &list_echoes.url())
        ),
    )
    .unwrap();
    let (mut daemon, mut client) =
        serve(&config, dir.path("secret.sock"), &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("RUST_LOG", "debug")]).await;
    let log = config.with_extension("daemon.log");
    let mut answers = String::new();
    let servers = eventually("echoer ready and lister failed", async || {
        let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
        let ready = servers.iter().any(|s| s.name == "echoer" && s.available);
        let failed = servers.iter().any(|s| s.name == "lister" && !s.last_error.is_empty());
        (ready && failed).then_some(servers)
    })
    .await;
    answers.push_str(&format!("{servers:?}"));
    let lister = servers.iter().find(|s| s.name == "lister").unwrap();
    assert!(lister.last_error.contains("[redacted]"), "the echo is there, scrubbed: {}", lister.last_error);
    for tool in ["echoer__t0", "echoer__t1"] {
        let status = client.call_tool(pb::CallToolRequest { qualified_name: tool.into(), ..Default::default() }).await.unwrap_err();
        assert!(status.message().contains("[redacted]"), "{tool}: {status:?}");
        answers.push_str(&format!("{status:?}"));
    }
    let history = client.history(pb::HistoryRequest { server: "lister".into(), limit: 10 }).await.unwrap().into_inner();
    answers.push_str(&format!("{history:?}"));
    assert!(calls_echo.seen().iter().any(|s| s.headers.get("authorization").is_some_and(|a| a.contains(token))), "the token was sent");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success());
    let exported = format!("{:?}", receiver.spans());
    assert!(exported.contains("tools/call"), "spans were exported");
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("[redacted]"), "the log shows where a secret was");
    for (what, text) in [("API answers", answers), ("the log", log_text), ("the OTLP export", exported)] {
        assert!(!text.contains(token), "the token leaked into {what}");
    }
    for file in ["secret.db", "secret.db-wal"] {
        let bytes = std::fs::read(dir.path(file)).unwrap_or_default();
        assert!(!bytes.windows(token.len()).any(|w| w == token.as_bytes()), "the token leaked into {file}");
    }
    collector.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_attributes_name_configured_servers_only() {
    let (receiver, endpoint, collector) = Collector::start().await;
    let dir = TestDir::new();
    let script = dir.script("labelled", json!({}));
    let config = dir.path("labels.toml");
    std::fs::write(
        &config,
        format!("[store]\npath = \"labels.db\"\n[grpc]\nlisten = [\"unix:labels.sock\"]\n{}", server_table("labelled", &script, "")),
    )
    .unwrap();
    let (mut daemon, mut client) = serve(&config, dir.path("labels.sock"), &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]).await;
    let known =
        pb::CallToolRequest { qualified_name: "labelled__echo".into(), arguments_json: r#"{"text":"x"}"#.into(), ..Default::default() };
    eventually("the server answers", async || client.call_tool(known.clone()).await.ok()).await;
    // Names a caller makes up: each would be a new time series if it became a label.
    for i in 0..20 {
        let made_up = pb::CallToolRequest { server: format!("madeupserver{i}"), name: "x".into(), ..Default::default() };
        assert!(client.call_tool(made_up).await.is_err());
        let made_up = pb::CallToolRequest { qualified_name: format!("madeupserver{i}__tool"), ..Default::default() };
        assert!(client.call_tool(made_up).await.is_err());
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(daemon.wait().unwrap().success());
    let dump = format!("{:?}", receiver.points());
    assert!(dump.contains("toolhost.calls") && dump.contains("labelled"), "the calls were measured");
    assert!(!dump.contains("madeupserver"), "a caller's made-up server name became a metric attribute");
    collector.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_an_http_server_is_a_tcp_client_span() {
    exporter();
    let server = crate::http_server::HttpMcpServer::start(crate::http_server::Script { tools: tools("t", 1), ..Default::default() }).await;
    let dir = TestDir::new();
    let table = format!("[servers.remote_tcp]\nurl = {:?}\nrequest_timeout = \"5s\"\n", server.url());
    let app = start(dir.config(&table)).await;
    wait_for_server(app.registry(), "remote_tcp", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    client
        .call_tool(pb::CallToolRequest { qualified_name: "remote_tcp__t0".into(), arguments_json: "{}".into(), ..Default::default() })
        .await
        .unwrap();
    let upstream = spans_named("tools/call t0", 1).await.into_iter().find(|s| attr_str(s, "toolhost.server") == "remote_tcp").unwrap();
    assert_eq!(upstream.span_kind, SpanKind::Client);
    assert_eq!(attr_str(&upstream, "network.transport"), "tcp", "an HTTP server is not a pipe");
    app.shutdown().await;
    let session = spans_named("toolhost.session remote_tcp", 1).await.remove(0);
    assert_eq!(attr_str(&session, "network.transport"), "tcp");
}
