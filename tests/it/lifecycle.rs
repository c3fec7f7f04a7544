//! The legacy lifecycle over stdio: handshake, version negotiation, server requests, hostile output.

use std::sync::atomic::Ordering;

use serde_json::json;
use toolhost::registry::ServerState;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_comes_first_and_offers_no_capabilities() {
    let dir = TestDir::new();
    let script = dir.script("hello", json!({"tools": tools("t", 1), "server_info": {"name": "hello-server", "version": "9.9"}}));
    let app = start(dir.config(&server_table("hello", &script, ""))).await;
    let view = wait_for_server(app.registry(), "hello", "ready", |v| v.state() == ServerState::Ready).await;
    let received = dir.received("hello");
    let methods: Vec<&str> = received.iter().filter_map(|m| m["method"].as_str()).collect();
    // Era detection: server/discover first (a legacy server refuses it), then the legacy handshake.
    assert_eq!(&methods[..4], ["server/discover", "initialize", "notifications/initialized", "tools/list"]);
    let init = &received[1]["params"];
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert_eq!(init["capabilities"], json!({}));
    assert_eq!(init["clientInfo"]["name"], "toolhost");
    let hello = view.hello().cloned().unwrap();
    assert_eq!(hello.protocol_version, "2025-11-25");
    assert!(hello.server_info.unwrap().contains("hello-server"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_disconnects_and_fails_the_server() {
    let dir = TestDir::new();
    let script = dir.script("future", json!({"protocol_version": "2099-01-01"}));
    let app = start(dir.config(&server_table("future", &script, ""))).await;
    let view = wait_for_server(app.registry(), "future", "failed", |v| v.state() == ServerState::Failed).await;
    assert!(view.last_error().map(str::to_owned).unwrap().contains("2099-01-01"), "{:?}", view.last_error());
    let methods = dir.methods("future");
    assert!(!methods.iter().any(|m| m == "notifications/initialized" || m == "tools/list"), "{methods:?}");
    // The refused process was stopped and reaped, not left behind.
    let first_pid = dir.pids("future")[0];
    assert!(!process_exists(first_pid), "the refused server process {first_pid} is still there");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_requests_toolhost_never_advertised_are_refused_and_ping_answered() {
    let dir = TestDir::new();
    let script = dir.script(
        "asker",
        json!({"tools": tools("t", 1), "server_requests": ["roots/list", "sampling/createMessage", "elicitation/create", "ping"]}),
    );
    let app = start(dir.config(&server_table("asker", &script, ""))).await;
    wait_for_server(app.registry(), "asker", "ready", |v| v.state() == ServerState::Ready).await;
    let answers = eventually("toolhost answers every server request", async || {
        let answers: Vec<_> =
            dir.received("asker").into_iter().filter(|m| m["id"].as_str().is_some_and(|id| id.starts_with("srv-"))).collect();
        (answers.len() == 4).then_some(answers)
    })
    .await;
    for answer in &answers[..3] {
        assert_eq!(answer["error"]["code"], -32601, "{answer}");
    }
    assert_eq!(answers[3]["result"], json!({}), "ping is answered with an empty result");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_chatter_and_oversized_lines_do_not_end_the_session() {
    let dir = TestDir::new();
    let script = dir.script(
        "messy",
        json!({"tools": tools("t", 3), "page_size": 1, "garbage_before_response": true, "stderr_lines": 20000, "oversized_line_bytes": 300000}),
    );
    let app = start(dir.config(&server_table("messy", &script, "max_message_bytes = 100000"))).await;
    let view = wait_for_server(app.registry(), "messy", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["t0", "t1", "t2"]);
    let session = view.session().cloned().unwrap();
    assert!(session.stats().num_bad_lines.load(Ordering::Relaxed) >= 4, "each garbage line is counted");
    assert_eq!(session.stats().num_oversized_lines.load(Ordering::Relaxed), 1);
    assert_eq!(view.num_restarts(), 0, "the session survived");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_initialize_is_retried_with_backoff() {
    let dir = TestDir::new();
    let script = dir.script("mute", json!({"hang_methods": ["initialize"]}));
    let app = start(dir.config(&server_table("mute", &script, "request_timeout = \"200ms\""))).await;
    let view = wait_for_server(app.registry(), "mute", "restarted twice", |v| v.num_restarts() >= 2).await;
    assert!(view.last_error().map(str::to_owned).unwrap().contains("initialize got no answer"), "{:?}", view.last_error());
    app.shutdown().await;
    for pid in dir.pids("mute") {
        assert!(!process_exists(pid), "process {pid} outlived its session");
    }
}
