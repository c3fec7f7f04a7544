//! Tool calls over real gRPC: routing, every error mapping, deadlines, cancellation reaching the
//! upstream, the concurrency limit, each kind of stale-tool race, and the CLI's exit codes.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

fn call(name: &str, args: Value) -> pb::CallToolRequest {
    pb::CallToolRequest { qualified_name: name.into(), arguments_json: args.to_string(), ..Default::default() }
}

fn demo_script(dir: &TestDir, name: &str, extra: Value) -> std::path::PathBuf {
    let mut script = json!({});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            script[k] = v;
        }
    }
    dir.script(name, script)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_return_results_and_tool_errors_are_results() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;

    let added = client.call_tool(call("demo__add", json!({"a": 2, "b": 40}))).await.unwrap().into_inner();
    assert_eq!(serde_json::from_str::<Value>(&added.content_json).unwrap()[0]["text"], "42");
    assert_eq!(serde_json::from_str::<Value>(&added.structured_content_json).unwrap()["sum"], 42.0);
    assert!(!added.is_error);
    assert_eq!((added.server.as_str(), added.name.as_str(), added.generation), ("demo", "add", 1));
    let listed = client
        .get_tool(pb::GetToolRequest { qualified_name: "demo__add".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .tool
        .unwrap();
    assert_eq!(added.definition_hash, listed.definition_hash);

    let failed = client.call_tool(call("demo__fail", json!({}))).await.unwrap().into_inner();
    assert!(failed.is_error, "a tool's own failure is a result, not an RPC error");

    let by_parts = pb::CallToolRequest {
        server: "demo".into(),
        name: "echo".into(),
        arguments_json: r#"{"big": 12345678901234567890}"#.into(),
        ..Default::default()
    };
    let echoed = client.call_tool(by_parts).await.unwrap().into_inner();
    assert!(echoed.content_json.contains("12345678901234567890"), "arguments are forwarded byte for byte: {}", echoed.content_json);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_maps_to_its_code_with_details() {
    let dir = TestDir::new();
    let demo = demo_script(&dir, "demo", json!({}));
    let future = demo_script(&dir, "future", json!({"protocol_version": "2099-01-01"}));
    let servers =
        [server_table("demo", &demo, ""), server_table("future", &future, "restart = { initial_backoff = \"5s\", max_backoff = \"10s\" }")];
    let app = start(dir.config(&servers.join("\n"))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    wait_for_server(app.registry(), "future", "failed", |v| v.state() == ServerState::Failed).await;
    let mut client = client(&app).await;

    let cases: Vec<(pb::CallToolRequest, tonic::Code, &str)> = vec![
        (call("demo__nope", json!({})), tonic::Code::NotFound, "UNKNOWN_TOOL"),
        (call("nobody__add", json!({})), tonic::Code::NotFound, "UNKNOWN_TOOL"),
        (pb::CallToolRequest { server: "nobody".into(), name: "x".into(), ..Default::default() }, tonic::Code::NotFound, "UNKNOWN_SERVER"),
        (
            pb::CallToolRequest { qualified_name: "demo__add".into(), arguments_json: "[1, 2]".into(), ..Default::default() },
            tonic::Code::InvalidArgument,
            "ARGUMENTS_NOT_AN_OBJECT",
        ),
        (
            pb::CallToolRequest { qualified_name: "demo__add".into(), arguments_json: "{oops".into(), ..Default::default() },
            tonic::Code::InvalidArgument,
            "ARGUMENTS_NOT_AN_OBJECT",
        ),
        (pb::CallToolRequest::default(), tonic::Code::InvalidArgument, "INVALID_REQUEST"),
        (
            pb::CallToolRequest { qualified_name: "demo__add".into(), expected_definition_hash: "0".repeat(64), ..Default::default() },
            tonic::Code::FailedPrecondition,
            "STALE_TOOL_CHANGED",
        ),
        (
            pb::CallToolRequest { qualified_name: "demo__add".into(), expected_catalog_revision: 1, ..Default::default() },
            tonic::Code::FailedPrecondition,
            "STALE_TOOL_CHANGED",
        ),
    ];
    for (request, code, reason) in cases {
        let status = client.call_tool(request.clone()).await.unwrap_err();
        assert_eq!((status.code(), error_info(&status).0.as_str()), (code, reason), "{request:?}: {status:?}");
    }
    let status = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "demo__add".into(),
            expected_definition_hash: "0".repeat(64),
            ..Default::default()
        })
        .await
        .unwrap_err();
    let (_, metadata) = error_info(&status);
    assert_eq!(metadata["server"], "demo");
    assert_eq!(metadata["tool"], "add");
    assert_eq!(metadata["current_generation"], "1");
    assert_eq!(metadata["current_definition_hash"].len(), 64, "the new hash comes back with the refusal");

    // A deadline shorter than the tool takes.
    let mut slow = tonic::Request::new(call("demo__sleep", json!({"ms": 5000})));
    slow.set_timeout(Duration::from_millis(400));
    let status = client.call_tool(slow).await.unwrap_err();
    assert_eq!((status.code(), error_info(&status).0.as_str()), (tonic::Code::DeadlineExceeded, "UPSTREAM_DEADLINE"));
    let races = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers[0].stale_tool_races.unwrap();
    assert_eq!(races.changed_since_listed, 3, "every refused precondition is counted");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_down_is_unavailable_and_its_tools_stay_listed() {
    let dir = TestDir::new();
    let mut listed = tools("t", 1);
    listed.push(json!({"name": "crash", "inputSchema": {"type": "object"}}));
    let script = demo_script(&dir, "down", json!({"tools": listed, "crash_on_launch": [2, 3, 4, 5, 6, 7, 8, 9]}));
    let app = start(dir.config(&server_table("down", &script, "restart = { initial_backoff = \"2s\", max_backoff = \"5s\" }"))).await;
    wait_for_server(app.registry(), "down", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let lost = client.call_tool(call("down__crash", json!({}))).await.unwrap_err();
    assert_eq!(
        (lost.code(), error_info(&lost).0.as_str()),
        (tonic::Code::Unavailable, "OUTCOME_UNKNOWN"),
        "a call cut off by a crash is never replayed"
    );
    wait_for_server(app.registry(), "down", "down", |v| !v.is_available()).await;
    let status = client.call_tool(call("down__t0", json!({}))).await.unwrap_err();
    assert_eq!((status.code(), error_info(&status).0.as_str()), (tonic::Code::Unavailable, "SERVER_UNAVAILABLE"));
    let listed = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner().tools;
    assert_eq!(listed.len(), 2, "tools stay listed while the server is down");
    assert!(listed.iter().all(|t| !t.available));
    let received = dir.received("down");
    assert_eq!(received.iter().filter(|m| m["params"]["name"] == "crash").count(), 1, "the crashing call was sent once");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_reaches_the_upstream_as_notifications_cancelled() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let abandoned = tokio::time::timeout(Duration::from_millis(300), client.call_tool(call("demo__sleep", json!({"ms": 10000})))).await;
    assert!(abandoned.is_err(), "the client gave up");
    let cancelled = eventually("notifications/cancelled reaches the server", async || {
        let received = dir.received("demo");
        let call_id = received.iter().find(|m| m["method"] == "tools/call").map(|m| m["id"].clone());
        let cancel = received.iter().find(|m| m["method"] == "notifications/cancelled").cloned();
        call_id.zip(cancel)
    })
    .await;
    assert_eq!(cancelled.1["params"]["requestId"], cancelled.0);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_by_its_client_after_it_was_sent_leaves_one_cancelled_record() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut caller = client(&app).await;
    let sleep = caller.call_tool(call("demo__sleep", json!({"ms": 20000})));
    let abandoned = tokio::select! {
        answered = sleep => Some(answered),
        () = eventually("the call reaches the server", async || dir.methods("demo").iter().any(|m| m == "tools/call").then_some(())) => None,
    };
    assert!(abandoned.is_none(), "the client gave up on a call that was sent: {abandoned:?}");
    eventually("the server hears of the cancellation", async || {
        dir.methods("demo").iter().any(|m| m == "notifications/cancelled").then_some(())
    })
    .await;
    // A marker call after it: once its record is in, a cancelled call's would be too.
    caller.call_tool(call("demo__echo", json!({"text": "marker"}))).await.expect("the marker call");
    let mut operator = client(&app).await;
    let records = eventually("the marker call's record", async || {
        let records = operator.query_audit(pb::QueryAuditRequest { limit: 100, ..Default::default() }).await.unwrap().into_inner().records;
        records.iter().any(|record| record.qualified_name == "demo__echo").then_some(records)
    })
    .await;
    let sleeps: Vec<_> = records.iter().filter(|record| record.qualified_name == "demo__sleep").collect();
    assert_eq!(sleeps.len(), 1, "exactly one record of the cancelled call: {records:#?}");
    assert_eq!(sleeps[0].outcome, "cancelled", "{records:#?}");
    assert!(sleeps[0].generation > 0 && !sleeps[0].definition_hash.is_empty(), "where it was sent: {records:#?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_concurrency_limit_wait_their_turn() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "one", json!({}));
    let app = start(dir.config(&server_table("one", &script, "max_concurrent_calls = 1"))).await;
    wait_for_server(app.registry(), "one", "ready", |v| v.state() == ServerState::Ready).await;
    let client = client(&app).await;
    let started = Instant::now();
    let calls = (0..3).map(|_| {
        let mut client = client.clone();
        async move { client.call_tool(call("one__sleep", json!({"ms": 200}))).await }
    });
    let results = futures_join_all(calls).await;
    assert!(results.iter().all(Result::is_ok));
    assert!(started.elapsed() >= Duration::from_millis(600), "three 200 ms calls ran one at a time ({:?})", started.elapsed());
    app.shutdown().await;
}

async fn futures_join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.map(|f| Box::pin(f)).collect();
    let mut outputs = Vec::new();
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    // Poll all of them together: a tiny join_all without another dependency.
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for slot in pending.iter_mut() {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(output) => {
                        outputs.push(output);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all_done = false,
                }
            }
        }
        if all_done { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_stale_tool_race_is_typed_counted_and_acted_on() {
    let dir = TestDir::new();
    let file = dir.path("tools.json");
    std::fs::write(&file, json!([{"name": "stays"}, {"name": "goes"}, {"name": "ghost"}]).to_string()).unwrap();
    let script = demo_script(&dir, "racy", json!({"tools_file": file, "watch_tools_file": true, "unknown_tools_on_call": ["ghost"]}));
    let app = start(dir.config(&server_table("racy", &script, ""))).await;
    wait_for_server(app.registry(), "racy", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let listed = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner();
    let hash_of = |name: &str| listed.tools.iter().find(|t| t.name == name).unwrap().definition_hash.clone();

    // (c) The server disowns a listed tool: a typed error, a re-enumeration, no silent retry.
    let status = client.call_tool(call("racy__ghost", json!({}))).await.unwrap_err();
    assert_eq!((status.code(), error_info(&status).0.as_str()), (tonic::Code::FailedPrecondition, "STALE_TOOL_UPSTREAM_UNKNOWN"));
    assert_eq!(dir.received("racy").iter().filter(|m| m["params"]["name"] == "ghost").count(), 1, "never retried");
    wait_until(app.registry(), "a stale_tool re-enumeration", |s| {
        s.servers["racy"].last_enumeration().is_some_and(|e| e.reason == toolhost::catalog::record::EnumerationReason::StaleTool)
    })
    .await;

    // (a) A removed tool fails fast, naming the generation that removed it.
    std::fs::write(&file, json!([{"name": "stays", "description": "changed"}, {"name": "ghost"}]).to_string()).unwrap();
    wait_for_server(app.registry(), "racy", "generation 2", |v| v.generation_number() == 2).await;
    let calls_before = dir.received("racy").iter().filter(|m| m["method"] == "tools/call").count();
    let status = client.call_tool(call("racy__goes", json!({}))).await.unwrap_err();
    let (reason, metadata) = error_info(&status);
    assert_eq!((status.code(), reason.as_str()), (tonic::Code::FailedPrecondition, "STALE_TOOL_REMOVED"));
    assert_eq!(metadata["removed_in_generation"], "2");

    // (b) The caller pins the definition it listed; it changed since.
    let pinned =
        pb::CallToolRequest { qualified_name: "racy__stays".into(), expected_definition_hash: hash_of("stays"), ..Default::default() };
    let status = client.call_tool(pinned).await.unwrap_err();
    let (reason, metadata) = error_info(&status);
    assert_eq!((status.code(), reason.as_str()), (tonic::Code::FailedPrecondition, "STALE_TOOL_CHANGED"));
    assert_ne!(metadata["current_definition_hash"], hash_of("stays"));
    let by_revision = pb::CallToolRequest {
        qualified_name: "racy__stays".into(),
        expected_catalog_revision: listed.catalog_revision,
        ..Default::default()
    };
    assert_eq!(client.call_tool(by_revision).await.unwrap_err().code(), tonic::Code::FailedPrecondition);
    let calls_after = dir.received("racy").iter().filter(|m| m["method"] == "tools/call").count();
    assert_eq!(calls_before, calls_after, "refused calls never reach the server");

    let server = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers.remove(0);
    let races = server.stale_tool_races.unwrap();
    assert_eq!((races.upstream_unknown_tool, races.removed_before_call, races.changed_since_listed), (1, 1, 2));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_json_and_its_exit_codes_tell_failures_apart() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let addr = cli_addr(&app);
    let cli = |args: Vec<&str>| {
        let addr = addr.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(&args).args(["--addr", &addr]).output().unwrap()
        })
    };

    let servers = cli(vec!["servers", "--json"]).await.unwrap();
    assert!(servers.status.success(), "{}", String::from_utf8_lossy(&servers.stderr));
    let servers: Value = serde_json::from_slice(&servers.stdout).unwrap();
    assert_eq!(
        (servers[0]["name"].as_str(), servers[0]["state"].as_str(), servers[0]["generation"].as_u64(), servers[0]["tool_count"].as_u64()),
        (Some("demo"), Some("ready"), Some(1), Some(4))
    );

    let tools: Value = serde_json::from_slice(&cli(vec!["tools", "--json", "--server", "demo"]).await.unwrap().stdout).unwrap();
    let add = tools.as_array().unwrap().iter().find(|t| t["tool"] == "add").unwrap().clone();
    assert_eq!((add["name"].as_str(), add["server"].as_str(), add["generation"].as_u64()), (Some("demo__add"), Some("demo"), Some(1)));
    let hash = add["hash"].as_str().unwrap().to_owned();

    let called = cli(vec!["call", "demo__add", "--args", r#"{"a":1,"b":2}"#, "--hash", &hash, "--json"]).await.unwrap();
    assert_eq!(called.status.code(), Some(0));
    let result: Value = serde_json::from_slice(&called.stdout).unwrap();
    assert_eq!(result["structuredContent"]["sum"], 3.0);
    assert_eq!(cli(vec!["call", "demo__fail"]).await.unwrap().status.code(), Some(1), "a tool error");
    let missing = cli(vec!["call", "demo__nope"]).await.unwrap();
    assert_eq!(missing.status.code(), Some(3), "an RPC error");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("NOT_FOUND (UNKNOWN_TOOL)"));
    assert_eq!(cli(vec!["call"]).await.unwrap().status.code(), Some(2), "a usage error");

    let history: Value = serde_json::from_slice(&cli(vec!["history", "demo", "--json"]).await.unwrap().stdout).unwrap();
    assert_eq!(history["generations"][0]["generation"], 1);
    assert!(cli(vec!["refresh", "demo"]).await.unwrap().status.success());
    wait_until(app.registry(), "a manual enumeration", |s| {
        s.servers["demo"].last_enumeration().is_some_and(|e| e.reason == toolhost::catalog::record::EnumerationReason::Manual)
    })
    .await;
    assert!(cli(vec!["restart", "demo"]).await.unwrap().status.success());
    wait_for_server(app.registry(), "demo", "a fresh session", |v| v.num_restarts() == 1 && v.state() == ServerState::Ready).await;
    assert_eq!(dir.methods("demo").iter().filter(|m| *m == "initialize").count(), 2);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_time_out_never_push_more_than_the_limit_onto_the_server() {
    let dir = TestDir::new();
    let calls_file = dir.path("calls.txt");
    let script = demo_script(&dir, "slow", json!({"calls_file": calls_file}));
    let app = start(dir.config(&server_table("slow", &script, "max_concurrent_calls = 4"))).await;
    wait_for_server(app.registry(), "slow", "ready", |v| v.state() == ServerState::Ready).await;
    let client = client(&app).await;
    let calls = (0..40).map(|_| {
        let mut client = client.clone();
        async move {
            let mut request = tonic::Request::new(call("slow__sleep", json!({"ms": 300})));
            request.set_timeout(Duration::from_millis(100));
            client.call_tool(request).await
        }
    });
    let results = futures_join_all(calls).await;
    // Each ends at its deadline: toolhost's DEADLINE_EXCEEDED, or the client's own timeout.
    let codes: Vec<_> = results.iter().map(|r| r.as_ref().map(|_| ()).map_err(tonic::Status::code)).collect();
    assert!(codes.iter().all(|c| matches!(c, Err(tonic::Code::DeadlineExceeded | tonic::Code::Cancelled))), "{codes:?}");
    // Let every call the server did start finish, then replay its log.
    let log = eventually("the server's calls finish", async || {
        let log = std::fs::read_to_string(&calls_file).unwrap_or_default();
        let starts = log.lines().filter(|l| l.starts_with("start")).count();
        let ends = log.lines().filter(|l| l.starts_with("end")).count();
        if starts == ends && starts > 0 { Ok(log) } else { Err(log) }
    })
    .await;
    let (mut running, mut most) = (0i32, 0i32);
    for line in log.lines() {
        running += if line.starts_with("start") { 1 } else { -1 };
        most = most.max(running);
    }
    assert!(most <= 4, "{most} calls ran at once at the server with max_concurrent_calls = 4");
    let started = log.lines().filter(|l| l.starts_with("start")).count();
    assert!(started < 40, "calls whose deadline passed in the queue were not forwarded ({started} started)");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_error_that_says_unknown_is_not_a_stale_tool() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "strict", json!({"invalid_params_on_call": ["echo"]}));
    let app = start(dir.config(&server_table("strict", &script, ""))).await;
    wait_for_server(app.registry(), "strict", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let status = client.call_tool(call("strict__echo", json!({"extra": 1}))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(error_info(&status).0, "UPSTREAM_INVALID_PARAMS");
    let view = app.registry().server("strict").unwrap();
    assert_eq!(view.shared().races.upstream_unknown_tool.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(dir.methods("strict").iter().filter(|m| *m == "tools/list").count(), 1, "no re-enumeration");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_request_input_gets_a_bounded_answer_and_no_panic() {
    let dir = TestDir::new();
    let script = demo_script(&dir, "demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    // A deadline far beyond any clock: treated as malformed (more than eight digits), not a panic.
    let mut request = tonic::Request::new(call("demo__echo", json!({"text": "hi"})));
    request.metadata_mut().insert("grpc-timeout", "9999999999999999999S".parse().unwrap());
    let answer = client.call_tool(request).await.expect("the call is served");
    assert!(answer.into_inner().content_json.contains("hi"));
    // A megabyte of tool name: NOT_FOUND, with the name cut short rather than a status too big to send.
    let status = client.call_tool(call(&format!("demo__{}", "x".repeat(1 << 20)), json!({}))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{}", status.message().len());
    assert!(status.message().len() <= 1024);
    // The daemon is still fine.
    client.call_tool(call("demo__echo", json!({"text": "still here"}))).await.unwrap();
    app.shutdown().await;
}
