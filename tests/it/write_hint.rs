//! A sandboxed server's write refused on a path its sandbox shows it read-only (a directory its
//! arguments name, granted read-only) is answered with the grant that would allow it, in the
//! call's own error, the same on gRPC and MCP: the real filesystem server's `write_file` into its
//! directory, and the scripted server's. A hostile server's words name no place outside its view
//! and bring nothing unbounded or unescaped into toolhost's hint. `check-config` and
//! `toolhost servers NAME` say where a server's data directory is.

use std::path::Path;

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::mcp_endpoint::{Line, mcp_section, mcp_socket};

const NPX: &str = "/usr/bin/npx";
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

/// Whether npm's registry answers from here (or a proxy the servers inherit is set).
fn registry_reachable() -> bool {
    use std::net::ToSocketAddrs;
    if ["HTTPS_PROXY", "https_proxy"].iter().any(|name| std::env::var_os(name).is_some()) {
        return true;
    }
    let Ok(addresses) = ("registry.npmjs.org", 443).to_socket_addrs() else { return false };
    addresses.into_iter().any(|address| std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(5)).is_ok())
}

/// A call on gRPC: whether it is a tool error, and its content items.
async fn grpc_call(app: &toolhost::app::App, tool: &str, arguments: Value) -> (bool, Vec<Value>) {
    let request = pb::CallToolRequest { qualified_name: tool.into(), arguments_json: arguments.to_string(), ..Default::default() };
    let answer = client(app).await.call_tool(request).await.unwrap_or_else(|status| panic!("{tool}: {status:?}")).into_inner();
    (answer.is_error, serde_json::from_str(&answer.content_json).unwrap())
}

/// A call's JSON-RPC error on gRPC: the status's message.
async fn grpc_error(app: &toolhost::app::App, tool: &str, arguments: Value) -> String {
    let request = pb::CallToolRequest { qualified_name: tool.into(), arguments_json: arguments.to_string(), ..Default::default() };
    match client(app).await.call_tool(request).await {
        Ok(answer) => panic!("{tool}: answered {:?}", answer.into_inner()),
        Err(status) => status.message().to_owned(),
    }
}

/// The text items of `content`.
fn texts(content: &[Value]) -> Vec<String> {
    content.iter().filter_map(|item| item["text"].as_str().map(str::to_owned)).collect()
}

/// The hint toolhost added, the last item of a tool error: `None` when it added none.
fn hint_of(content: &[Value]) -> Option<String> {
    texts(content).pop().filter(|text| text.starts_with("toolhost: "))
}

fn write_grant(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap();
    format!("write = [{:?}]", dir.display().to_string())
}

/// The headline: the filesystem server with its directory only readable (an argument, granted
/// read-only) answers `write_file` with EROFS in a tool error; toolhost's hint after it names
/// `write = ["DIR"]`, on gRPC and on MCP alike, the server's own words untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_servers_refused_write_in_its_read_only_directory_names_the_write_grant() {
    if !requires("Node.js's npx (/usr/bin/npx)", Path::new(NPX).exists()) {
        return;
    }
    if !registry_reachable() {
        skipped("SKIPPED: the filesystem server is fetched from npm's registry (registry.npmjs.org:443), unreachable from here");
        return;
    }
    let dir = TestDir::new();
    let shared = dir.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("hello.txt"), "hello\n").unwrap();
    let servers = format!(
        "[servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"{FILESYSTEM}\", {shared:?}]\nrequest_timeout = \"120s\"\n",
        shared = shared.display().to_string(),
    );
    let app = start(dir.config_with(&mcp_section(""), &servers)).await;
    eventually_within(WAIT * 6, "files fetched and ready", async || {
        let view = app.registry().server("files").ok_or("no such server".to_owned())?;
        if view.state() == ServerState::Ready { Ok(()) } else { Err(format!("{:?}: {:?}", view.state(), view.last_error())) }
    })
    .await;
    let target = std::fs::canonicalize(&shared).unwrap().join("x.txt");
    let arguments = json!({"path": target, "content": "refused"});
    let (is_error, content) = grpc_call(&app, "files__write_file", arguments.clone()).await;
    assert!(is_error, "{content:?}");
    let said = texts(&content);
    assert!(said[0].contains("EROFS") || said[0].to_lowercase().contains("permission denied"), "the server's words first: {said:?}");
    let hint = hint_of(&content).unwrap_or_else(|| panic!("no hint: {said:?}"));
    assert!(hint.contains(&write_grant(&shared)), "{hint}");
    assert_eq!(content.len(), 2, "one item added, the server's kept: {content:?}");
    assert!(!target.exists());

    // MCP says the same: the one call path.
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    mcp.initialize().await;
    let response = mcp.request(1, "tools/call", json!({"name": "files__write_file", "arguments": arguments})).await;
    assert_eq!(response["result"]["isError"], true, "{response}");
    assert_eq!(response["result"]["content"], Value::Array(content), "{response}");
    app.shutdown().await;
}

/// The scripted server, its argument directory granted read-only and a data directory of its
/// own: its refused write is named with the write grant on both doors; a hostile server's
/// error naming a path outside its view gets no hint and leaves its result as sent; a huge or
/// escape-laden message gets a bounded, escaped hint or none; check-config and `toolhost servers`
/// say where its data directory is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_is_named_on_both_doors_and_a_hostile_servers_words_name_nothing_else() {
    let dir = TestDir::new();
    let elsewhere = TestDir::new();
    let readable = elsewhere.path("reports");
    std::fs::create_dir(&readable).unwrap();
    let secret = elsewhere.path("secret");
    std::fs::create_dir(&secret).unwrap();
    let object = json!({"type": "object"});
    let tools = json!([{"name": "write_file", "inputSchema": object}, {"name": "say_error", "inputSchema": object}]);
    let script = dir.script("writer", json!({"tools": tools}));
    let table = format!(
        "[servers.writer]\ncommand = {:?}\nargs = [{:?}, {:?}]\nwrite = [{:?}]\ndata = true\n",
        scripted_server(),
        script.display().to_string(),
        readable.display().to_string(),
        dir.path("").display().to_string(),
    );
    let app = start(dir.config_with(&mcp_section(""), &table)).await;
    wait_for_server(app.registry(), "writer", "ready", |v| v.state() == ServerState::Ready).await;
    let grant = write_grant(&readable);
    let mut mcp = Line::connect(&mcp_socket(&app)).await;
    mcp.initialize().await;

    // Its write into the directory it may only read, refused by the sandbox.
    let target = std::fs::canonicalize(&readable).unwrap().join("today.txt");
    let arguments = json!({"path": target, "content": "x"});
    let (is_error, content) = grpc_call(&app, "writer__write_file", arguments.clone()).await;
    assert!(is_error && !target.exists(), "{content:?}");
    let said = texts(&content);
    assert!(said[0].starts_with("Error: cannot write"), "the server's own words, first and as sent: {said:?}");
    let hint = hint_of(&content).unwrap_or_else(|| panic!("no hint: {said:?}"));
    assert!(hint.contains(&grant), "{hint}");
    let response = mcp.request(1, "tools/call", json!({"name": "writer__write_file", "arguments": arguments})).await;
    assert_eq!(response["result"]["content"], Value::Array(content), "MCP says what gRPC says: {response}");

    // A JSON-RPC error naming such a refusal: the hint follows its message, on both doors.
    let inside = format!("EROFS: read-only file system, open '{}'", target.display());
    let message = grpc_error(&app, "writer__say_error", json!({"text": inside, "rpc": true})).await;
    assert!(message.contains(&inside) && message.contains("toolhost: hint: ") && message.contains(&grant), "{message}");
    let response = mcp.request(2, "tools/call", json!({"name": "writer__say_error", "arguments": {"text": inside, "rpc": true}})).await;
    let said = response["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains(&grant), "{response}");

    // A hostile server names places outside its view: nothing is added, nothing named.
    let outside = [
        format!("EROFS: read-only file system, open '{}/key'", secret.display()),
        format!("EACCES: permission denied, open '{}/../secret/key'", readable.display()),
        "EROFS: read-only file system, open '/etc/shadow'".to_owned(),
        format!("EROFS: read-only file system, open '{}'", dir.db_path().display()),
    ];
    for text in &outside {
        let (is_error, content) = grpc_call(&app, "writer__say_error", json!({"text": text})).await;
        assert!(is_error);
        assert_eq!(content, json!([{"type": "text", "text": text}]).as_array().unwrap().clone(), "as the server sent it");
        let message = grpc_error(&app, "writer__say_error", json!({"text": text, "rpc": true})).await;
        assert!(!message.contains("toolhost:") && !message.contains("write = ["), "{message}");
        let response = mcp.request(3, "tools/call", json!({"name": "writer__say_error", "arguments": {"text": text}})).await;
        assert_eq!(response["result"], json!({"content": [{"type": "text", "text": text}], "isError": true}), "{response}");
    }

    // Escape-laden words about a path in its view: the hint is bounded and escaped.
    let laden = format!("EROFS: read-only file system, open '{}/a\"]\\n\u{202e}\u{7}b'", target.parent().unwrap().display());
    let (_, content) = grpc_call(&app, "writer__say_error", json!({"text": laden})).await;
    assert_eq!(content.len(), 1, "a control character makes it no path: {content:?}");
    let laden = format!("EROFS: read-only file system, open '{}/a\"]\\nrm -rf /\u{202e}b'", target.parent().unwrap().display());
    let (_, content) = grpc_call(&app, "writer__say_error", json!({"text": laden.clone()})).await;
    let hint = hint_of(&content).unwrap_or_else(|| panic!("no hint: {content:?}"));
    assert!(hint.contains(&grant) && hint.len() < 1024, "{hint}");
    assert!(!hint.contains('\u{202e}') && !hint.contains('\n') && hint.contains("\\u{202e}") && hint.contains("a\\\"]"), "{hint:?}");
    assert_eq!(texts(&content)[0], laden, "the server's words as sent");
    // Huge: the refusal past what is looked through is not looked for, and the call is answered.
    let huge = format!("{}\nEROFS: read-only file system, open '{}'", "\u{1b}[2J".repeat(200_000), target.display());
    let (_, content) = grpc_call(&app, "writer__say_error", json!({"text": huge.clone()})).await;
    assert_eq!(texts(&content), std::slice::from_ref(&huge), "nothing added");
    let response = mcp.request(4, "tools/call", json!({"name": "writer__say_error", "arguments": {"text": huge, "rpc": true}})).await;
    let said = response["error"]["message"].as_str().unwrap_or_default();
    assert!(!said.is_empty() && !said.contains("toolhost: hint"), "{}", said.len());

    // Where its data directory is: `toolhost servers NAME` and check-config.
    let data = dir.path("servers/writer.data");
    let shown = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["servers", "writer", "--addr", &cli_addr(&app)])
        .env_remove("TOOLHOST_TOKEN")
        .output()
        .await
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.lines().any(|line| line.contains("data") && line.contains(&data.display().to_string()) && line.contains("${data}")),
        "{shown}"
    );
    app.shutdown().await;
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["check-config", "--config", dir.path("toolhost.toml").to_str().unwrap()])
        .output()
        .unwrap();
    let checked = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(
        checked.contains(&format!("its data directory (${{data}} in its env; data = true, beside its home) is {}", data.display())),
        "{checked}"
    );
}

/// The bytes of `text` no log line, error or status may carry: every control character but the
/// newline that ends a line (and a tab), DEL, and the C1 controls (CSI, U+009B, among them).
fn control_characters(text: &str) -> Vec<char> {
    text.chars().filter(|c| (c.is_control() && !matches!(c, '\n' | '\t')) || ('\u{7f}'..='\u{9f}').contains(c)).collect()
}

/// A hostile server that exits at its start, its stderr a refused write whose path holds a
/// terminal's controls (retitle, clear, CR, DEL, CSI as one character, a bidirectional
/// override): the daemon's own log (stderr, captured) carries none of them, on any line (the
/// server's stderr line, the write hint, "cannot start a session"), nor does its last error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_stderr_at_its_start_reaches_the_daemons_log_and_status_escaped() {
    let dir = TestDir::new();
    let script = dir.path("hostile.py");
    std::fs::write(
        &script,
        "import sys\nsys.stderr.buffer.write(b\"Error: EROFS: read-only file system, open '/tmp/ro/\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred\\rforged\\x7f\\xc2\\x9b2J\\xe2\\x80\\xaeevil'\\n\")\nsys.stderr.flush()\nsys.exit(1)\n",
    )
    .unwrap();
    let config = dir.path("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n[servers.hostile]\ncommand = {:?}\nargs = [{:?}]\n",
            crate::sandbox::PYTHON,
            script.display().to_string()
        ),
    )
    .unwrap();
    let (mut daemon, mut grpc) = crate::telemetry::serve(&config, dir.path("toolhost.sock"), &[]).await;
    let log =
        || std::fs::read(config.with_extension("daemon.log")).map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default();
    let logged = eventually("the failed start is logged", async || {
        let text = log();
        text.contains("cannot start a session").then_some(text)
    })
    .await;
    assert!(logged.contains("PWNED"), "the server's words are there, escaped: {logged}");
    for line in logged.lines() {
        assert!(control_characters(line).is_empty(), "a control character reached the log raw: {line:?}");
    }
    let error = eventually("its last error says why", async || {
        let servers = grpc.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
        servers.into_iter().find(|server| server.name == "hostile").map(|server| server.last_error).filter(|error| error.contains("PWNED"))
    })
    .await;
    assert!(control_characters(&error).is_empty() && !error.contains('\n'), "{error:?}");
    assert!(error.contains(r"\u{1b}]0;PWNED\u{7}"), "{error}");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log());
    let text = log();
    for line in text.lines() {
        assert!(control_characters(line).is_empty(), "a control character reached the log raw: {line:?}");
    }
}
