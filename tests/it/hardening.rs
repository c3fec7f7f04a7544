//! Faults an outsider controls: status churn, hostile server output, panics, deep schemas,
//! oversized caller input. Each test failed on the code before the hardening work.

use serde_json::json;
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routine_refreshes_neither_bump_the_catalog_revision_nor_wake_watchers() {
    let dir = TestDir::new();
    let script = dir.script("steady", json!({"tools": tools("t", 3)}));
    let app = start(dir.config(&server_table("steady", &script, ""))).await;
    wait_for_server(app.registry(), "steady", "ready", |v| v.state() == ServerState::Ready).await;
    let revision = app.registry().snapshot().revision;
    let mut client = client(&app).await;
    let listed = client.list_tools(pb::ListToolsRequest { page_size: 1, ..Default::default() }).await.unwrap().into_inner();
    assert!(!listed.next_page_token.is_empty());

    // More refreshes than the registry keeps snapshots (64), each one recorded before the next.
    for _ in 0..70 {
        let before = app.store().generations().enumerations("steady", 200).await.unwrap().len();
        client.refresh_server(pb::RefreshServerRequest { server: "steady".into() }).await.unwrap();
        eventually("the refresh runs", async || {
            (app.store().generations().enumerations("steady", 200).await.unwrap().len() > before).then_some(())
        })
        .await;
    }
    assert_eq!(app.registry().snapshot().revision, revision, "unchanged listings are status, not catalog changes");
    // The page token of a caller who did nothing wrong still works after all those refreshes.
    let next = client
        .list_tools(pb::ListToolsRequest { page_size: 1, page_token: listed.next_page_token, ..Default::default() })
        .await
        .expect("the page token outlives routine refreshes")
        .into_inner();
    assert_eq!(next.tools.len(), 1);
    app.shutdown().await;
}

#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_panics_is_shown_failed_then_restarted_and_its_child_killed() {
    let dir = TestDir::new();
    let script = dir.script("fragile", json!({"tools": tools("t", 2), "spawn_grandchild": true}));
    let app = start(dir.config(&server_table("fragile", &script, ""))).await;
    wait_for_server(app.registry(), "fragile", "ready", |v| v.state() == ServerState::Ready).await;
    let first = dir.pids("fragile");

    toolhost::faults::arm("worker.panic", "fragile");
    let mut client = client(&app).await;
    client.restart_server(pb::RestartServerRequest { server: "fragile".into() }).await.unwrap();
    let view = wait_for_server(app.registry(), "fragile", "the panic shown", |v| v.num_worker_panics() == 1).await;
    assert!(view.last_error().is_some_and(|e| e.contains("panicked") && e.contains("injected fault")), "{:?}", view.last_error());
    let view = wait_for_server(app.registry(), "fragile", "ready again under a new worker", |v| {
        v.state() == ServerState::Ready && v.num_worker_panics() == 1
    })
    .await;
    assert_eq!(tool_names(&view), ["t0", "t1"]);
    // The session that was up when the worker panicked did not outlive it, grandchild included.
    let launched_at_panic: Vec<i32> = dir.pids("fragile").into_iter().filter(|pid| !first.contains(pid)).take(2).collect();
    eventually("every process of the panicked session ends", async || {
        launched_at_panic.iter().chain(&first).all(|pid| !live(*pid)).then_some(())
    })
    .await;
    // Commands reach the new worker.
    client.restart_server(pb::RestartServerRequest { server: "fragile".into() }).await.unwrap();
    wait_for_server(app.registry(), "fragile", "restarted on request", |v| v.state() == ServerState::Ready && v.num_restarts() >= 2).await;
    let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    assert_eq!(servers[0].worker_panics, 1);
    app.shutdown().await;
}

/// A process that runs (a zombie counts as gone).
#[cfg(feature = "fault-injection")]
fn live(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_nested_deeper_than_the_parser_allows_is_skipped_and_the_others_listed() {
    let dir = TestDir::new();
    let script = dir.script("deep", json!({"tools": tools("t", 2), "deep_tool_depth": 4000}));
    let app = start(dir.config(&server_table("deep", &script, ""))).await;
    let view = wait_for_server(app.registry(), "deep", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["t0", "t1"]);
    let record = view.last_enumeration().cloned().unwrap();
    assert!(record.diagnostics.iter().any(|d| d.contains("entry 0") && d.contains("nested too deeply")), "{:?}", record.diagnostics);
    app.shutdown().await;
}
