//! Waiting for a person is visible at once: a plain call that needs approval answers after
//! `[approvals] answer_after`, long before its deadline, with the request, its expiry and the
//! commands that approve it and print the result (gRPC details, MCP text), and those commands
//! work; `toolhost call` says so on stderr at once and prints the result once approved; the
//! watch stream (gRPC and `toolhost watch`) shows each new request as it is asked.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

/// Far longer than the answer may take: an answer after it is the old, silent wait.
const WELL_BEFORE: Duration = Duration::from_secs(30);

/// A daemon whose server `demo` makes every caller's `echo` wait for approval, with a deadline
/// of a minute and an answer after a second; no `[access]`: the test's user is the operator.
async fn daemon(dir: &TestDir, sections: &str) -> toolhost::app::App {
    let script = dir.script("demo", json!({}));
    let sections = format!("[approvals]\nanswer_after = \"1s\"\n{sections}");
    let servers = server_table("demo", &script, "approve = [\"echo\"]\nrequest_timeout = \"60s\"\n");
    let app = start(dir.config_with(&sections, &servers)).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    app
}

fn echo(text: &str) -> tonic::Request<pb::CallToolRequest> {
    let call = pb::CallToolRequest {
        qualified_name: "demo__echo".into(),
        arguments_json: json!({"text": text}).to_string(),
        ..Default::default()
    };
    let mut request = tonic::Request::new(call);
    request.set_timeout(Duration::from_secs(60));
    request
}

/// Runs the CLI with `args` (a printed command's words after `toolhost`) against `app`.
async fn cli(app: &toolhost::app::App, args: &[&str]) -> (bool, String) {
    let output =
        tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(args).args(["--addr", &cli_addr(app)]).output().await.unwrap();
    (output.status.success(), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

/// Runs a command the daemon printed, as the person at the terminal would.
async fn run_printed(app: &toolhost::app::App, command: &str) -> (bool, String) {
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"toolhost"), "{command}");
    cli(app, &words[1..]).await
}

/// A gRPC call with a minute's deadline answers within seconds, naming the request, its expiry
/// and both commands; run, they approve it and print its result, and the call ran once. Over
/// MCP the error's text says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_call_waiting_for_approval_answers_at_once_with_the_commands_that_finish_it() {
    let dir = TestDir::new();
    let app = daemon(&dir, &crate::mcp_endpoint::mcp_section("")).await;
    let asked = tokio::time::timeout(WELL_BEFORE, unix_client(&app).await.call_tool(echo("pay 10 to alice")))
        .await
        .expect("the call answers long before its deadline")
        .unwrap_err();
    let (reason, details) = error_info(&asked);
    assert_eq!(reason, "APPROVAL_PENDING", "{asked:?}");
    let (id, task) = (&details["approval_id"], &details["task_id"]);
    assert_eq!(details["approve_command"], format!("toolhost approvals approve {id}"), "{details:?}");
    assert_eq!(details["result_command"], format!("toolhost task {task} --wait"), "{details:?}");
    let left: u64 = details["expires_in_seconds"].parse().unwrap();
    assert!((800..=900).contains(&left), "15 minutes (the default ttl) less a little: {details:?}");
    assert!(details["expires_at"].ends_with('Z'), "{details:?}");
    for said in [id, task, &details["approve_command"], &details["result_command"], &details["expires_at"]] {
        assert!(asked.message().contains(said.as_str()), "the message says {said}: {}", asked.message());
    }
    assert!(crate::approvals::echo_calls(&dir).is_empty(), "nothing ran before the approval");

    let (approved, said) = run_printed(&app, &details["approve_command"]).await;
    assert!(approved, "{said}");
    let (done, result) = run_printed(&app, &details["result_command"]).await;
    assert!(done && result.contains("pay 10 to alice"), "{result}");
    assert_eq!(crate::approvals::echo_calls(&dir), vec![json!({"text": "pay 10 to alice"})], "the call ran once");

    // The MCP endpoint's tools/call shares the door's call path: its text says it plainly.
    let mut mcp = crate::mcp_endpoint::Line::connect(&crate::mcp_endpoint::mcp_socket(&app)).await;
    mcp.initialize().await;
    let params = json!({"name": "demo__echo", "arguments": {"text": "pay 20 to bob"}});
    let answer = tokio::time::timeout(WELL_BEFORE, mcp.request(1, "tools/call", params)).await.expect("an answer at once");
    let data = &answer["error"]["data"];
    assert_eq!(data["reason"], "APPROVAL_PENDING", "{answer}");
    let text = answer["error"]["message"].as_str().unwrap();
    let id = data["approval_id"].as_str().unwrap();
    let task = data["task_id"].as_str().unwrap();
    for said in [format!("toolhost approvals approve {id}"), format!("toolhost task {task} --wait"), "expires at".to_owned()] {
        assert!(text.contains(&said), "the text says {said}: {answer}");
    }
    app.shutdown().await;
}

/// `toolhost call` says on stderr, while the call still waits, what waits and how to approve
/// it; approved with the command it printed, the same `toolhost call` prints the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_says_at_once_that_its_call_waits_and_prints_the_result_once_approved() {
    let dir = TestDir::new();
    let app = daemon(&dir, "").await;
    let mut call = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["call", "demo__echo", "--args", r#"{"text": "pay 7 to carol"}"#, "--addr", &cli_addr(&app)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(call.stderr.take().unwrap()).lines();
    let approve = tokio::time::timeout(WELL_BEFORE, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if let Some(command) = line.trim().strip_prefix("to approve: ") {
                return command.to_owned();
            }
        }
        panic!("stderr ended without the command that approves the call");
    })
    .await
    .expect("the waiting line at once");
    assert!(call.try_wait().unwrap().is_none(), "the call still waits while it says so");
    assert!(crate::approvals::echo_calls(&dir).is_empty(), "nothing ran before the approval");
    let (approved, said) = run_printed(&app, &approve).await;
    assert!(approved, "{said}");
    let finished = tokio::time::timeout(WELL_BEFORE, call.wait_with_output()).await.expect("the call ends once approved").unwrap();
    let stdout = String::from_utf8_lossy(&finished.stdout);
    assert!(finished.status.success() && stdout.contains("pay 7 to carol"), "{stdout}");
    assert_eq!(crate::approvals::echo_calls(&dir), vec![json!({"text": "pay 7 to carol"})], "the call ran once");
    app.shutdown().await;
}

/// A watcher sees each new request as it is asked: the gRPC stream (operators; an agent only
/// its own entry's), and `toolhost watch`, which prints the command that approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_stream_shows_each_new_request_as_it_is_asked() {
    const BOT: &str = "visible-bot-token-0123456789abcdef";
    const OTHER: &str = "other-agent-token-0123456789abcdef";
    let dir = TestDir::new();
    std::fs::write(dir.path("bot.token"), BOT).unwrap();
    std::fs::write(dir.path("other.token"), OTHER).unwrap();
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"bot\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__*\"]\n\
         [[access.agents]]\nname = \"other\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__*\"]\n\
         [[access.agents]]\nname = \"operator\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n",
        dir.path("bot.token").display(),
        dir.path("other.token").display(),
        nix::unistd::getuid()
    );
    let app = daemon(&dir, &access).await;
    let mut operator = unix_client(&app).await.watch_catalog(pb::WatchCatalogRequest::default()).await.unwrap().into_inner();
    let mut other = agent_client(&app, OTHER).await.watch_catalog(pb::WatchCatalogRequest::default()).await.unwrap().into_inner();
    let asked = agent_client(&app, BOT).await.call_tool(echo("pay 5 to dave")).await.unwrap_err();
    let id = error_info(&asked).1["approval_id"].clone();
    let requested = tokio::time::timeout(WELL_BEFORE, async {
        loop {
            let event = operator.message().await.unwrap().expect("the stream goes on");
            if let Some(pb::catalog_event::Event::ApprovalRequested(requested)) = event.event {
                return requested;
            }
        }
    })
    .await
    .expect("the request at once");
    assert_eq!(
        (requested.approval_id.as_str(), requested.qualified_name.as_str(), requested.agent.as_str()),
        (id.as_str(), "demo__echo", "bot")
    );
    assert!(requested.expires_at_unix_ms > requested.requested_at_unix_ms, "{requested:?}");
    let unseen = tokio::time::timeout(Duration::from_millis(300), other.message()).await;
    let shown = matches!(&unseen, Ok(Ok(Some(event))) if matches!(event.event, Some(pb::catalog_event::Event::ApprovalRequested(_))));
    assert!(!shown, "another agent is not shown bot's request: {unseen:?}");

    // `toolhost watch`: a new request asked from here until the stream, opened meanwhile,
    // shows one.
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["watch", "--addr", &cli_addr(&app)])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let printed = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let reader = printed.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            reader.lock().unwrap().push(line);
        }
    });
    let mut bot = agent_client(&app, BOT).await;
    let mut asked = 0;
    let line = eventually("toolhost watch prints a new request", async || {
        asked += 1;
        // Answered after `answer_after`, by which time the request was shown or not.
        let _ = bot.call_tool(echo(&format!("pay {asked} to erin"))).await;
        printed.lock().unwrap().iter().find(|line| line.contains("approval requested")).cloned()
    })
    .await;
    assert!(line.contains("demo__echo for bot") && line.contains("`toolhost approvals approve "), "{line}");
    watch.kill().await.unwrap();
    drop((operator, other));
    app.shutdown().await;
}
