//! Tool calls run as tasks: they outlive the connection that started them, come back through
//! either door, belong to their caller alone, hold their limits exactly, and survive a daemon
//! restart as what they are (a call cut off, its outcome unknown, naming where it was sent; a
//! call waiting for approval, followed again).

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::mcp_endpoint::{JSON_HEADERS, Line, http, mcp_http, mcp_section, mcp_socket};

const MINE: &str = "tasks-agent-mine-0123456789abcdef";
const THEIRS: &str = "tasks-agent-theirs-0123456789abcd";

/// `[access]` with two token agents, `mine` and `theirs`, then the local user as operator (the
/// first entry that names a caller admits it: a token over loopback is its agent's).
fn access(dir: &TestDir) -> String {
    std::fs::write(dir.path("mine.token"), MINE).unwrap();
    std::fs::write(dir.path("theirs.token"), THEIRS).unwrap();
    format!(
        "[access]\n[[access.agents]]\nname = \"mine\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n\
         [[access.agents]]\nname = \"theirs\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n",
        dir.path("mine.token").display(),
        dir.path("theirs.token").display(),
        nix::unistd::getuid()
    )
}

fn start_request(tool: &str, arguments: Value) -> pb::StartTaskRequest {
    pb::StartTaskRequest {
        call: Some(pb::CallToolRequest { qualified_name: tool.into(), arguments_json: arguments.to_string(), ..Default::default() }),
        ttl_ms: 0,
    }
}

fn task_id(id: &str) -> pb::TaskRequest {
    pb::TaskRequest { task_id: id.into() }
}

fn text_of(result: &pb::CallToolResponse) -> String {
    let content: Value = serde_json::from_str(&result.content_json).unwrap();
    content[0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_its_connection_and_answers_through_either_door_and_no_one_else() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let sections = format!("{}\n{}", mcp_section(""), access(&dir));
    let app = start(dir.config_with(&sections, &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;

    // Started over gRPC by a connection that then goes away.
    let started = {
        let mut grpc = agent_client(&app, MINE).await;
        grpc.start_task(start_request("demo__sleep", json!({"ms": 300}))).await.unwrap().into_inner()
    };
    assert_eq!(started.status(), pb::TaskStatus::Working);
    assert_eq!(started.qualified_name, "demo__sleep");
    assert!(started.ttl_ms >= 1000 && started.poll_interval_ms > 0, "{started:?}");

    // Another caller: the task does not exist for it, in every way it could ask.
    let mut theirs = agent_client(&app, THEIRS).await;
    for refused in [
        theirs.get_task(task_id(&started.task_id)).await.unwrap_err(),
        theirs.get_task_result(task_id(&started.task_id)).await.unwrap_err(),
        theirs.cancel_task(task_id(&started.task_id)).await.unwrap_err(),
    ] {
        assert_eq!((refused.code(), error_info(&refused).0.as_str()), (tonic::Code::NotFound, "UNKNOWN_TASK"), "{refused:?}");
    }
    assert!(theirs.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks.is_empty());
    let unknown = theirs.get_task(task_id("no-such-task")).await.unwrap_err();
    assert_eq!(
        unknown.message().replace("no-such-task", "X"),
        theirs.get_task(task_id(&started.task_id)).await.unwrap_err().message().replace(&started.task_id, "X")
    );

    // A new connection of the same caller watches it to its end, and gets the result.
    let mut mine = agent_client(&app, MINE).await;
    let mut watch = mine.watch_task(task_id(&started.task_id)).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while let Some(task) = tokio::time::timeout(WAIT, watch.message()).await.expect("the watch moves").unwrap() {
        seen.push(task.status());
    }
    assert_eq!(seen.first(), Some(&pb::TaskStatus::Working), "{seen:?}");
    assert_eq!(seen.last(), Some(&pb::TaskStatus::Completed), "the stream ends with the end: {seen:?}");
    let done = mine.get_task_result(task_id(&started.task_id)).await.unwrap().into_inner();
    let task = done.task.unwrap();
    assert_eq!((task.status(), task.outcome.as_str()), (pb::TaskStatus::Completed, "ok"), "{task:?}");
    let result = done.result.expect("a completed task's result");
    assert_eq!(text_of(&result), "slept 300 ms");
    assert_eq!((result.server.as_str(), result.generation), ("demo", 1));
    assert!(!result.definition_hash.is_empty());
    let listed = mine.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks;
    assert_eq!(listed.iter().map(|task| task.task_id.as_str()).collect::<Vec<_>>(), [started.task_id.as_str()]);
    assert_eq!(listed[0].status_message, "the call completed");

    // The same caller over MCP (Streamable HTTP, 2026-07-28, with its token) reads it too,
    // result inline; the other caller cannot.
    let addr = mcp_http(&app);
    let get = |token: &'static str, id: String| async move {
        let auth = format!("Bearer {token}");
        let headers = [
            JSON_HEADERS[0],
            JSON_HEADERS[1],
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tasks/get"),
            ("Mcp-Name", id.as_str()),
        ];
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"taskId": id, "_meta": meta}});
        let (status, _, body) = http(addr, "POST", "/mcp", &headers, &body.to_string()).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let seen = get(MINE, started.task_id.clone()).await;
    assert_eq!(seen["result"]["status"], "completed", "{seen}");
    assert_eq!(seen["result"]["resultType"], "complete", "{seen}");
    assert_eq!(seen["result"]["result"]["content"][0]["text"], "slept 300 ms", "{seen}");
    assert!(seen["result"]["ttlMs"].as_u64().unwrap() > 0, "{seen}");
    let refused = get(THEIRS, started.task_id.clone()).await;
    assert_eq!(
        (refused["error"]["code"].as_i64(), refused["error"]["data"]["reason"].as_str()),
        (Some(-32602), Some("UNKNOWN_TASK")),
        "{refused}"
    );

    // While it runs, a task shows its server's progress.
    let long = mine.start_task(start_request("demo__sleep", json!({"ms": 1500}))).await.unwrap().into_inner();
    let progressed = eventually("the server's progress shown", async || {
        let task = mine.get_task(task_id(&long.task_id)).await.unwrap().into_inner();
        task.status_message.contains("halfway").then_some(task)
    })
    .await;
    assert_eq!((progressed.status(), progressed.status_message.as_str()), (pb::TaskStatus::Working, "progress 1/2: halfway"));
    mine.get_task_result(task_id(&long.task_id)).await.unwrap();

    // Stale-tool rules apply at the start: nothing runs, no task is made.
    let stale = pb::StartTaskRequest {
        call: Some(pb::CallToolRequest {
            qualified_name: "demo__echo".into(),
            expected_definition_hash: "0".repeat(64),
            ..Default::default()
        }),
        ttl_ms: 0,
    };
    let refused = mine.start_task(stale).await.unwrap_err();
    assert_eq!(error_info(&refused).0, "STALE_TOOL_CHANGED", "{refused:?}");
    let missing = mine.start_task(start_request("demo__nope", json!({}))).await.unwrap_err();
    assert_eq!((missing.code(), error_info(&missing).0.as_str()), (tonic::Code::NotFound, "UNKNOWN_TOOL"));
    assert_eq!(mine.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks.len(), 2, "refused starts made no task");

    // The trail has the start and the call's end.
    let mut operator = unix_client(&app).await;
    let trail = eventually("the task's start and end in the audit trail", async || {
        let request = pb::QueryAuditRequest { agent: "mine".into(), ..Default::default() };
        let records = operator.query_audit(request).await.unwrap().into_inner().records;
        let outcomes: Vec<String> = records.iter().filter(|r| r.qualified_name == "demo__sleep").map(|r| r.outcome.clone()).collect();
        (outcomes.len() >= 2).then_some(outcomes)
    })
    .await;
    assert!(trail.contains(&format!("task_started:{}", started.task_id)) && trail.contains(&"ok".to_owned()), "{trail:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_of_both_eras_run_tasks_on_the_socket_and_over_http() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    // A quick call answers plainly within this however slow the machine; the slow one waits on
    // the test (a named pipe), not on a clock.
    let sections = format!("{}\n[tasks]\nanswer_within = \"3s\"\n", mcp_section(""));
    let release = dir.path("release");
    nix::unistd::mkfifo(&release, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let app = start(dir.config_with(&sections, &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;

    // 2025-11-25 on the socket: the capability, every tool task-optional, a task-augmented call.
    let mut line = Line::connect(&mcp_socket(&app)).await;
    let initialized = line
        .request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}),
        )
        .await;
    assert_eq!(initialized["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"], json!({}), "{initialized}");
    line.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let (tools, _) = line.list_all(None).await;
    assert!(tools.iter().all(|tool| tool["execution"]["taskSupport"] == "optional"), "{tools:?}");
    let created = line.request(1, "tools/call", json!({"name": "demo__sleep", "arguments": {"ms": 200}, "task": {"ttl": 60000}})).await;
    let task = &created["result"]["task"];
    assert_eq!((task["status"].as_str(), task["ttl"].as_u64()), (Some("working"), Some(60000)), "{created}");
    assert!(task["createdAt"].as_str().unwrap().ends_with('Z') && task["pollInterval"].as_u64().is_some(), "{created}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    // The connection goes; another one of the same caller gets the result.
    drop(line);
    let mut line = Line::connect(&mcp_socket(&app)).await;
    line.initialize().await;
    let result = line.request(2, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["result"]["content"][0]["text"], "slept 200 ms", "{result}");
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], json!(id), "{result}");
    let got = line.request(3, "tasks/get", json!({"taskId": id})).await;
    assert_eq!((got["result"]["status"].as_str(), got["result"].get("pollInterval")), (Some("completed"), None), "{got}");
    let listed = line.request(4, "tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"][0]["taskId"], json!(id), "{listed}");
    let ended = line.request(5, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!((ended["error"]["code"].as_i64(), ended["error"]["data"]["reason"].as_str()), (Some(-32602), Some("TASK_ENDED")), "{ended}");

    // A tool's own error fails the task and keeps the result; a cancelled task says so.
    let failing = line.request(6, "tools/call", json!({"name": "demo__fail", "arguments": {}, "task": {}})).await;
    let failing = failing["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    let result = line.request(7, "tasks/result", json!({"taskId": failing})).await;
    assert_eq!(result["result"]["isError"], true, "{result}");
    assert_eq!(line.request(8, "tasks/get", json!({"taskId": failing})).await["result"]["status"], "failed");
    let slow = line.request(9, "tools/call", json!({"name": "demo__sleep", "arguments": {"ms": 20000}, "task": {}})).await;
    let slow = slow["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    eventually("the slow call reached the server", async || {
        (dir.methods("demo").iter().filter(|m| *m == "tools/call").count() >= 3).then_some(())
    })
    .await;
    let cancelled = line.request(10, "tasks/cancel", json!({"taskId": slow})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let result = line.request(11, "tasks/result", json!({"taskId": slow})).await;
    assert_eq!(result["error"]["data"]["reason"], "TASK_CANCELLED", "{result}");
    eventually("the server was told of the cancellation", async || {
        dir.received("demo").iter().any(|m| m["method"] == "notifications/cancelled").then_some(())
    })
    .await;

    // 2026-07-28 over HTTP: toolhost decides. For a client that declares the extension, a call
    // still running after a moment goes on as a task (its result inline in tasks/get later);
    // a quick one answers plainly; a client that does not declare it always gets the result.
    let addr = mcp_http(&app);
    let post = |body: Value| async move {
        let method = body["method"].as_str().unwrap_or_default().to_owned();
        let name = body["params"]["name"].as_str().or(body["params"]["taskId"].as_str()).unwrap_or_default().to_owned();
        let mut headers = vec![JSON_HEADERS[0], JSON_HEADERS[1], ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method.as_str())];
        if !name.is_empty() {
            headers.push(("Mcp-Name", name.as_str()));
        }
        let (status, _, body) = http(addr, "POST", "/mcp", &headers, &body.to_string()).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let quick = post(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "hi"}, "_meta": meta}})).await;
    assert_eq!(quick["result"]["resultType"], "complete", "{quick}");
    let kept = unix_client(&app).await.list_tasks(pb::ListTasksRequest::default()).await.unwrap().into_inner().tasks;
    assert!(kept.iter().any(|task| task.qualified_name == "demo__sleep"), "the same caller's tasks, from the socket: {kept:?}");
    assert!(kept.iter().all(|task| task.qualified_name != "demo__echo"), "a call answered plainly keeps no task: {kept:?}");
    let slow = json!({"ms": 700, "until": release});
    let handle = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "demo__sleep", "arguments": slow, "_meta": meta}}),
    )
    .await;
    assert_eq!((handle["result"]["resultType"].as_str(), handle["result"]["status"].as_str()), (Some("task"), Some("working")), "{handle}");
    assert!(handle["result"]["ttlMs"].as_u64().is_some() && handle["result"].get("result").is_none(), "{handle}");
    let id = handle["result"]["taskId"].as_str().unwrap().to_owned();
    tokio::task::spawn_blocking(move || std::fs::write(release, "")).await.unwrap().unwrap();
    let done = eventually("the 2026 task completed", async || {
        let got = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": id, "_meta": meta}})).await;
        (got["result"]["status"] == "completed").then_some(got)
    })
    .await;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "slept 700 ms", "{done}");
    let plain_meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let plain = post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "hi"}, "_meta": plain_meta}})).await;
    assert_eq!(plain["result"]["resultType"], "complete", "{plain}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_exactly_and_an_oversized_result_is_refused_not_cut() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let sections =
        format!("[tasks]\nmax_open_per_agent = 2\nmax_result_bytes = 2000\nmax_stored_bytes_per_agent = 100000\n{}", access(&dir));
    let app = start(dir.config_with(&sections, &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut mine = agent_client(&app, MINE).await;
    let mut theirs = agent_client(&app, THEIRS).await;

    // Two at once for one agent, however many ask together; another agent has its own two.
    let mut asks = Vec::new();
    for _ in 0..6 {
        let mut mine = agent_client(&app, MINE).await;
        asks.push(tokio::spawn(async move { mine.start_task(start_request("demo__sleep", json!({"ms": 5000}))).await }));
    }
    let mut started = Vec::new();
    for ask in asks {
        match ask.await.unwrap() {
            Ok(task) => started.push(task.into_inner()),
            Err(status) => assert_eq!((status.code(), error_info(&status).0.as_str()), (tonic::Code::ResourceExhausted, "TASKS_LIMITED")),
        }
    }
    assert_eq!(started.len(), 2, "exactly the limit");
    theirs.start_task(start_request("demo__echo", json!({"text": "mine are separate"}))).await.unwrap();
    // One ends (cancelled): room for one more.
    mine.cancel_task(task_id(&started[0].task_id)).await.unwrap();
    let fits = mine.start_task(start_request("demo__echo", json!({"text": "fits again"}))).await.unwrap().into_inner();
    mine.get_task_result(task_id(&fits.task_id)).await.unwrap();
    mine.cancel_task(task_id(&started[1].task_id)).await.unwrap();

    // Kept results count against the agent's storage: with room for less than one more
    // result of the largest size, a new task is refused until some expire.
    let filler = "y".repeat(800);
    let mut kept = 0;
    let refused = loop {
        match mine.start_task(start_request("demo__echo", json!({"text": filler}))).await {
            Ok(task) => {
                mine.get_task_result(task_id(&task.into_inner().task_id)).await.unwrap();
                kept += 1;
                assert!(kept < 100, "the storage bound never refused");
            }
            Err(status) => break status,
        }
    };
    assert_eq!((refused.code(), error_info(&refused).0.as_str()), (tonic::Code::ResourceExhausted, "TASK_STORAGE_FULL"), "{refused:?}");
    assert!(kept >= 40, "about 100000 / 1700 results fit, less one result's room: {kept}");
    theirs.start_task(start_request("demo__echo", json!({"text": "another agent's room is its own"}))).await.unwrap();

    // A result over the bound fails its task with a clear error; nothing is kept of it.
    let big = theirs.start_task(start_request("demo__echo", json!({"text": "x".repeat(5000)}))).await.unwrap().into_inner();
    let refused = theirs.get_task_result(task_id(&big.task_id)).await.unwrap_err();
    assert!(refused.message().contains("max_result_bytes"), "{refused:?}");
    let task = theirs.get_task(task_id(&big.task_id)).await.unwrap().into_inner();
    assert_eq!((task.status(), task.outcome.as_str(), task.result_bytes), (pb::TaskStatus::Failed, "result_too_large", 0), "{task:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_fails_a_running_stdio_task_as_outcome_unknown_and_keeps_finished_ones() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let config = || dir.config_with("", &server_table("demo", &script, ""));
    let app = start(config()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut grpc = client(&app).await;
    let finished = grpc.start_task(start_request("demo__echo", json!({"text": "kept"}))).await.unwrap().into_inner();
    grpc.get_task_result(task_id(&finished.task_id)).await.unwrap();
    let running = grpc.start_task(start_request("demo__sleep", json!({"ms": 60000}))).await.unwrap().into_inner();
    eventually("the long call reached the server", async || {
        (dir.methods("demo").iter().filter(|m| *m == "tools/call").count() >= 2).then_some(())
    })
    .await;
    app.shutdown().await;

    let app = start(config()).await;
    let mut grpc = client(&app).await;
    let task = grpc.get_task(task_id(&running.task_id)).await.unwrap().into_inner();
    assert_eq!((task.status(), task.outcome.as_str()), (pb::TaskStatus::Failed, "session_lost"), "{task:?}");
    assert!(task.status_message.contains("outcome is unknown") && task.status_message.contains("not retried"), "{task:?}");
    let refused = grpc.get_task_result(task_id(&running.task_id)).await.unwrap_err();
    let (reason, details) = error_info(&refused);
    assert_eq!(reason, "OUTCOME_UNKNOWN", "{refused:?}");
    // Where it was sent: its server, tool and generation, not blanks.
    let (server, tool, generation) = (details["server"].as_str(), details["tool"].as_str(), details["generation"].as_str());
    assert_eq!((server, tool, generation), ("demo", "sleep", "1"), "{refused:?}");
    let kept = grpc.get_task_result(task_id(&finished.task_id)).await.unwrap().into_inner();
    assert!(text_of(&kept.result.unwrap()).contains("kept"));
    app.shutdown().await;
}

/// Killed outright (no chance to record anything): the next daemon finds the task working in
/// the store and ends it as cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_leaves_its_running_task_failed_as_outcome_unknown_at_the_next_start() {
    use nix::sys::signal::Signal;
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let table = server_table("demo", &script, "");
    let mut daemon = crate::daemon::Daemon::start(&dir, &table, &[]);
    daemon.wait_servers("ready", |servers| servers.iter().all(|s| s.state() == pb::ServerState::Ready)).await;
    let mut grpc = daemon.client().await;
    let running = grpc.start_task(start_request("demo__sleep", json!({"ms": 60000}))).await.unwrap().into_inner();
    eventually("the call reached the server", async || dir.methods("demo").iter().any(|m| m == "tools/call").then_some(())).await;
    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit().await;
    drop(daemon);

    let mut daemon = crate::daemon::Daemon::start(&dir, &table, &[]);
    let mut grpc = daemon.client().await;
    let task = grpc.get_task(task_id(&running.task_id)).await.unwrap().into_inner();
    assert_eq!((task.status(), task.outcome.as_str()), (pb::TaskStatus::Failed, "session_lost"), "{task:?}");
    let refused = grpc.get_task_result(task_id(&running.task_id)).await.unwrap_err();
    assert_eq!(error_info(&refused).0, "OUTCOME_UNKNOWN", "{refused:?}");
    daemon.signal(Signal::SIGTERM);
    assert!(daemon.wait_exit().await.success());
}

/// The official Python SDK's client (its experimental 2025-11-25 tasks) starts a task, leaves,
/// and a new session fetches the result by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_runs_a_task_leaves_and_fetches_its_result_from_a_new_session() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let app = start(dir.config_with(&mcp_section(""), &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let url = format!("http://{}/mcp", mcp_http(&app));
    let fixture = format!("{}/tests/fixtures/mcp_clients/task_client.py", env!("CARGO_MANIFEST_DIR"));
    let output =
        tokio::time::timeout(WAIT * 2, tokio::process::Command::new(crate::mcp_clients::agents_python()).args([&fixture, &url]).output())
            .await
            .expect("the client finished")
            .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|_| panic!("{stdout}\n{stderr}"));
    assert_eq!(report["tasks_capability"]["requests"]["tools"]["call"], json!({}), "{report}");
    assert_eq!(report["task_support"], json!(["optional"]), "{report}");
    assert_eq!((report["created_status"].as_str(), report["ttl"].as_u64()), (Some("working"), Some(120000)), "{report}");
    assert_eq!(report["texts"], json!(["slept 500 ms"]), "{report}");
    assert_eq!(report["final_status"], "completed", "{report}");
    assert_eq!(report["listed"], json!([true]), "{report}");
    app.shutdown().await;
}

/// The official TypeScript SDK's client: the same, with its task stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_runs_a_task_leaves_and_fetches_its_result_from_a_new_connection() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let app = start(dir.config_with(&mcp_section(""), &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let sdk = crate::interop::npm_tools().join("node_modules/@modelcontextprotocol/sdk");
    let fixture = format!("{}/tests/fixtures/mcp_clients/ts_task_client.mjs", env!("CARGO_MANIFEST_DIR"));
    let url = format!("http://{}/mcp", mcp_http(&app));
    let mut command = tokio::process::Command::new(crate::interop::node());
    command.arg(&fixture).arg(&sdk).arg(&url);
    let output = tokio::time::timeout(WAIT * 2, command.output()).await.expect("the client finished").unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|_| panic!("{stdout}\n{stderr}"));
    assert_eq!(report["tasksCapability"]["requests"]["tools"]["call"], json!({}), "{report}");
    assert_eq!((report["createdStatus"].as_str(), report["ttl"].as_u64()), (Some("working"), Some(90000)), "{report}");
    assert_eq!(report["texts"], json!(["slept 400 ms"]), "{report}");
    assert_eq!(report["finalStatus"], "completed", "{report}");
    app.shutdown().await;
}

/// The command line: `call --task`, `tasks`, `task ID --wait`, `cancel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_lists_waits_for_and_cancels_tasks() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let addr = cli_addr(&app);
    let addr = addr.as_str();
    let cli = |args: Vec<String>| async move {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(&args)
            .args(["--addr", addr])
            .env_remove("TOOLHOST_TOKEN")
            .output()
            .await
            .unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let args = |list: &[&str]| list.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();

    let (code, out, err) = cli(args(&["call", "demo__sleep", "--args", r#"{"ms":300}"#, "--task", "--ttl", "10m", "--json"])).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let started: Value = serde_json::from_str(out.trim()).unwrap();
    let id = started["taskId"].as_str().unwrap().to_owned();
    assert_eq!((started["status"].as_str(), started["ttlMs"].as_u64()), (Some("working"), Some(600_000)), "{started}");

    let (code, out, err) = cli(args(&["task", &id, "--wait"])).await;
    assert_eq!((code, out.trim()), (Some(0), "slept 300 ms"), "{err}");
    let (code, out, _) = cli(args(&["tasks"])).await;
    assert_eq!(code, Some(0));
    assert!(out.contains(&id) && out.contains("completed") && out.contains("demo__sleep"), "{out}");

    let (_, out, _) = cli(args(&["call", "demo__sleep", "--args", r#"{"ms":30000}"#, "--task", "--json"])).await;
    let slow: Value = serde_json::from_str(out.trim()).unwrap();
    let slow = slow["taskId"].as_str().unwrap().to_owned();
    let (code, out, err) = cli(args(&["cancel", &slow])).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("cancelled"), "{out}");
    let (code, _, err) = cli(args(&["cancel", &slow])).await;
    assert_eq!(code, Some(3), "cancelling an ended task is refused: {err}");
    assert!(err.contains("already ended"), "{err}");
    let (code, _, err) = cli(args(&["task", "no-such-task"])).await;
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("no task"), "{err}");
    app.shutdown().await;
}

/// server-everything's `simulate-research-query` runs only as a task (`taskSupport:
/// "required"`). Through toolhost it is callable: a plain call (toolhost runs it as a task on the
/// server and follows it) and a toolhost task (which keeps the server's task id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_its_server_runs_only_as_a_task_is_callable_plainly_and_as_a_task() {
    let (mut server, port) = crate::interop::serve_everything_http().await;
    let dir = TestDir::new();
    let table = format!("[servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\nrequest_timeout = \"30s\"\n");
    let app = start(dir.config(&table)).await;
    wait_for_server(app.registry(), "everything", "the task tool listed", |v| {
        v.state() == ServerState::Ready && tool_names(v).iter().any(|t| t == "simulate-research-query")
    })
    .await;
    let mut grpc = client(&app).await;
    let tools = grpc
        .list_tools(pb::ListToolsRequest { servers: vec!["everything".into()], ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .tools;
    let research = tools.iter().find(|tool| tool.name == "simulate-research-query").expect("listed");
    assert!(research.available, "callable now that toolhost runs server tasks: {research:?}");
    let qualified = research.qualified_name.clone();

    let call =
        pb::CallToolRequest { qualified_name: qualified.clone(), arguments_json: r#"{"topic":"registries"}"#.into(), ..Default::default() };
    let answered = grpc.call_tool(call.clone()).await.unwrap().into_inner();
    assert!(answered.content_json.contains("Research Report: registries"), "{}", answered.content_json);

    let started = grpc.start_task(pb::StartTaskRequest { call: Some(call), ttl_ms: 120_000 }).await.unwrap().into_inner();
    let done = grpc.get_task_result(task_id(&started.task_id)).await.unwrap().into_inner();
    assert!(done.result.unwrap().content_json.contains("Research Report: registries"));
    let stored = app.store().tasks().get(&started.task_id).await.unwrap().unwrap();
    assert!(stored.upstream.is_some(), "the server's own task id is kept: {stored:?}");
    app.shutdown().await;
    let _ = server.kill().await;
}

/// A server that runs tasks itself, in both eras: toolhost's task becomes the server's, a
/// restart of toolhost follows it to its end instead of losing it, and a cancellation reaches
/// the server's `tasks/cancel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_runs_tasks_keeps_a_task_across_a_toolhost_restart_in_both_eras() {
    use crate::http_server::{HttpMcpServer, Script};
    for modern in [false, true] {
        let job = json!({"name": "job", "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}});
        let server = HttpMcpServer::start(Script { tools: vec![job], tasks: true, modern, ..Default::default() }).await;
        let dir = TestDir::new();
        let config = || dir.config(&crate::http::http_table("remote", &server.url(), ""));
        let app = start(config()).await;
        wait_for_server(app.registry(), "remote", "ready", |v| v.state() == ServerState::Ready).await;
        let mut grpc = client(&app).await;
        let running = grpc.start_task(start_request("remote__job", json!({"ms": 1500}))).await.unwrap().into_inner();
        let store = app.store().clone();
        eventually("the server's task id kept", async || store.tasks().get(&running.task_id).await.unwrap().and_then(|task| task.upstream))
            .await;
        app.shutdown().await;

        let app = start(config()).await;
        let mut grpc = client(&app).await;
        let done = grpc.get_task_result(task_id(&running.task_id)).await.unwrap().into_inner();
        let task = done.task.unwrap();
        assert_eq!((task.status(), task.outcome.as_str()), (pb::TaskStatus::Completed, "ok"), "modern {modern}: {task:?}");
        assert_eq!(text_of(&done.result.unwrap()), r#"job done: {"ms":1500}"#, "modern {modern}");
        assert_eq!(server.tasks_started(), 1, "modern {modern}: followed, never started again");

        let slow = grpc.start_task(start_request("remote__job", json!({"ms": 60000}))).await.unwrap().into_inner();
        let store = app.store().clone();
        let upstream = eventually("the server's task id kept", async || {
            store.tasks().get(&slow.task_id).await.unwrap().and_then(|task| task.upstream)
        })
        .await;
        let cancelled = grpc.cancel_task(task_id(&slow.task_id)).await.unwrap().into_inner();
        assert_eq!(cancelled.status(), pb::TaskStatus::Cancelled);
        assert_eq!(server.cancelled_tasks(), [upstream], "modern {modern}: the server was told");
        app.shutdown().await;
    }
}

/// The pre-release conformance suite's 2026-07-28 tasks scenarios, against toolhost fronting a
/// server with their fixtures (`greet` sync; `slow_compute`, `failing_job` and
/// `protocol_error_job` task-supporting). Not run: `tasks-mrtr-*` (toolhost's tasks do not ask
/// for input), `tasks-status-notifications` (pending in the suite itself) and
/// `tasks-required-task-error` (toolhost runs a task-only tool for any client instead of
/// refusing one that did not declare the extension).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2026_conformance_tasks_scenarios_pass_through_toolhost() {
    let dir = TestDir::new();
    let supporting = json!({"taskSupport": "optional"});
    let tools = json!([
        {"name": "greet", "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
        {"name": "slow_compute", "execution": supporting, "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}},
        {"name": "failing_job", "execution": supporting, "inputSchema": {"type": "object"}},
        {"name": "protocol_error_job", "execution": supporting, "inputSchema": {"type": "object"}},
        // The suite's input-asking fixture, here a plain tool: toolhost's tasks do not ask for
        // input, so the check's tasks/update step has no task to update and is skipped.
        {"name": "confirm_delete", "inputSchema": {"type": "object", "properties": {"filename": {"type": "string"}}}}
    ]);
    let script = dir.script("fixtures", json!({"tools": tools}));
    let profile = "[mcp.profiles.conformance]\ntools = [\"fixtures__*\"]\nnames = \"original\"\n";
    let app = start(dir.config_with(&mcp_section(profile), &server_table("fixtures", &script, ""))).await;
    wait_for_server(app.registry(), "fixtures", "ready", |v| v.state() == ServerState::Ready).await;
    let url = format!("http://localhost:{}/mcp/conformance", mcp_http(&app).port());
    let suite = crate::interop::npm_tools().join("node_modules/conformance-next/dist/index.js");
    for scenario in [
        "tasks-lifecycle",
        "tasks-capability-negotiation",
        "tasks-wire-fields",
        "tasks-request-state-removal",
        "tasks-request-headers",
        "tasks-dispatch-and-envelope",
    ] {
        crate::mcp_clients::conformance_server(&suite, &url, scenario).await;
    }
    app.shutdown().await;
}

/// `[access]` where agent `mine` must have `demo__echo` approved by an operator (the local user).
fn approving_access(dir: &TestDir) -> String {
    std::fs::write(dir.path("mine.token"), MINE).unwrap();
    format!(
        "[access]\n[[access.agents]]\nname = \"mine\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\napprove = [\"demo__echo\"]\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n",
        dir.path("mine.token").display(),
        nix::unistd::getuid()
    )
}

/// The echo calls server `demo` received, across every launch.
fn echoes(dir: &TestDir) -> Vec<Value> {
    dir.received("demo")
        .into_iter()
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "echo")
        .map(|m| m["params"]["arguments"].clone())
        .collect()
}

/// Starts a task of `mine` calling `demo__echo` with `text`, and gives it once it waits for
/// its approval request, with that request's id.
async fn task_waiting_for_approval(app: &toolhost::app::App, text: &str) -> (String, String) {
    let task = agent_client(app, MINE).await.start_task(start_request("demo__echo", json!({"text": text}))).await.unwrap().into_inner();
    let mut reader = agent_client(app, MINE).await;
    let message = eventually("the task waits for its approval", async || {
        let now = reader.get_task(task_id(&task.task_id)).await.unwrap().into_inner();
        now.status_message.contains("waiting for approval").then_some(now.status_message)
    })
    .await;
    let mut operator = client(app).await;
    let pending = operator.list_approvals(pb::ListApprovalsRequest { status: "pending".into() }).await.unwrap().into_inner().approvals;
    let request = pending.into_iter().find(|request| message.contains(&request.approval_id)).expect("its request is pending");
    (task.task_id, request.approval_id)
}

/// A task waiting for an approval when toolhost stops is still waiting when it starts again;
/// approved then, its call runs once and the task completes with the tool's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_approval_keeps_waiting_across_a_restart_and_runs_once_approved() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let config = || dir.config_with(&approving_access(&dir), &server_table("demo", &script, ""));
    let app = start(config()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let (task, request) = task_waiting_for_approval(&app, "pay 12 to dora").await;
    app.shutdown().await;

    let app = start(config()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut mine = agent_client(&app, MINE).await;
    let waiting = mine.get_task(task_id(&task)).await.unwrap().into_inner();
    assert_eq!(waiting.status(), pb::TaskStatus::Working, "{waiting:?}");
    assert!(waiting.status_message.contains(&request), "{waiting:?}");
    assert!(echoes(&dir).is_empty(), "nothing ran before the approval");
    client(&app)
        .await
        .decide_approval(pb::DecideApprovalRequest { approval_id: request, approve: true, reason: String::new() })
        .await
        .unwrap();
    let done = eventually("the task completed", async || {
        let now = mine.get_task_result(task_id(&task)).await.ok()?.into_inner();
        now.task.as_ref().is_some_and(|task| task.status() == pb::TaskStatus::Completed).then_some(now)
    })
    .await;
    assert_eq!(done.task.as_ref().unwrap().outcome, "ok", "{done:?}");
    assert!(text_of(done.result.as_ref().unwrap()).contains("pay 12 to dora"), "{done:?}");
    assert_eq!(echoes(&dir), vec![json!({"text": "pay 12 to dora"})], "the call ran exactly once");
    // One call, one record: its outcome, written by the start that followed it; the daemon
    // that stopped under it handed it on and wrote no `cancelled`.
    let store = app.store().clone();
    let calls = eventually("the call's record", async || {
        let records = store.audit().query(0, None, 100).await.ok()?;
        let calls: Vec<String> = records
            .into_iter()
            .filter(|record| record.qualified_name == "demo__echo" && !record.outcome.contains(':'))
            .map(|record| record.outcome)
            .collect();
        calls.iter().any(|outcome| outcome == "ok").then_some(calls)
    })
    .await;
    assert_eq!(calls, ["ok"], "the call's records");
    app.shutdown().await;
}

/// A task waiting for an approval when toolhost stops, whose request is denied after the
/// restart (or expires): it fails saying why, and that its call did not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_approval_is_denied_or_expires_after_a_restart_fails_saying_nothing_ran() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let config = |ttl: &str| {
        let sections = format!("[approvals]\nttl = \"{ttl}\"\n{}", approving_access(&dir));
        dir.config_with(&sections, &server_table("demo", &script, ""))
    };
    let app = start(config("1h")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let (denied, request) = task_waiting_for_approval(&app, "pay 1000 to mallory").await;
    app.shutdown().await;

    // From here, new requests expire after 3s.
    let app = start(config("3s")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut mine = agent_client(&app, MINE).await;
    assert_eq!(mine.get_task(task_id(&denied)).await.unwrap().into_inner().status(), pb::TaskStatus::Working);
    let decision = pb::DecideApprovalRequest { approval_id: request.clone(), approve: false, reason: "not a known payee".into() };
    client(&app).await.decide_approval(decision).await.unwrap();
    let failed = eventually("the task failed", async || {
        let now = mine.get_task(task_id(&denied)).await.unwrap().into_inner();
        (now.status() == pb::TaskStatus::Failed).then_some(now)
    })
    .await;
    assert_eq!(failed.outcome, "approval_denied", "{failed:?}");
    assert!(failed.status_message.contains("did not run"), "{failed:?}");
    let refused = mine.get_task_result(task_id(&denied)).await.unwrap_err();
    let (reason, details) = error_info(&refused);
    assert_eq!(
        (reason.as_str(), details["approval_id"].as_str(), details["reason"].as_str()),
        ("APPROVAL_DENIED", request.as_str(), "not a known payee")
    );

    // A request that expires, undecided, across a restart: the task says so.
    let (expiring, request) = task_waiting_for_approval(&app, "pay 5 to eve").await;
    app.shutdown().await;
    let app = start(config("3s")).await;
    let mut mine = agent_client(&app, MINE).await;
    let expired = eventually("the task failed", async || {
        let now = mine.get_task(task_id(&expiring)).await.unwrap().into_inner();
        (now.status() == pb::TaskStatus::Failed).then_some(now)
    })
    .await;
    assert_eq!(expired.outcome, "approval_expired", "{expired:?}");
    assert!(expired.status_message.contains("did not run"), "{expired:?}");
    let refused = mine.get_task_result(task_id(&expiring)).await.unwrap_err();
    assert_eq!((error_info(&refused).0.as_str(), error_info(&refused).1["approval_id"].as_str()), ("APPROVAL_EXPIRED", request.as_str()));
    assert!(echoes(&dir).is_empty(), "nothing ran");
    app.shutdown().await;
}
