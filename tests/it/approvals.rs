//! Calls a person approves: a gRPC agent's call waits for an operator's decision made with the
//! CLI and runs once with exactly the approved arguments; a denial carries its reason; a call
//! past its deadline names its request and runs when asked again; a task waits in `working`;
//! two operators racing get one decision; a flood stops at the limit; an operator may not
//! approve their own call; a changed definition makes an approval stale; a restart keeps what
//! is pending; a server's `approve` gates tools whose served names are escaped.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

const BOT_TOKEN: &str = "approval-bot-token-0123456789abc";

fn tools(echo_description: &str) -> Value {
    json!([
        {"name": "echo", "description": echo_description, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        {"name": "add", "description": "Adds.", "inputSchema": {"type": "object"}},
    ])
}

/// A daemon whose token agent `bot` must have `demo__echo` approved, and whose server makes
/// everyone's `add` wait for approval; the test's own user is the operator. `extra` goes into
/// `[approvals]`, `sections` before it. A plain call waits for its decision within its
/// deadline here (`answer_after` long): `approvals_visible` holds the early answer.
fn config_with(dir: &TestDir, sections: &str, extra: &str) -> toolhost::config::Config {
    std::fs::write(dir.path("bot.token"), BOT_TOKEN).unwrap();
    let tools_file = dir.path("tools.json");
    if !tools_file.exists() {
        std::fs::write(&tools_file, tools("Echoes.").to_string()).unwrap();
    }
    let script = dir.script("demo", json!({"tools_file": tools_file, "watch_tools_file": true}));
    let uid = std::fs::metadata(dir.path("")).unwrap().uid();
    let sections = format!(
        "{sections}\n[approvals]\nseparate_approver = true\nmax_pending_per_agent = 3\nanswer_after = \"10m\"\n{extra}\n\
         [access]\n[[access.agents]]\nname = \"bot\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__*\"]\napprove = [\"demo__echo\"]\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{uid}]\nallow = [\"*\"]\nadmin = true\n",
        dir.path("bot.token").display()
    );
    dir.config_with(&sections, &server_table("demo", &script, "approve = [\"add\"]\n"))
}

fn config(dir: &TestDir, extra: &str) -> toolhost::config::Config {
    config_with(dir, "", extra)
}

fn echo(text: &str) -> pb::CallToolRequest {
    pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: json!({"text": text}).to_string(), ..Default::default() }
}

fn with_timeout(call: pb::CallToolRequest, timeout: Duration) -> tonic::Request<pb::CallToolRequest> {
    let mut request = tonic::Request::new(call);
    request.set_timeout(timeout);
    request
}

/// The pending requests, once there are `count`.
async fn pending(app: &toolhost::app::App, count: usize) -> Vec<pb::CallApproval> {
    let mut operator = client(app).await;
    eventually(&format!("{count} pending approvals"), async || {
        let request = pb::ListApprovalsRequest { status: "pending".into() };
        let listed = operator.list_approvals(request).await.unwrap().into_inner().approvals;
        (listed.len() == count).then_some(listed)
    })
    .await
}

fn cli(app: &toolhost::app::App, args: &[&str]) -> (bool, String) {
    let addr = cli_addr(app);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(args).args(["--addr", &addr]).output().unwrap();
    (output.status.success(), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

pub(crate) fn echo_calls(dir: &TestDir) -> Vec<Value> {
    dir.received("demo")
        .into_iter()
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "echo")
        .map(|m| m["params"]["arguments"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_once_with_exactly_its_arguments_and_every_other_ending_is_typed() {
    let dir = TestDir::new();
    let app = start(config(&dir, "")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;

    // Waits, is shown with its arguments and definition, approved with the CLI, runs once.
    let mut waiting = agent_client(&app, BOT_TOKEN).await;
    let call = tokio::spawn(async move { waiting.call_tool(with_timeout(echo("pay 10 to alice"), Duration::from_secs(120))).await });
    let request = pending(&app, 1).await.remove(0);
    assert_eq!((request.agent.as_str(), request.qualified_name.as_str()), ("bot", "demo__echo"));
    assert_eq!(request.arguments_json, r#"{"text":"pay 10 to alice"}"#, "RFC 8785 canonical");
    assert!(echo_calls(&dir).is_empty(), "nothing reached the server before the approval");
    let (ok, shown) = cli(&app, &["approvals", "show", &request.approval_id]);
    assert!(ok && shown.contains("pay 10 to alice") && shown.contains("Echoes.") && shown.contains("pending"), "{shown}");
    let (ok, listed) = cli(&app, &["approvals"]);
    assert!(ok && listed.contains(&request.approval_id) && listed.contains("demo__echo"), "{listed}");
    let (ok, said) = cli(&app, &["approvals", "approve", &request.approval_id, "--reason", "invoice 7"]);
    assert!(ok && said.contains("approved"), "{said}");
    let result = call.await.unwrap().unwrap().into_inner();
    assert!(result.content_json.contains("pay 10 to alice"), "{result:?}");
    assert_eq!(echo_calls(&dir), vec![json!({"text": "pay 10 to alice"})]);
    // Used: a second decision, or the same call again, gets nothing from it.
    let again = client(&app)
        .await
        .decide_approval(pb::DecideApprovalRequest { approval_id: request.approval_id.clone(), approve: true, reason: String::new() })
        .await
        .unwrap_err();
    assert_eq!(error_info(&again).0, "APPROVAL_NOT_PENDING", "{again:?}");

    // A denial carries the operator's reason.
    let mut waiting = agent_client(&app, BOT_TOKEN).await;
    let call = tokio::spawn(async move { waiting.call_tool(with_timeout(echo("pay 1000 to mallory"), Duration::from_secs(120))).await });
    let request = pending(&app, 1).await.remove(0);
    let (ok, said) = cli(&app, &["approvals", "deny", &request.approval_id, "--reason", "not a known payee"]);
    assert!(ok && said.contains("denied"), "{said}");
    let denied = call.await.unwrap().unwrap_err();
    let (reason, details) = error_info(&denied);
    assert_eq!((reason.as_str(), details["reason"].as_str()), ("APPROVAL_DENIED", "not a known payee"), "{denied:?}");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);

    // Past its deadline the call names its request and the task that now follows it; approved
    // later, that task runs the call. Other arguments are another request.
    let late = agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(echo("pay 5 to bob"), Duration::from_secs(2))).await.unwrap_err();
    let (reason, details) = error_info(&late);
    assert_eq!(reason, "APPROVAL_PENDING", "{late:?}");
    let (id, follower) = (details["approval_id"].clone(), details["task_id"].clone());
    assert!(late.message().contains(&follower), "{late:?}");
    let mut operator = client(&app).await;
    operator.decide_approval(pb::DecideApprovalRequest { approval_id: id.clone(), approve: true, reason: String::new() }).await.unwrap();
    let mut follower_reader = agent_client(&app, BOT_TOKEN).await;
    let followed = eventually("the following task ran the approved call", async || {
        let now = follower_reader.get_task(pb::TaskRequest { task_id: follower.clone() }).await.unwrap().into_inner();
        (now.status == pb::TaskStatus::Completed as i32).then_some(now)
    })
    .await;
    assert_eq!(followed.outcome, "ok");
    let swapped =
        agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(echo("pay 5000 to bob"), Duration::from_secs(2))).await.unwrap_err();
    assert_eq!(error_info(&swapped).0, "APPROVAL_PENDING", "other arguments are not approved: {swapped:?}");
    assert_ne!(error_info(&swapped).1["approval_id"], id);
    assert_eq!(echo_calls(&dir).len(), 2, "exactly the approved calls ran: {:?}", echo_calls(&dir));

    // Two operators at once: exactly one decision wins.
    let pending_now = pending(&app, 1).await.remove(0);
    let decide = |approve: bool| {
        let (app_client, id) = (client(&app), pending_now.approval_id.clone());
        async move { app_client.await.decide_approval(pb::DecideApprovalRequest { approval_id: id, approve, reason: "race".into() }).await }
    };
    let (first, second) = tokio::join!(decide(true), decide(false));
    assert_eq!(u8::from(first.is_ok()) + u8::from(second.is_ok()), 1, "{first:?} {second:?}");
    let loser = first.err().or(second.err()).unwrap();
    assert_eq!(error_info(&loser).0, "APPROVAL_NOT_PENDING");

    // A task waits in working, saying for what, and runs once approved.
    let task = agent_client(&app, BOT_TOKEN)
        .await
        .start_task(pb::StartTaskRequest { call: Some(echo("task: pay 3 to carol")), ttl_ms: 0 })
        .await
        .unwrap()
        .into_inner();
    let request = pending(&app, 1).await.remove(0);
    let mut reader = agent_client(&app, BOT_TOKEN).await;
    let seen = eventually("the task says it waits for an approval", async || {
        let now = reader.get_task(pb::TaskRequest { task_id: task.task_id.clone() }).await.unwrap().into_inner();
        now.status_message.contains("waiting for approval by an operator").then_some(now)
    })
    .await;
    assert!(seen.status_message.contains(&request.approval_id), "{seen:?}");
    operator
        .decide_approval(pb::DecideApprovalRequest { approval_id: request.approval_id, approve: true, reason: String::new() })
        .await
        .unwrap();
    let mut waiter = agent_client(&app, BOT_TOKEN).await;
    let done = eventually("the task completed", async || {
        let now = waiter.get_task(pb::TaskRequest { task_id: task.task_id.clone() }).await.unwrap().into_inner();
        (now.status == pb::TaskStatus::Completed as i32).then_some(now)
    })
    .await;
    assert_eq!(done.outcome, "ok");

    // A flood stops at the agent's limit (3 pending), typed.
    let mut floods = Vec::new();
    for n in 0..3 {
        let mut waiting = agent_client(&app, BOT_TOKEN).await;
        floods.push(tokio::spawn(
            async move { waiting.call_tool(with_timeout(echo(&format!("flood {n}")), Duration::from_secs(120))).await },
        ));
    }
    pending(&app, 3).await;
    let refused = agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(echo("flood 4"), Duration::from_secs(5))).await.unwrap_err();
    assert_eq!((refused.code(), error_info(&refused).0.as_str()), (tonic::Code::ResourceExhausted, "APPROVALS_EXHAUSTED"), "{refused:?}");
    for request in pending(&app, 3).await {
        operator
            .decide_approval(pb::DecideApprovalRequest { approval_id: request.approval_id, approve: false, reason: "flood".into() })
            .await
            .unwrap();
    }
    for flood in floods {
        assert_eq!(error_info(&flood.await.unwrap().unwrap_err()).0, "APPROVAL_DENIED");
    }

    // The server's `approve` holds for everyone, operators too, who may not approve their own.
    let mut own = client(&app).await;
    let add = pb::CallToolRequest { qualified_name: "demo__add".into(), arguments_json: r#"{"a":1,"b":2}"#.into(), ..Default::default() };
    let mine = own.call_tool(with_timeout(add, Duration::from_secs(2))).await.unwrap_err();
    let id = error_info(&mine).1["approval_id"].clone();
    let refused =
        operator.decide_approval(pb::DecideApprovalRequest { approval_id: id, approve: true, reason: String::new() }).await.unwrap_err();
    assert_eq!(error_info(&refused).0, "SEPARATE_APPROVER", "{refused:?}");

    // Everything is in the trail: requests, decisions (who), and the calls' own outcomes.
    let trail =
        client(&app).await.query_audit(pb::QueryAuditRequest { limit: 1000, ..Default::default() }).await.unwrap().into_inner().records;
    let outcomes: Vec<&str> = trail.iter().map(|record| record.outcome.as_str()).collect();
    assert!(outcomes.iter().filter(|o| o.starts_with("approval_requested:")).count() >= 8, "{outcomes:?}");
    assert!(trail.iter().any(|r| r.outcome.ends_with(":denied") && r.agent == "operator"), "{outcomes:?}");
    assert!(
        outcomes.contains(&"approval_denied") && outcomes.contains(&"approval_pending") && outcomes.contains(&"approvals_exhausted"),
        "{outcomes:?}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_request_survives_a_restart_and_a_changed_definition_makes_an_approval_stale() {
    let dir = TestDir::new();
    let app = start(config(&dir, "")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let late =
        agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(echo("before the restart"), Duration::from_secs(2))).await.unwrap_err();
    let (id, follower) = (error_info(&late).1["approval_id"].clone(), error_info(&late).1["task_id"].clone());
    app.shutdown().await;

    let app = start(config(&dir, "")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(pending(&app, 1).await[0].approval_id, id, "still pending after the restart");
    let (ok, said) = cli(&app, &["approvals", "approve", &id]);
    assert!(ok, "{said}");
    // The task following the request kept following it across the restart, and ran it.
    let mut reader = agent_client(&app, BOT_TOKEN).await;
    eventually("the following task ran the approved call", async || {
        let now = reader.get_task(pb::TaskRequest { task_id: follower.clone() }).await.unwrap().into_inner();
        (now.status == pb::TaskStatus::Completed as i32).then_some(now)
    })
    .await;
    assert_eq!(echo_calls(&dir), vec![json!({"text": "before the restart"})]);

    // Approved, then the server changes the tool: the approval no longer holds.
    let mut waiting = agent_client(&app, BOT_TOKEN).await;
    let call = tokio::spawn(async move { waiting.call_tool(with_timeout(echo("after a change"), Duration::from_secs(120))).await });
    let request = pending(&app, 1).await.remove(0);
    let before = app.registry().server("demo").unwrap().generation_number();
    std::fs::write(dir.path("tools.json"), tools("Echoes, and also mails what it echoes elsewhere.").to_string()).unwrap();
    wait_for_server(app.registry(), "demo", "the changed definition", |v| v.generation_number() > before).await;
    client(&app)
        .await
        .decide_approval(pb::DecideApprovalRequest { approval_id: request.approval_id, approve: true, reason: String::new() })
        .await
        .unwrap();
    let stale = call.await.unwrap().unwrap_err();
    let (reason, details) = error_info(&stale);
    assert_eq!((reason.as_str(), details["changed"].as_str()), ("APPROVAL_STALE", "the tool's definition"), "{stale:?}");
    assert_eq!(echo_calls(&dir).len(), 1, "the stale call never ran");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_request_expires_and_its_call_says_so() {
    let dir = TestDir::new();
    let app = start(config(&dir, "ttl = \"1s\"\n")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let expired = agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(echo("too late"), Duration::from_secs(60))).await.unwrap_err();
    assert_eq!(error_info(&expired).0, "APPROVAL_EXPIRED", "{expired:?}");
    let listed = client(&app).await.list_approvals(pb::ListApprovalsRequest { status: "expired".into() }).await.unwrap().into_inner();
    assert_eq!(listed.approvals.len(), 1);
    assert!(echo_calls(&dir).is_empty());
    app.shutdown().await;
}

/// The official Python SDK's client over MCP (2025-11-25): a task waits in `working` naming its
/// request and completes once approved; a plain call waits within its deadline and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_waits_for_approval_as_a_task_and_as_a_plain_call() {
    use tokio::io::AsyncBufReadExt;
    let dir = TestDir::new();
    let app = start(config_with(&dir, &crate::mcp_endpoint::mcp_section(""), "")).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let url = format!("http://{}/mcp", crate::mcp_endpoint::mcp_http(&app));
    let fixture = format!("{}/tests/fixtures/mcp_clients/approval_client.py", env!("CARGO_MANIFEST_DIR"));
    let mut child = tokio::process::Command::new(crate::mcp_clients::agents_python())
        .args([&fixture, &url, BOT_TOKEN])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line =
            tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.expect("the client's next step").unwrap().unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line}"))
    };
    let mut operator = client(&app).await;
    for expected in ["task waiting", "calling"] {
        assert_eq!(next().await["step"], expected);
        let request = pending(&app, 1).await.remove(0);
        operator
            .decide_approval(pb::DecideApprovalRequest { approval_id: request.approval_id, approve: true, reason: String::new() })
            .await
            .unwrap();
    }
    let report = next().await;
    assert!(child.wait().await.unwrap().success(), "{report}");
    assert_eq!(report["waiting_status"], "working", "{report}");
    assert!(report["waiting_message"].as_str().unwrap().contains("waiting for approval by an operator (request "), "{report}");
    assert!(report["task_texts"][0].as_str().unwrap().contains("refund 7 via a task"), "{report}");
    assert!(report["plain_texts"][0].as_str().unwrap().contains("refund 8 plainly"), "{report}");
    assert_eq!(echo_calls(&dir), vec![json!({"text": "refund 7 via a task"}), json!({"text": "refund 8 plainly"})]);
    app.shutdown().await;
}

const OPS_FIRST: &str = "ops-first-token-0123456789abcdef";
const OPS_SECOND: &str = "ops-second-token-0123456789abcde";

/// A daemon serving `pay` (tools `refund.now`, `ns:send`, `list`, whose `approve` names the
/// first two as `pay` does), with the token agent `bot`, the operator entry `ops` holding two
/// tokens (its own calls of `pay__list` wait for approval), and the test's user as `operator`.
async fn pay_daemon(dir: &TestDir) -> toolhost::app::App {
    for (file, token) in [("bot.token", BOT_TOKEN), ("ops1.token", OPS_FIRST), ("ops2.token", OPS_SECOND)] {
        std::fs::write(dir.path(file), token).unwrap();
    }
    let tool = |name: &str| json!({"name": name, "description": "Does it.", "inputSchema": {"type": "object"}});
    let tools_file = dir.path("pay-tools.json");
    std::fs::write(&tools_file, json!([tool("refund.now"), tool("ns:send"), tool("list")]).to_string()).unwrap();
    let script = dir.script("pay", json!({"tools_file": tools_file}));
    let uid = std::fs::metadata(dir.path("")).unwrap().uid();
    let token = |file: &str| format!("\"${{file:{}}}\"", dir.path(file).display());
    let sections = format!(
        "[approvals]\nseparate_approver = true\nanswer_after = \"10m\"\n[access]\n\
         [[access.agents]]\nname = \"bot\"\ntokens = [{}]\nallow = [\"pay__*\"]\n\
         [[access.agents]]\nname = \"ops\"\ntokens = [{}, {}]\nallow = [\"*\"]\napprove = [\"pay__list\"]\nadmin = true\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{uid}]\nallow = [\"*\"]\nadmin = true\n",
        token("bot.token"),
        token("ops1.token"),
        token("ops2.token"),
    );
    let config = dir.config_with(&sections, &server_table("pay", &script, "approve = [\"refund.now\", \"ns:send\"]\n"));
    let app = start(config).await;
    wait_for_server(app.registry(), "pay", "ready", |v| v.state() == ServerState::Ready).await;
    app
}

fn pay_call(qualified: &str, server: &str, name: &str) -> pb::CallToolRequest {
    pb::CallToolRequest {
        qualified_name: qualified.into(),
        server: server.into(),
        name: name.into(),
        arguments_json: r#"{"amount":10}"#.into(),
        ..Default::default()
    }
}

fn approve(id: &str) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest { approval_id: id.to_owned(), approve: true, reason: String::new() }
}

/// A server's `approve` names its tools as the server spells them: tools whose names are
/// escaped when served (`refund.now` is `pay__refund_now_…`) wait for an operator all the same,
/// by either name an agent calls them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_approve_list_gates_tools_whose_served_names_are_escaped() {
    let dir = TestDir::new();
    let app = pay_daemon(&dir).await;
    let (refund, send) = (toolhost::catalog::names::qualify("pay", "refund.now"), toolhost::catalog::names::qualify("pay", "ns:send"));
    assert!(refund.starts_with("pay__refund_now_") && send.starts_with("pay__ns_send_"), "{refund} {send}");
    let called =
        |name: &str| dir.received("pay").into_iter().filter(|m| m["method"] == "tools/call" && m["params"]["name"] == name).count();

    // A tool the list does not name runs at once (and the server is reachable).
    agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(pay_call("pay__list", "", ""), Duration::from_secs(10))).await.unwrap();
    assert_eq!(called("list"), 1);
    // `ns:send`, called by its served name: a request, and nothing sent.
    let waited =
        agent_client(&app, BOT_TOKEN).await.call_tool(with_timeout(pay_call(&send, "", ""), Duration::from_secs(2))).await.unwrap_err();
    assert_eq!(error_info(&waited).0, "APPROVAL_PENDING", "{waited:?}");
    // `refund.now`, called by server and own name: waits for the operator, then runs once.
    let mut waiting = agent_client(&app, BOT_TOKEN).await;
    let pending_call =
        tokio::spawn(async move { waiting.call_tool(with_timeout(pay_call("", "pay", "refund.now"), Duration::from_secs(120))).await });
    let requests = pending(&app, 2).await;
    assert_eq!(called("refund.now") + called("ns:send"), 0, "nothing ran before an approval");
    let request = requests.iter().find(|request| request.qualified_name == refund).expect("a request for refund.now");
    client(&app).await.decide_approval(approve(&request.approval_id)).await.unwrap();
    pending_call.await.unwrap().unwrap();
    assert_eq!(called("refund.now"), 1, "approved, it ran once");
    // The request the task following `ns:send` waits for is decided: nothing is left waiting.
    let send_request = requests.iter().find(|request| request.qualified_name == send).expect("a request for ns:send");
    let deny = pb::DecideApprovalRequest { approval_id: send_request.approval_id.clone(), approve: false, reason: "test".into() };
    client(&app).await.decide_approval(deny).await.unwrap();
    assert_eq!(called("ns:send"), 0, "denied, it never ran");
    app.shutdown().await;
}

/// With `separate_approver`, the approver is another entry: an operator entry holding two
/// tokens asks with one and may not approve with the other (nor the same); another entry may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_never_approves_its_own_request_with_another_of_its_tokens() {
    let dir = TestDir::new();
    let app = pay_daemon(&dir).await;
    let mine = agent_client(&app, OPS_FIRST)
        .await
        .call_tool(with_timeout(pay_call("pay__list", "", ""), Duration::from_secs(2)))
        .await
        .unwrap_err();
    let (reason, details) = error_info(&mine);
    assert_eq!(reason, "APPROVAL_PENDING", "{mine:?}");
    let id = details["approval_id"].clone();
    for own in [OPS_SECOND, OPS_FIRST] {
        let refused = agent_client(&app, own).await.decide_approval(approve(&id)).await.unwrap_err();
        assert_eq!(error_info(&refused).0, "SEPARATE_APPROVER", "{refused:?}");
    }
    client(&app).await.decide_approval(approve(&id)).await.unwrap();
    app.shutdown().await;
}

/// Every exit of a call leaves exactly one audit record, with its outcome, written by the
/// call's one record step: a call refused by its policy (`denied`), a stale one, one waiting
/// for approval (`approval_pending`, beside the request's and its follower task's events), one
/// past its entry's rate, and one that ran. Read from the store, behind a marker call of the
/// operator's (the trail is written in order, so once the marker is stored all before it are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exit_of_a_call_leaves_exactly_one_audit_record_with_its_outcome() {
    let dir = TestDir::new();
    std::fs::write(dir.path("bot.token"), BOT_TOKEN).unwrap();
    let script = dir.script("demo", json!({}));
    let uid = std::fs::metadata(dir.path("")).unwrap().uid();
    let sections = format!(
        "[approvals]\nanswer_after = \"1s\"\n\
         [access]\n[[access.agents]]\nname = \"bot\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__echo\", \"demo__add\"]\n\
         approve = [\"demo__add\"]\nrate = {{ calls = 2, per = \"1h\", burst = 2 }}\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{uid}]\nallow = [\"*\"]\nadmin = true\n",
        dir.path("bot.token").display()
    );
    let app = start(dir.config_with(&sections, &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut bot = agent_client(&app, BOT_TOKEN).await;

    bot.call_tool(echo("ran")).await.expect("a call within the rate runs");
    let denied = pb::CallToolRequest { qualified_name: "demo__sleep".into(), ..Default::default() };
    assert_eq!(error_info(&bot.call_tool(denied).await.unwrap_err()).0, "UNKNOWN_TOOL", "refused as missing");
    let stale = pb::CallToolRequest { expected_definition_hash: "0".repeat(64), ..echo("stale") };
    assert_eq!(error_info(&bot.call_tool(stale).await.unwrap_err()).0, "STALE_TOOL_CHANGED");
    let add = pb::CallToolRequest { qualified_name: "demo__add".into(), arguments_json: r#"{"a":1,"b":2}"#.into(), ..Default::default() };
    let pending = bot.call_tool(with_timeout(add, Duration::from_secs(60))).await.unwrap_err();
    let (reason, details) = error_info(&pending);
    assert_eq!(reason, "APPROVAL_PENDING", "{pending:?}");
    assert_eq!(error_info(&bot.call_tool(echo("limited")).await.unwrap_err()).0, "RATE_LIMITED");
    client(&app).await.call_tool(echo("marker")).await.expect("the operator's marker call");

    let mut operator = client(&app).await;
    let records = eventually("the marker call's record", async || {
        let request = pb::QueryAuditRequest { limit: 100, ..Default::default() };
        let records = operator.query_audit(request).await.unwrap().into_inner().records;
        if records.iter().any(|record| record.agent == "operator" && record.qualified_name == "demo__echo") {
            Ok(records)
        } else {
            Err(format!("{records:#?}"))
        }
    })
    .await;
    let of = |name: &str| {
        let mut outcomes: Vec<String> = records
            .iter()
            .filter(|record| record.agent == "bot" && record.qualified_name == name)
            .map(|record| record.outcome.clone())
            .collect();
        outcomes.sort();
        outcomes
    };
    assert_eq!(of("demo__echo"), ["ok", "rate_limited", "stale_tool:changed_since_listed"], "{records:#?}");
    assert_eq!(of("demo__sleep"), ["denied"], "{records:#?}");
    let (id, task) = (&details["approval_id"], &details["task_id"]);
    let mut expected = vec!["approval_pending".to_owned(), format!("approval_requested:{id}"), format!("task_started:{task}")];
    expected.sort();
    assert_eq!(of("demo__add"), expected, "one record of the call, one of each event: {records:#?}");
    assert_eq!(records.iter().filter(|record| record.agent == "bot").count(), 7, "{records:#?}");
    app.shutdown().await;
}
