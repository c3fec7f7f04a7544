//! Reconnects, the shutdown sequence, and the catalog across daemon restarts.

use std::time::{Duration, Instant};

use serde_json::json;
use toolhost::catalog::record::{EnumerationOutcome, EnumerationReason};
use toolhost::registry::ServerState;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_leads_to_a_fresh_initialize_and_a_full_enumeration() {
    let dir = TestDir::new();
    let mut listed = tools("t", 3);
    listed.push(json!({"name": "crash", "inputSchema": {"type": "object"}}));
    let script = dir.script("fragile", json!({"tools": listed, "page_size": 2}));
    let app = start(dir.config(&server_table("fragile", &script, ""))).await;
    let view = wait_for_server(app.registry(), "fragile", "ready", |v| v.state() == ServerState::Ready).await;
    let session = view.session().cloned().unwrap();
    let params = serde_json::value::RawValue::from_string(json!({"name": "crash"}).to_string()).unwrap();
    let crashed = session.request("tools/call", Some(&params), Duration::from_secs(5), true).await;
    assert!(crashed.is_err(), "the call dies with the process");

    let view =
        wait_for_server(app.registry(), "fragile", "ready again", |v| v.state() == ServerState::Ready && v.num_restarts() == 1).await;
    let methods = dir.methods("fragile");
    assert_eq!(methods.iter().filter(|m| *m == "initialize").count(), 2, "{methods:?}");
    let received = dir.received("fragile");
    let restart_at = received.iter().rposition(|m| m["method"] == "initialize").unwrap();
    let lists_after: Vec<_> = received[restart_at..].iter().filter(|m| m["method"] == "tools/list").collect();
    assert_eq!(lists_after.len(), 2, "a full enumeration of both pages follows the reconnect");
    assert!(lists_after[0]["params"].get("cursor").is_none(), "starting from no cursor, never reusing an old one");
    assert_eq!(view.generation().unwrap().number, 1, "same definitions, same generation");
    let record = &app.store().generations().enumerations("fragile", 1).await.unwrap()[0];
    assert_eq!((record.reason, record.outcome), (EnumerationReason::Reconnect, EnumerationOutcome::Unchanged));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_server_is_down_its_tools_stay_listed_but_unavailable() {
    let dir = TestDir::new();
    let mut listed = tools("t", 2);
    listed.push(json!({"name": "crash", "inputSchema": {"type": "object"}}));
    let script = dir.script("flaky", json!({"tools": listed, "crash_on_launch": [2, 3, 4, 5, 6, 7, 8]}));
    let config = server_table("flaky", &script, "restart = { initial_backoff = \"300ms\", max_backoff = \"1s\", crash_loop_after = 3 }");
    let app = start(dir.config(&config)).await;
    let view = wait_for_server(app.registry(), "flaky", "ready", |v| v.state() == ServerState::Ready).await;
    let params = serde_json::value::RawValue::from_string(json!({"name": "crash"}).to_string()).unwrap();
    let _ = view.session().cloned().unwrap().request("tools/call", Some(&params), Duration::from_secs(5), true).await;

    let view =
        wait_for_server(app.registry(), "flaky", "backing off", |v| matches!(v.state(), ServerState::Backoff | ServerState::CrashLoop))
            .await;
    assert_eq!(tool_names(&view), ["crash", "t0", "t1"], "tools stay in the catalog");
    assert!(!view.is_available());
    let view = wait_for_server(app.registry(), "flaky", "crash loop", |v| v.state() == ServerState::CrashLoop).await;
    assert_eq!(tool_names(&view).len(), 3);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_escalates_to_sigterm_and_reaps_every_child() {
    let dir = TestDir::new();
    let polite = dir.script("polite", json!({"tools": tools("t", 1)}));
    let stubborn = dir.script("stubborn", json!({"tools": tools("t", 1), "linger_after_eof_ms": 60000}));
    let servers = [server_table("polite", &polite, ""), server_table("stubborn", &stubborn, "shutdown_grace = \"300ms\"")];
    let app = start(dir.config(&servers.join("\n"))).await;
    wait_until(app.registry(), "both ready", |s| s.servers.values().all(|v| v.state() == ServerState::Ready)).await;
    let pids = [dir.pids("polite")[0], dir.pids("stubborn")[0]];
    let started = Instant::now();
    app.shutdown().await;
    let took = started.elapsed();
    for pid in pids {
        assert!(!process_exists(pid), "process {pid} survived shutdown (or is a zombie)");
    }
    assert!(took >= Duration::from_millis(300), "the lingering server got its grace period ({took:?})");
    assert!(took < Duration::from_secs(10), "SIGTERM ended the lingering server ({took:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_survives_a_daemon_restart() {
    let dir = TestDir::new();
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!(tools("t", 3)).to_string()).unwrap();
    let script = dir.script("durable", json!({"tools_file": tools_file}));
    let config = dir.config(&server_table("durable", &script, ""));
    let app = start(config.clone()).await;
    wait_for_server(app.registry(), "durable", "ready", |v| v.state() == ServerState::Ready).await;
    app.shutdown().await;

    // The next daemon finds a server that now hangs: the stored catalog is served meanwhile.
    std::fs::write(&tools_file, json!(tools("t", 2)).to_string()).unwrap();
    let app = start(config).await;
    let view = app.registry().server("durable").unwrap();
    assert_eq!(tool_names(&view), ["t0", "t1", "t2"], "served from SQLite before any session is up");
    assert!(view.revalidating() && view.last_verified_at_ms().is_some());
    let view = wait_for_server(app.registry(), "durable", "revalidated", |v| !v.revalidating() && v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["t0", "t1"]);
    assert_eq!(view.generation().unwrap().number, 2);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_listing_after_a_reconnect_needs_confirmation_before_it_empties_the_catalog() {
    let dir = TestDir::new();
    let tools_file = dir.path("tools.json");
    let mut listed = tools("t", 2);
    listed.push(json!({"name": "crash", "inputSchema": {"type": "object"}}));
    std::fs::write(&tools_file, json!(listed).to_string()).unwrap();
    let script = dir.script("amnesiac", json!({"tools_file": tools_file}));
    let app =
        start(dir.config(&server_table("amnesiac", &script, "restart = { initial_backoff = \"300ms\", max_backoff = \"1s\" }"))).await;
    let view = wait_for_server(app.registry(), "amnesiac", "ready", |v| v.state() == ServerState::Ready).await;
    std::fs::write(&tools_file, "[]").unwrap();
    let params = serde_json::value::RawValue::from_string(json!({"name": "crash"}).to_string()).unwrap();
    let _ = view.session().cloned().unwrap().request("tools/call", Some(&params), Duration::from_secs(5), true).await;

    let view = wait_for_server(app.registry(), "amnesiac", "the empty listing held back", |v| {
        v.last_error().is_some_and(|e| e.contains("second listing confirms"))
    })
    .await;
    assert_eq!(view.generation().unwrap().tools.len(), 3, "the catalog did not shrink on the first empty listing");
    let view = wait_for_server(app.registry(), "amnesiac", "the confirmed empty generation", |v| {
        v.generation_number() == 2 && v.state() == ServerState::Ready
    })
    .await;
    assert!(tool_names(&view).is_empty());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_socket_directories_are_created_on_a_fresh_machine() {
    let dir = TestDir::new();
    let config_path = dir.path("fresh.toml");
    std::fs::write(
        &config_path,
        "[store]\npath = \"state/nested/catalog.db\"\n[grpc]\nlisten = [\"127.0.0.1:0\", \"unix:run/nested/toolhost.sock\"]\n",
    )
    .unwrap();
    let app = start(toolhost::config::Config::load(&config_path).unwrap()).await;
    assert!(dir.path("state/nested/catalog.db").exists());
    assert!(dir.path("run/nested/toolhost.sock").exists(), "the demo's socket lives in a directory the first run makes");
    app.shutdown().await;
}
