//! The MCP endpoint driven by clients toolhost did not write: the official Python and
//! TypeScript SDKs, an agent framework (LangChain's MCP adapters), and the official conformance
//! suite's server scenarios. `bash .ci/test` installs them, pinned, into `.tools`.

use std::path::PathBuf;

use serde_json::{Value, json};
use toolhost::app::App;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::interop::{node, npm_tools, python};
use crate::mcp_endpoint::{mcp_http, mcp_section, mcp_socket};

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/mcp_clients/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `demo` (echo, add, sleep, fail) and `paged` (two tools a page, from a file it watches).
async fn two_servers(dir: &TestDir, mcp_extra: &str) -> (App, PathBuf) {
    let tools = json!([
        {"name": "forecast", "description": "Weather forecast.", "inputSchema": {"type": "object"}},
        {"name": "alerts", "description": "Weather alerts.", "inputSchema": {"type": "object"}},
        {"name": "radar", "description": "Radar images.", "inputSchema": {"type": "object"}}
    ]);
    let app = crate::mcp_endpoint::two_servers(dir, mcp_extra, "paged", tools).await;
    (app, dir.path("tools.json"))
}

/// Runs a client program to completion and returns the JSON object it printed last.
async fn run_client(mut command: tokio::process::Command, what: &str) -> Value {
    let output = tokio::time::timeout(WAIT * 3, command.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", output.status);
    let last =
        stdout.lines().rev().find(|line| line.starts_with('{')).unwrap_or_else(|| panic!("{what} printed no report:\n{stdout}\n{stderr}"));
    serde_json::from_str(last).unwrap()
}

/// What every SDK run must have seen.
fn check_python_report(report: &Value, dir: &TestDir, mode: &str) {
    let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(
        tools,
        ["demo__add", "demo__echo", "demo__fail", "demo__sleep", "paged__alerts", "paged__forecast", "paged__radar"],
        "{mode}"
    );
    assert_eq!(report["pages"], 3, "{mode}: every page, three tools a page");
    assert_eq!(report["add"], json!(["42"]), "{mode}");
    assert_eq!(report["progress"][0]["message"], "halfway", "{mode}: {report}");
    assert_eq!(report["slept"], json!(["slept 400 ms"]), "{mode}");
    assert!(report["cancel_returned_after_s"].as_f64().unwrap() < 5.0, "{mode}");
    assert_eq!(report["list_changed"], true, "{mode}");
    assert!(report["tools_after_change"].as_array().unwrap().contains(&json!("paged__brand_new")), "{mode}: {report}");
    assert_eq!(report["add_again"], json!(["2"]), "{mode}");
    let cancelled = dir.received("demo").iter().filter(|m| m["method"] == "notifications/cancelled").count();
    assert!(cancelled >= 1, "{mode}: the slow call was cancelled upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_over_streamable_http_in_both_eras() {
    for mode in ["legacy", "2026-07-28"] {
        let dir = TestDir::new();
        let (app, tools_file) = two_servers(&dir, "").await;
        let url = format!("http://{}/mcp", mcp_http(&app));
        let mut command = tokio::process::Command::new(python());
        command.arg(fixture("python_client.py")).args(["http", &url, mode]).arg(&tools_file);
        let report = run_client(command, &format!("the Python SDK client ({mode})")).await;
        assert_eq!(report["protocol_version"], if mode == "legacy" { "2025-11-25" } else { "2026-07-28" });
        check_python_report(&report, &dir, mode);
        app.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_over_toolhost_mcp_stdio_in_both_eras() {
    for mode in ["legacy", "2026-07-28"] {
        let dir = TestDir::new();
        let (app, tools_file) = two_servers(&dir, "").await;
        let mut command = tokio::process::Command::new(python());
        command
            .arg(fixture("python_client.py"))
            .args(["stdio", env!("CARGO_BIN_EXE_toolhost")])
            .arg(mcp_socket(&app))
            .arg(mode)
            .arg(&tools_file);
        let report = run_client(command, &format!("the Python SDK client over `toolhost mcp` ({mode})")).await;
        check_python_report(&report, &dir, &format!("stdio {mode}"));
        app.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_over_streamable_http() {
    let dir = TestDir::new();
    let (app, tools_file) = two_servers(&dir, "").await;
    let sdk = npm_tools().join("node_modules/@modelcontextprotocol/sdk");
    let mut command = tokio::process::Command::new(node());
    command.arg(fixture("ts_client.mjs")).arg(&sdk).arg(format!("http://{}/mcp", mcp_http(&app))).arg(&tools_file);
    let report = run_client(command, "the TypeScript SDK client").await;
    assert_eq!(report["pages"], 3);
    assert_eq!(report["tools"].as_array().unwrap().len(), 7, "{report}");
    assert_eq!(report["add"], json!(["42"]));
    assert_eq!(report["structured"], json!({"sum": 42}), "JSON numbers as JavaScript reads them");
    assert_eq!(report["progress"][0]["message"], "halfway", "{report}");
    assert_eq!(report["fail_is_error"], true);
    assert!(report["missing"].as_str().unwrap().contains("demo__missing"), "{report}");
    assert_eq!(report["list_changed"], true);
    assert!(report["tools_after_change"].as_array().unwrap().contains(&json!("paged__brand_new")), "{report}");
    app.shutdown().await;
}

/// The Python with LangChain's MCP adapters (their own virtualenv: they need `mcp` 1.x).
pub fn agents_python() -> PathBuf {
    let python = npm_tools().parent().map(PathBuf::from).unwrap_or_default().join("agents/bin/python");
    assert!(python.exists(), "langchain-mcp-adapters is missing: run `bash .ci/test`, which installs it into .tools");
    python
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_loads_and_invokes_toolhost_tools() {
    let dir = TestDir::new();
    let (app, _) = two_servers(&dir, "").await;
    let mut command = tokio::process::Command::new(agents_python());
    command.arg(fixture("langchain_client.py")).arg(format!("http://{}/mcp", mcp_http(&app)));
    let report = run_client(command, "langchain-mcp-adapters").await;
    assert_eq!(report["tools"].as_array().unwrap().len(), 7, "every page was loaded: {report}");
    assert_eq!(report["add_schema"], json!(["a", "b"]), "the schema reached the framework");
    assert_eq!(report["add"][0]["text"], "42", "{report}");
    assert_eq!(report["echo"][0]["text"], r#"{"text":"from langchain"}"#);
    app.shutdown().await;
}

/// The conformance suite's server scenarios that apply to a tools-only server, against a
/// name-preserving profile over a server with the suite's tools. Not run (README): logging,
/// completion, resources and prompts (toolhost serves tools only), sampling and elicitation
/// (upstream server requests are refused), tools-call-with-logging (log notifications are not
/// forwarded), json-schema-2020-12 and the elicitation defaults (tools the fronted server would
/// need to define), and SSE polling/multiple streams (toolhost's answers are single JSON or SSE
/// responses without resumption).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_its_server_scenarios() {
    let dir = TestDir::new();
    let tools: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/conformance_tools.json")).unwrap(),
    )
    .unwrap();
    let script = dir.script("conf", json!({"tools": tools}));
    let profile = "[mcp.profiles.conformance]\ntools = [\"conf__*\"]\nnames = \"original\"\n";
    let app = start(dir.config_with(&mcp_section(profile), &server_table("conf", &script, ""))).await;
    wait_for_server(app.registry(), "conf", "ready", |v| v.state() == ServerState::Ready).await;
    let url = format!("http://localhost:{}/mcp/conformance", mcp_http(&app).port());
    let suite = npm_tools().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let scenarios = [
        "server-initialize",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "tools-call-with-progress",
    ];
    for scenario in scenarios {
        conformance_server(&suite, &url, scenario).await;
    }
    app.shutdown().await;
}

/// Runs one server scenario of a conformance suite (`suite`, its `dist/index.js`) against the
/// endpoint at `url`; every check must pass, and some must have run.
pub async fn conformance_server(suite: &std::path::Path, url: &str, scenario: &str) {
    let results = TestDir::new();
    let output = tokio::process::Command::new(node())
        .arg(suite)
        .args(["server", "--url", url, "--scenario", scenario, "-o"])
        .arg(results.path("results"))
        .output()
        .await
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && !printed.contains("FAILURE"), "{scenario}:\n{printed}");
    assert!(printed.contains("SUCCESS"), "{scenario} ran its checks:\n{printed}");
}
