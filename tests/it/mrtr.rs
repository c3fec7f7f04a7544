//! Multi-round-trip requests (2026-07-28, SEP-2322) passed through to the agent: over gRPC (an
//! `input_required` outcome and a continuation token), over the MCP endpoint to a 2026 client
//! (the same result shape, toolhost's token as `requestState`) and to a 2025 client (an
//! `elicitation/create` on its session), and the official conformance scenario with the test
//! as the agent.

use std::process::Stdio;

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::app::App;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::mcp_endpoint::{Line, mcp_section, mcp_socket};

const ELICITATION: &str = r#"{"elicitation":{}}"#;
const ACCEPT: &str = r#"{"confirm":{"action":"accept","content":{"ok":true}}}"#;

fn asking_tools(description: &str) -> Value {
    json!([
        {"name": "confirm", "description": description, "inputSchema": {"type": "object"}},
        {"name": "echo", "description": "echoes", "inputSchema": {"type": "object"}},
    ])
}

/// A 2026-07-28 server `ask` whose `confirm` asks for a confirmation before it finishes, its
/// tools read from `tools.json` (rewrite it and the server announces the change).
async fn asking_server(dir: &TestDir) -> App {
    asking_server_with(dir, "").await
}

async fn asking_server_with(dir: &TestDir, sections: &str) -> App {
    let file = dir.path("tools.json");
    std::fs::write(&file, asking_tools("asks first").to_string()).unwrap();
    let script = dir.script("ask", json!({"era": "modern", "tools_file": file, "watch_tools_file": true}));
    let app = start(dir.config_with(&format!("{}{sections}", mcp_section("")), &server_table("ask", &script, ""))).await;
    wait_for_server(app.registry(), "ask", "ready", |v| v.state() == ServerState::Ready).await;
    app
}

fn confirm(token: &str, responses: &str) -> pb::CallToolRequest {
    pb::CallToolRequest {
        qualified_name: "ask__confirm".into(),
        client_capabilities_json: ELICITATION.into(),
        continuation_token: token.into(),
        input_responses_json: responses.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_agent_answers_the_servers_questions_and_the_state_is_echoed_exactly() {
    let dir = TestDir::new();
    let app = asking_server(&dir).await;
    let mut client = unix_client(&app).await;

    // Two calls in parallel: each gets its own questions and token.
    let (mut one, mut two) = (client.clone(), client.clone());
    let (first, second) = tokio::join!(one.call_tool(confirm("", "")), two.call_tool(confirm("", "")));
    let (first, second) = (first.unwrap().into_inner(), second.unwrap().into_inner());
    let (asked_a, asked_b) = (first.input_required.clone().unwrap(), second.input_required.clone().unwrap());
    assert_ne!(asked_a.continuation_token, asked_b.continuation_token);
    assert!(asked_a.expires_at_unix_ms > 0);
    let requests: Value = serde_json::from_str(&asked_a.input_requests_json).unwrap();
    assert_eq!(requests["confirm"]["method"], "elicitation/create", "{requests}");
    assert!(!asked_a.continuation_token.contains("state-"), "the server's requestState never reaches the agent");

    // An unrelated call in between carries none of it.
    let echoed = client
        .call_tool(pb::CallToolRequest { qualified_name: "ask__echo".into(), arguments_json: r#"{"x":1}"#.into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(echoed.input_required.is_none() && echoed.content_json.contains(r#"\"x\":1"#), "{echoed:?}");

    // Answered out of order: each retry carries its own state.
    let done_b = client.call_tool(confirm(&asked_b.continuation_token, ACCEPT)).await.unwrap().into_inner();
    let done_a = client.call_tool(confirm(&asked_a.continuation_token, ACCEPT)).await.unwrap().into_inner();
    for done in [&done_a, &done_b] {
        assert!(done.input_required.is_none() && !done.is_error, "{done:?}");
        assert!(done.content_json.contains(r#"confirmed round"#) && done.content_json.contains("elicitation"), "{}", done.content_json);
    }
    assert_ne!(done_a.content_json, done_b.content_json, "each retry echoed its own state");

    let received = dir.received("ask");
    let calls: Vec<&Value> = received.iter().filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "confirm").collect();
    assert_eq!(calls.len(), 4);
    let retries: Vec<&&Value> = calls.iter().filter(|m| m["params"].get("inputResponses").is_some()).collect();
    assert_eq!(retries.len(), 2);
    for retry in &retries {
        assert_eq!(retry["params"]["inputResponses"], serde_json::from_str::<Value>(ACCEPT).unwrap());
        assert!(retry["params"]["requestState"].as_str().unwrap().starts_with("state-"), "{retry}");
    }
    let ids: std::collections::HashSet<String> = calls.iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(ids.len(), 4, "every retry is a new JSON-RPC request");
    assert_eq!(calls[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"], json!({"elicitation": {}}));

    // A token is single-use.
    let reused = client.call_tool(confirm(&asked_a.continuation_token, ACCEPT)).await.unwrap_err();
    assert_eq!((reused.code(), error_info(&reused).0.as_str()), (tonic::Code::FailedPrecondition, "CONTINUATION_UNKNOWN"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_is_bound_to_its_caller_its_tool_and_its_definition() {
    let dir = TestDir::new();
    let secret = "mrtr-remote-token-0123456789";
    std::fs::write(dir.path("remote.token"), secret).unwrap();
    let access = format!(
        "\n[access]\n[[access.agents]]\nname = \"operator\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n\
         [[access.agents]]\nname = \"remote\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"ask__*\"]\n",
        nix::unistd::getuid(),
        dir.path("remote.token").display()
    );
    let app = asking_server_with(&dir, &access).await;
    let mut unix = unix_client(&app).await;
    let token = |response: pb::CallToolResponse| response.input_required.unwrap().continuation_token;

    // Another caller (a TCP agent with its own token) cannot use it, and that costs the owner nothing.
    let mine = token(unix.call_tool(confirm("", "")).await.unwrap().into_inner());
    let mut remote = agent_client(&app, secret).await;
    let theirs = remote.call_tool(confirm("", "")).await.unwrap().into_inner();
    assert!(theirs.input_required.is_some(), "the remote agent may call the tool itself");
    let stolen = remote.call_tool(confirm(&mine, ACCEPT)).await.unwrap_err();
    assert_eq!(error_info(&stolen).0, "CONTINUATION_UNKNOWN");
    // Half an answer, or answers that are not an object: refused, and the token is still good.
    let half = unix.call_tool(confirm(&mine, "")).await.unwrap_err();
    assert_eq!((half.code(), error_info(&half).0.as_str()), (tonic::Code::InvalidArgument, "INPUT_RESPONSES_INVALID"));
    let bad = unix.call_tool(confirm(&mine, "[1]")).await.unwrap_err();
    assert_eq!(error_info(&bad).0, "INPUT_RESPONSES_INVALID");
    // Another tool: refused.
    let mut other = confirm(&mine, ACCEPT);
    other.qualified_name = "ask__echo".into();
    let other = unix.call_tool(other).await.unwrap_err();
    assert_eq!((other.code(), error_info(&other).0.as_str()), (tonic::Code::InvalidArgument, "CONTINUATION_OTHER_TOOL"));

    // The tool changes between the question and the answer: a stale-tool race, typed as such.
    let pending = token(unix.call_tool(confirm("", "")).await.unwrap().into_inner());
    std::fs::write(dir.path("tools.json"), asking_tools("now asks something else").to_string()).unwrap();
    wait_for_server(app.registry(), "ask", "generation 2", |v| v.generation_number() == 2).await;
    let raced = unix.call_tool(confirm(&pending, ACCEPT)).await.unwrap_err();
    let (reason, facts) = error_info(&raced);
    assert_eq!((raced.code(), reason.as_str()), (tonic::Code::FailedPrecondition, "STALE_TOOL_CHANGED"), "{raced:?}");
    assert_eq!(facts["current_generation"], "2");
    let retries = dir.received("ask").iter().filter(|m| m["params"].get("inputResponses").is_some()).count();
    assert_eq!(retries, 0, "nothing refused here reached the server");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_of_both_eras_answer_through_the_endpoint() {
    let dir = TestDir::new();
    let app = asking_server(&dir).await;

    // 2026-07-28: the same result shape, with toolhost's token as requestState.
    let mut modern = Line::connect(&mcp_socket(&app)).await;
    let meta =
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let asked = modern.request(1, "tools/call", json!({"name": "ask__confirm", "arguments": {}, "_meta": meta})).await;
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    assert_eq!(result["inputRequests"]["confirm"]["method"], "elicitation/create");
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert!(!state.starts_with("state-"), "toolhost's token, not the server's state");
    let answer = json!({"name": "ask__confirm", "arguments": {}, "_meta": meta, "requestState": state,
        "inputResponses": serde_json::from_str::<Value>(ACCEPT).unwrap()});
    let done = modern.request(2, "tools/call", answer.clone()).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done["result"]["content"][0]["text"].as_str().unwrap().starts_with("confirmed round 0"), "{done}");
    let again = modern.request(3, "tools/call", answer).await;
    assert_eq!(again["error"]["data"]["reason"], "CONTINUATION_UNKNOWN", "{again}");

    // 2025 with elicitation: toolhost asks on the session and retries with the answer.
    let mut legacy = Line::connect(&mcp_socket(&app)).await;
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "it", "version": "1"}});
    legacy.request(0, "initialize", init).await;
    legacy.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    legacy.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask__confirm", "arguments": {}}})).await;
    let question = next_request(&mut legacy).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(question["params"]["message"], "Proceed?");
    legacy.send(json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"ok": true}}})).await;
    let done = next_response(&mut legacy, 7).await;
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("confirmed round 1") && text.contains(r#""accept""#), "{done}");
    assert!(text.contains("elicitation"), "the 2025 client's capabilities went upstream: {text}");

    // 2025 without elicitation: a clear error, nothing left hanging.
    let mut plain = Line::connect(&mcp_socket(&app)).await;
    plain.initialize().await;
    let refused = plain.request(8, "tools/call", json!({"name": "ask__confirm", "arguments": {}})).await;
    assert_eq!(refused["error"]["data"]["reason"], "INPUT_REQUIRED_UNSUPPORTED", "{refused}");
    app.shutdown().await;
}

/// The next message from toolhost that is a request (it may send notifications first).
async fn next_request(line: &mut Line) -> Value {
    loop {
        let message = line.next().await.expect("a request");
        if message.get("method").is_some() && message.get("id").is_some() {
            return message;
        }
    }
}

async fn next_response(line: &mut Line, id: i64) -> Value {
    loop {
        let message = line.next().await.expect("a response");
        if message["id"] == json!(id) && message.get("method").is_none() {
            return message;
        }
    }
}

/// The official conformance scenario `sep-2322-client-request-state` (0.2.0-alpha.12), run
/// against toolhost's upstream session with the test playing the agent, once through the gRPC
/// API and once through the MCP endpoint. The suite's client command only hands the scenario's
/// URL over and waits until the agent is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mrtr_conformance_scenario_passes_with_the_test_as_the_agent() {
    for door in ["grpc", "mcp"] {
        let dir = TestDir::new();
        let (url_file, done_file) = (dir.path("url"), dir.path("done"));
        let handover =
            format!("bash -c 'echo \"$1\" > {}; while [ ! -e {} ]; do sleep 0.05; done' agent", url_file.display(), done_file.display());
        let suite = crate::interop::npm_tools().join("node_modules/conformance-next/dist/index.js");
        let runner = tokio::process::Command::new(crate::interop::node())
            .arg(&suite)
            .args(["client", "--command", &handover, "--scenario", "sep-2322-client-request-state", "--spec-version", "2026-07-28"])
            .args(["--timeout", "60000", "-o"])
            .arg(dir.path("results"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = eventually("the suite hands over its URL", async || {
            std::fs::read_to_string(&url_file).ok().filter(|url| url.ends_with('\n')).map(|url| url.trim().to_owned())
        })
        .await;
        let table = format!("[servers.mrtr]\nurl = {url:?}\nprotocol = \"modern\"\nrequest_timeout = \"10s\"\n");
        let app = start(dir.config_with(&mcp_section(""), &table)).await;
        wait_for_server(app.registry(), "mrtr", "ready", |v| v.state() == ServerState::Ready).await;
        match door {
            "grpc" => play_grpc(&app).await,
            _ => play_mcp(&app).await,
        }
        app.shutdown().await;
        std::fs::write(&done_file, "").unwrap();
        let output = runner.wait_with_output().await.unwrap();
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(
            output.status.success() && printed.contains("OVERALL: PASSED") && printed.contains("Passed: 5/5"),
            "through {door}:\n{printed}"
        );
    }
}

const CONFIRMED: &str = r#"{"confirm":{"action":"accept","content":{"confirmed":true}}}"#;

async fn play_grpc(app: &App) {
    let mut client = unix_client(app).await;
    let call = |name: &str, token: &str, responses: &str| pb::CallToolRequest {
        qualified_name: format!("mrtr__{name}"),
        client_capabilities_json: ELICITATION.into(),
        continuation_token: token.into(),
        input_responses_json: responses.into(),
        ..Default::default()
    };
    let echo = client.call_tool(call("test_mrtr_echo_state", "", "")).await.unwrap().into_inner().input_required.unwrap();
    let no_state = client.call_tool(call("test_mrtr_no_state", "", "")).await.unwrap().into_inner().input_required.unwrap();
    let unrelated = client.call_tool(call("test_mrtr_unrelated", "", "")).await.unwrap().into_inner();
    assert!(unrelated.content_json.contains("unrelated-ok"), "{unrelated:?}");
    let done = client.call_tool(call("test_mrtr_echo_state", &echo.continuation_token, CONFIRMED)).await.unwrap().into_inner();
    assert!(done.content_json.contains("echo-state-ok"), "{done:?}");
    let done = client.call_tool(call("test_mrtr_no_state", &no_state.continuation_token, CONFIRMED)).await.unwrap().into_inner();
    assert!(done.content_json.contains("no-state-ok"), "{done:?}");
    let plain = client.call_tool(call("test_mrtr_no_result_type", "", "")).await.unwrap().into_inner();
    assert!(plain.input_required.is_none() && plain.content_json.contains("no-result-type-test-ok"), "{plain:?}");
}

async fn play_mcp(app: &App) {
    let mut line = Line::connect(&mcp_socket(app)).await;
    let meta =
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let mut id = 0;
    let mut call = async |name: &str, answer: Option<&str>| {
        id += 1;
        let mut params = json!({"name": format!("mrtr__{name}"), "arguments": {}, "_meta": meta});
        if let Some(state) = answer {
            params["requestState"] = json!(state);
            params["inputResponses"] = serde_json::from_str(CONFIRMED).unwrap();
        }
        line.request(id, "tools/call", params).await["result"].clone()
    };
    let echo = call("test_mrtr_echo_state", None).await;
    let no_state = call("test_mrtr_no_state", None).await;
    assert_eq!((echo["resultType"].as_str(), no_state["resultType"].as_str()), (Some("input_required"), Some("input_required")));
    assert!(call("test_mrtr_unrelated", None).await["content"][0]["text"] == "unrelated-ok");
    let done = call("test_mrtr_echo_state", echo["requestState"].as_str()).await;
    assert_eq!(done["content"][0]["text"], "echo-state-ok", "{done}");
    let done = call("test_mrtr_no_state", no_state["requestState"].as_str()).await;
    assert_eq!(done["content"][0]["text"], "no-state-ok", "{done}");
    let plain = call("test_mrtr_no_result_type", None).await;
    assert_eq!((plain["resultType"].as_str(), &plain["content"][0]["text"]), (Some("complete"), &json!("no-result-type-test-ok")));
}

/// The official Python SDK's client (`mcp` 2.3.0) over Streamable HTTP, answering with its
/// elicitation callback: as a 2025 client, toolhost asks it on the call's SSE response; as a
/// 2026-07-28 client, it drives the input_required retries itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_through_the_http_endpoint_in_both_eras() {
    let dir = TestDir::new();
    let app = asking_server(&dir).await;
    let url = format!("http://{}/mcp", crate::mcp_endpoint::mcp_http(&app));
    let fixture = format!("{}/tests/fixtures/mcp_clients/elicitation_client.py", env!("CARGO_MANIFEST_DIR"));
    for (round, mode) in ["legacy", "2026-07-28"].into_iter().enumerate() {
        let output =
            tokio::time::timeout(WAIT * 2, tokio::process::Command::new(crate::interop::python()).args([&fixture, &url, mode]).output())
                .await
                .unwrap_or_else(|_| panic!("{mode}: the client did not finish"))
                .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{mode}: {stdout}\n{stderr}");
        let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|_| panic!("{mode}: {stdout}"));
        assert_eq!(report["asked"], json!(["Proceed?"]), "{mode}: {report}");
        assert_eq!(report["is_error"], false, "{mode}: {report}");
        let text = report["texts"][0].as_str().unwrap_or_default();
        assert!(text.starts_with(&format!("confirmed round {round}")) && text.contains(r#""ok":true"#), "{mode}: {report}");
        assert!(text.contains("elicitation"), "{mode}: the client's capabilities reached the server: {text}");
    }
    app.shutdown().await;
}
