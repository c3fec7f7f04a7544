//! Complete enumeration: pagination, cursors, interruption by list_changed, bounds.

use serde_json::json;
use toolhost::catalog::record::{EnumerationOutcome, EnumerationReason};
use toolhost::registry::ServerState;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_every_cursor_and_never_stores_one() {
    let dir = TestDir::new();
    let script = dir.script("paged", json!({"tools": tools("t", 7), "page_size": 2, "cursor_prefix": "CURSOR-SECRET-"}));
    let app = start(dir.config(&server_table("paged", &script, ""))).await;
    let view = wait_for_server(app.registry(), "paged", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]);
    assert_eq!(view.generation().unwrap().number, 1);

    let lists: Vec<_> = dir.received("paged").into_iter().filter(|m| m["method"] == "tools/list").collect();
    assert_eq!(lists.len(), 4, "7 tools in pages of 2 take 4 requests");
    assert!(lists[0].get("params").is_none_or(|p| p.get("cursor").is_none()), "the first page is asked for without a cursor");
    let cursors: Vec<_> = lists[1..].iter().map(|m| m["params"]["cursor"].as_str().unwrap().to_owned()).collect();
    assert_eq!(cursors, ["CURSOR-SECRET-2", "CURSOR-SECRET-4", "CURSOR-SECRET-6"]);

    let record = &app.store().generations().enumerations("paged", 10).await.unwrap()[0];
    assert_eq!(
        (record.reason, record.outcome, record.pages, record.tools),
        (EnumerationReason::Initial, EnumerationOutcome::Committed, 4, 7)
    );
    app.shutdown().await;

    // The database file (and its WAL) must hold none of the cursors the server issued.
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", dir.db_path().display());
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(!bytes.windows(14).any(|w| w == b"CURSOR-SECRET-"), "{path} contains a cursor");
            if suffix.is_empty() {
                assert!(bytes.windows(2).any(|w| w == b"t6"), "the database should hold the tools themselves");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_between_two_pages_never_yields_a_mixed_generation() {
    let dir = TestDir::new();
    let before = tools("old", 4);
    let after = tools("new", 4);
    let script = dir.script("shifty", json!({"tools": before, "page_size": 2, "mutate_after_page": {"page": 1, "tools": after}}));
    let app = start(dir.config(&server_table("shifty", &script, ""))).await;
    let view = wait_for_server(app.registry(), "shifty", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["new0", "new1", "new2", "new3"]);

    for summary in app.store().generations().history("shifty", 50).await.unwrap() {
        let names: Vec<String> =
            app.store().generations().tools_at("shifty", summary.generation).await.unwrap().into_iter().map(|t| t.name).collect();
        let all_old = names.iter().all(|n| n.starts_with("old")) && names.len() == 4;
        let all_new = names.iter().all(|n| n.starts_with("new")) && names.len() == 4;
        assert!(all_old || all_new, "generation {} mixes two tool sets: {names:?}", summary.generation);
    }
    let outcomes: Vec<_> = app.store().generations().enumerations("shifty", 10).await.unwrap().iter().map(|r| r.outcome).collect();
    assert!(outcomes.contains(&EnumerationOutcome::Superseded), "the interrupted pass is recorded: {outcomes:?}");
    // The fresh pass started over from no cursor.
    let firsts = dir.received("shifty").iter().filter(|m| m["method"] == "tools/list" && m["params"].get("cursor").is_none()).count();
    assert!(firsts >= 2, "a fresh pass from the first page follows the interruption");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_publishes_a_new_generation_with_its_diff() {
    let dir = TestDir::new();
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!([{"name": "keep"}, {"name": "drop"}, {"name": "edit", "description": "v1"}]).to_string()).unwrap();
    let script = dir.script("live", json!({"tools_file": tools_file, "watch_tools_file": true, "page_size": 1}));
    let app = start(dir.config(&server_table("live", &script, ""))).await;
    wait_for_server(app.registry(), "live", "generation 1", |v| v.generation().is_some_and(|g| g.number == 1)).await;

    std::fs::write(&tools_file, json!([{"name": "keep"}, {"name": "edit", "description": "v2"}, {"name": "add"}]).to_string()).unwrap();
    let view = wait_for_server(app.registry(), "live", "generation 2", |v| v.generation().is_some_and(|g| g.number == 2)).await;
    assert_eq!(tool_names(&view), ["add", "edit", "keep"]);
    let latest = &app.store().generations().history("live", 1).await.unwrap()[0];
    assert_eq!(
        (latest.reason, latest.added.clone(), latest.removed.clone(), latest.changed.clone()),
        (EnumerationReason::ListChanged, vec!["add".to_owned()], vec!["drop".to_owned()], vec!["edit".to_owned()])
    );
    assert_eq!(latest.tool_count, 3);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_notifications_costs_a_few_passes() {
    let dir = TestDir::new();
    let done_file = dir.path("storm-done");
    let script = dir.script(
        "stormy",
        json!({"tools": tools("t", 3), "list_changed_storm": 1000, "storm_after_first_list": true, "storm_done_file": done_file}),
    );
    let app = start(dir.config(&server_table("stormy", &script, ""))).await;
    wait_for_server(app.registry(), "stormy", "ready", |v| v.state() == ServerState::Ready).await;
    // Wait for the storm to end, then for a pass that started after it to complete: that pass
    // saw every notification, and no later one will start.
    let storm_done_ms: i64 =
        eventually("the storm ends", async || std::fs::read_to_string(&done_file).ok().and_then(|text| text.trim().parse().ok())).await;
    eventually(&format!("a complete pass after the storm ended at {storm_done_ms}"), async || {
        let passes = app.store().generations().enumerations("stormy", 10).await.unwrap();
        let last = &passes[0];
        let complete = matches!(last.outcome, EnumerationOutcome::Unchanged | EnumerationOutcome::Committed);
        if last.started_at_ms > storm_done_ms && complete { Ok(()) } else { Err(format!("{passes:#?}")) }
    })
    .await;
    let view = app.registry().server("stormy").unwrap();
    assert_eq!(view.state(), ServerState::Ready);
    assert_eq!(tool_names(&view), ["t0", "t1", "t2"]);
    let passes = dir.received("stormy").iter().filter(|m| m["method"] == "tools/list").count();
    assert!(passes <= 6, "1000 notifications caused {passes} tools/list requests");
    assert!(passes >= 2, "the storm was not ignored: it caused a pass after the first listing");
    assert_eq!(view.generation().unwrap().number, 1, "an unchanged tool set keeps its generation");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_and_broken_listings_are_never_committed() {
    let dir = TestDir::new();
    let looping = dir.script("looping", json!({"tools": tools("t", 4), "page_size": 2, "repeat_cursor": true}));
    let many = dir.script("many", json!({"tools": tools("t", 10), "page_size": 1}));
    let hung = dir.script("hung", json!({"hang_methods": ["tools/list"]}));
    let rejecting = dir.script("rejecting", json!({"tools": tools("t", 5), "page_size": 2, "reject_cursor_once": true}));
    let servers = [
        server_table("looping", &looping, ""),
        server_table("many", &many, "max_pages = 5"),
        server_table("hung", &hung, "request_timeout = \"300ms\""),
        server_table("rejecting", &rejecting, ""),
    ];
    let app = start(dir.config(&servers.join("\n"))).await;
    for (name, expected) in [("looping", "pagination loop"), ("many", "max_pages"), ("hung", "no answer")] {
        let view = wait_for_server(app.registry(), name, "failed", |v| v.state() == ServerState::Failed).await;
        assert!(view.generation().is_none(), "{name}: nothing may be committed");
        let error = view.last_error().map(str::to_owned).unwrap_or_default();
        assert!(error.contains(expected), "{name}: {error:?} should mention {expected:?}");
        let record = &app.store().generations().enumerations(name, 1).await.unwrap()[0];
        assert_eq!(record.outcome, EnumerationOutcome::Failed);
    }
    // An invalid cursor makes the pass start over from the first page, then it completes.
    let view = wait_for_server(app.registry(), "rejecting", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view).len(), 5);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_tools_capability_is_never_asked_for_tools() {
    let dir = TestDir::new();
    let script = dir.script("quiet", json!({"capabilities": {"prompts": {}}, "list_changed_storm": 3}));
    let app = start(dir.config(&server_table("quiet", &script, ""))).await;
    let view = wait_for_server(app.registry(), "quiet", "no tools", |v| v.state() == ServerState::NoTools).await;
    assert!(tool_names(&view).is_empty());
    // Every notification has arrived, and a round trip after them has completed.
    let session = view.session().cloned().unwrap();
    eventually("the three notifications arrive", async || {
        (session.stats().num_list_changed.load(std::sync::atomic::Ordering::Relaxed) >= 3).then_some(())
    })
    .await;
    session.request("ping", None, std::time::Duration::from_secs(5), false).await.unwrap();
    let methods = dir.methods("quiet");
    assert!(!methods.iter().any(|m| m == "tools/list"), "tools/list was sent: {methods:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_nameless_entries_are_reported_and_the_first_kept() {
    let dir = TestDir::new();
    let listed = json!([{"name": "a", "description": "first"}, {"description": "nameless"}, {"name": "a", "description": "second"}, {"name": "b", "x-vendor": {"k": 1}}]);
    let script = dir.script("dupes", json!({"tools": listed}));
    let app = start(dir.config(&server_table("dupes", &script, ""))).await;
    let view = wait_for_server(app.registry(), "dupes", "ready", |v| v.state() == ServerState::Ready).await;
    let generation = view.generation().cloned().unwrap();
    assert_eq!(tool_names(&view), ["a", "b"]);
    assert!(generation.tool("a").unwrap().definition.contains("first"));
    assert!(generation.tool("b").unwrap().definition.contains(r#""x-vendor":{"k":1}"#), "unknown fields are kept whole");
    let record = &app.store().generations().enumerations("dupes", 1).await.unwrap()[0];
    assert_eq!(record.diagnostics.len(), 2, "{:?}", record.diagnostics);
    app.shutdown().await;
}
