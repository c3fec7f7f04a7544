//! Streamable HTTP upstreams (legacy shape) against the scripted HTTP server.

use std::time::Duration;

use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::http_server::{HttpMcpServer, Script};

pub(crate) fn http_table(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[servers.{name}]\nurl = {url:?}\nrequest_timeout = \"5s\"\nrestart = {{ initial_backoff = \"50ms\", max_backoff = \"300ms\" }}\n{extra}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_headers_pages_calls_and_the_get_stream() {
    let server = HttpMcpServer::start(Script { tools: tools("t", 5), page_size: 2, ..Script::default() }).await;
    let dir = TestDir::new();
    let app = start(dir.config(&http_table("remote", &server.url(), ""))).await;
    let view = wait_for_server(app.registry(), "remote", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view).len(), 5);
    assert_eq!(view.hello().unwrap().protocol_version, "2025-06-18");

    let mut client = client(&app).await;
    let called = client
        .call_tool(pb::CallToolRequest { qualified_name: "remote__t1".into(), arguments_json: r#"{"k":1}"#.into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(called.content_json.contains(r#"{\"k\":1}"#), "{}", called.content_json);

    let seen = server.seen();
    let initialize = seen.iter().find(|s| s.body["method"] == "initialize").unwrap();
    assert!(!initialize.headers.contains_key("mcp-session-id"), "initialize carries no session id");
    assert!(initialize.headers["accept"].contains("text/event-stream") && initialize.headers["accept"].contains("application/json"));
    // The era probe came first, in the modern shape; this legacy server refused it.
    let probe = seen.iter().find(|s| s.body["method"] == "server/discover").expect("a server/discover probe");
    assert_eq!(probe.headers.get("mcp-method").map(String::as_str), Some("server/discover"));
    assert_eq!(probe.headers.get("mcp-protocol-version").map(String::as_str), Some("2026-07-28"));
    assert!(!probe.headers.contains_key("mcp-session-id"));
    for later in seen.iter().filter(|s| s.method == "POST" && s.body["method"] != "initialize" && s.body["method"] != "server/discover") {
        assert_eq!(later.headers.get("mcp-session-id").map(String::as_str), Some("session-1"), "{:?}", later.body);
        assert_eq!(later.headers.get("mcp-protocol-version").map(String::as_str), Some("2025-06-18"), "{:?}", later.body);
    }
    assert!(seen.iter().any(|s| s.method == "GET"), "the GET stream for server notifications is open");

    // A change announced on the GET stream publishes a new generation.
    server.set_tools(tools("t", 6));
    server.announce_change();
    let view = wait_for_server(app.registry(), "remote", "generation 2", |v| v.generation_number() == 2).await;
    assert_eq!(tool_names(&view).len(), 6);
    app.shutdown().await;
    assert!(
        server.seen().iter().any(|s| s.method == "DELETE" && s.headers.get("mcp-session-id").map(String::as_str) == Some("session-1")),
        "the session is deleted on shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_session_means_a_new_initialize_and_a_full_enumeration() {
    let server = HttpMcpServer::start(Script { tools: tools("t", 3), page_size: 2, sse_responses: true, ..Script::default() }).await;
    let dir = TestDir::new();
    let app = start(dir.config(&http_table("forgetful", &server.url(), ""))).await;
    wait_for_server(app.registry(), "forgetful", "ready", |v| v.state() == ServerState::Ready).await;
    server.forget_sessions();
    let mut client = client(&app).await;
    let lost = client.call_tool(pb::CallToolRequest { qualified_name: "forgetful__t0".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(lost.code(), tonic::Code::Unavailable, "the call in flight fails as retryable, never replayed: {lost:?}");

    let view =
        wait_for_server(app.registry(), "forgetful", "ready again", |v| v.state() == ServerState::Ready && v.num_restarts() >= 1).await;
    assert_eq!(tool_names(&view).len(), 3);
    let seen = server.seen();
    let initializes: Vec<_> = seen.iter().filter(|s| s.body["method"] == "initialize").collect();
    assert_eq!(initializes.len(), 2);
    assert!(!initializes[1].headers.contains_key("mcp-session-id"), "the new initialize carries no session id");
    let second = seen.iter().rposition(|s| s.body["method"] == "initialize").unwrap();
    let lists: Vec<_> = seen[second..].iter().filter(|s| s.body["method"] == "tools/list").collect();
    assert_eq!(lists.len(), 2, "a full enumeration of both pages follows");
    assert!(lists[0].body["params"].get("cursor").is_none());
    assert!(lists.iter().all(|s| s.headers.get("mcp-session-id").map(String::as_str) == Some("session-2")));
    assert_eq!(seen.iter().filter(|s| s.body["method"] == "tools/call").count(), 1, "the lost call was not replayed");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_stream_that_closes_early_is_resumed_with_last_event_id() {
    let server = HttpMcpServer::start(Script { tools: tools("t", 1), drop_call_streams: true, ..Script::default() }).await;
    let dir = TestDir::new();
    let app = start(dir.config(&http_table("resumable", &server.url(), ""))).await;
    wait_for_server(app.registry(), "resumable", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let called = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "resumable__t0".into(),
            arguments_json: r#"{"x":2}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(called.content_json.contains("x"), "{}", called.content_json);
    let resume = server.seen().into_iter().find(|s| s.method == "GET" && s.headers.contains_key("last-event-id")).expect("a resuming GET");
    assert!(resume.headers["last-event-id"].starts_with("call-"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_from_the_environment_and_a_refusal_is_a_visible_state() {
    // The token is an environment variable every machine has (setting one would need unsafe
    // code): the configured header names it, and toolhost must expand it.
    let token = std::env::var("HOME").expect("HOME is set");
    let server = HttpMcpServer::start(Script { tools: tools("t", 1), token: Some(token.clone()), ..Script::default() }).await;
    let dir = TestDir::new();
    let ok = "headers = { Authorization = \"Bearer ${HOME}\" }";
    let app = start(dir.config(&format!(
        "{}\n{}",
        http_table("trusted", &server.url(), ok),
        http_table("refused", &server.url(), "headers = { Authorization = \"Bearer wrong\" }")
    )))
    .await;
    wait_for_server(app.registry(), "trusted", "ready", |v| v.state() == ServerState::Ready).await;
    let view = wait_for_server(app.registry(), "refused", "auth failed", |v| v.state() == ServerState::AuthFailed).await;
    assert!(view.last_error().map(str::to_owned).unwrap().contains("401"), "{:?}", view.last_error());
    // No tight reconnect loop: two more refused attempts take at least the backoff's lower
    // bounds (initial_backoff 50 ms: at least 25 ms, then at least 50 ms).
    let (first, since) = (view.num_restarts(), std::time::Instant::now());
    wait_for_server(app.registry(), "refused", "two more attempts", |v| v.num_restarts() >= first + 2).await;
    assert!(since.elapsed() >= Duration::from_millis(70), "two reconnects in {:?}", since.elapsed());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_is_not_streamable_http_is_refused_clearly() {
    // A listener that answers every request 405, as an old HTTP+SSE server answers a POST to its SSE URL.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let _ = stream.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        }
    });
    let dir = TestDir::new();
    let app = start(dir.config(&http_table("old", &url, ""))).await;
    let view = wait_for_server(app.registry(), "old", "failed", |v| v.state() == ServerState::Failed).await;
    assert!(view.last_error().map(str::to_owned).unwrap().contains("HTTP+SSE"), "{:?}", view.last_error());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_verify_the_server_against_the_configured_ca() {
    let (server, cert_pem) = HttpMcpServer::start_tls(Script { tools: tools("t", 2), ..Script::default() }).await;
    let dir = TestDir::new();
    std::fs::write(dir.path("server-ca.pem"), cert_pem).unwrap();
    let trusted = http_table("secure", &server.url(), "ca_file = \"server-ca.pem\"");
    // Without the private CA the public roots apply, and the self-signed certificate is refused.
    let untrusted = http_table("unverified", &server.url(), "");
    let app = start(dir.config(&format!("{trusted}\n{untrusted}"))).await;
    let view = wait_for_server(app.registry(), "secure", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view).len(), 2);
    let refused = wait_for_server(app.registry(), "unverified", "refused", |v| v.num_restarts() >= 1 && v.last_error().is_some()).await;
    assert!(refused.generation().is_none());
    assert!(refused.last_error().map(str::to_owned).unwrap().contains("certificate"), "{:?}", refused.last_error());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_http_server_gets_the_2026_headers_and_a_listen_stream() {
    let server = HttpMcpServer::start(Script { tools: tools("t", 3), page_size: 2, modern: true, ..Script::default() }).await;
    let dir = TestDir::new();
    let app = start(dir.config(&http_table("stateless", &server.url(), ""))).await;
    let view = wait_for_server(app.registry(), "stateless", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(view.hello().cloned().unwrap().protocol_version, "2026-07-28");
    assert_eq!(tool_names(&view).len(), 3);
    let mut client = client(&app).await;
    client
        .call_tool(pb::CallToolRequest { qualified_name: "stateless__t2".into(), arguments_json: "{}".into(), ..Default::default() })
        .await
        .unwrap();
    // The listen stream is open and acknowledged (the acknowledgment makes toolhost list again,
    // in case it missed a change): a change reaches toolhost on it.
    wait_for_listen_acknowledged(&app, "stateless").await;
    server.set_tools(tools("t", 4));
    server.announce_change();
    wait_for_server(app.registry(), "stateless", "generation 2", |v| v.generation_number() == 2).await;
    let seen = server.seen();
    assert!(!seen.iter().any(|s| s.body["method"] == "initialize"), "no initialize to a modern server");
    assert!(!seen.iter().any(|s| s.method == "GET" || s.headers.contains_key("mcp-session-id")), "no sessions, no GET stream");
    let call = seen.iter().find(|s| s.body["method"] == "tools/call").unwrap();
    assert_eq!(call.headers.get("mcp-name").map(String::as_str), Some("t2"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_whose_caller_gave_up_is_dropped_whatever_the_server_keeps_sending() {
    let server = HttpMcpServer::start(Script { tools: tools("t", 1), stall_calls: true, ..Script::default() }).await;
    let dir = TestDir::new();
    let app = start(dir.config(&http_table("stalling", &server.url(), "max_concurrent_calls = 100"))).await;
    wait_for_server(app.registry(), "stalling", "ready", |v| v.state() == ServerState::Ready).await;
    let client = client(&app).await;
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut request = tonic::Request::new(pb::CallToolRequest { qualified_name: "stalling__t0".into(), ..Default::default() });
                request.set_timeout(Duration::from_millis(300));
                client.call_tool(request).await
            })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap().is_err(), "no answer ever comes");
    }
    // Every stalled stream is closed by toolhost once its caller is gone, keep-alives or not.
    eventually("every stalled exchange closes once its caller left", async || match server.stalled_open() {
        0 => Ok(()),
        open => Err(format!("{open} still open")),
    })
    .await;
    // The session still works for the next caller.
    let view = app.registry().server("stalling").unwrap();
    assert_eq!(view.state(), ServerState::Ready);
    app.shutdown().await;
}

/// Waits until the server's subscriptions/listen was acknowledged: toolhost answers the
/// acknowledgment with a list_changed enumeration, which the store records.
pub(crate) async fn wait_for_listen_acknowledged(app: &toolhost::app::App, server: &str) {
    eventually("subscriptions/listen is acknowledged", async || {
        let records = app.store().generations().enumerations(server, 200).await.unwrap();
        records.iter().any(|r| r.reason == toolhost::catalog::record::EnumerationReason::ListChanged).then_some(())
    })
    .await;
}

/// A remote server that dies in the middle of a call may have run it: the agent is told the
/// outcome is unknown (never a server error it could take for "not done"), on both doors and in
/// both protocol eras, and the call is sent exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_a_dying_http_server_has_an_unknown_outcome_on_both_doors() {
    use crate::mcp_endpoint::{Line, mcp_section, mcp_socket};
    for modern in [false, true] {
        let server = HttpMcpServer::start(Script { tools: tools("t", 1), modern, die_on_call: true, ..Script::default() }).await;
        let dir = TestDir::new();
        let app = start(dir.config_with(&mcp_section(""), &http_table("remote", &server.url(), ""))).await;
        wait_for_server(app.registry(), "remote", "ready", |v| v.state() == ServerState::Ready).await;

        let mut client = client(&app).await;
        let cut = client
            .call_tool(pb::CallToolRequest { qualified_name: "remote__t0".into(), arguments_json: "{}".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!((cut.code(), error_info(&cut).0.as_str()), (tonic::Code::Unavailable, "OUTCOME_UNKNOWN"), "modern {modern}: {cut:?}");

        let mut mcp = Line::connect(&mcp_socket(&app)).await;
        mcp.initialize().await;
        let answer = mcp.request(7, "tools/call", serde_json::json!({"name": "remote__t0", "arguments": {}})).await;
        assert_eq!(answer["error"]["data"]["reason"], "OUTCOME_UNKNOWN", "modern {modern}: {answer}");

        let sent = server.seen().iter().filter(|s| s.body["method"] == "tools/call").count();
        assert_eq!(sent, 2, "modern {modern}: each call was sent once and never replayed");
        app.shutdown().await;
    }
}
