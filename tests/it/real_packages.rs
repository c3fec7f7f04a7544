//! The servers people actually run, from one-line entries, in the default sandbox: the
//! filesystem server through `npx -y` (fetched from npm's registry into the server's own home,
//! through the daemon's proxy, which reaches that registry and nothing else), and the time and
//! SQLite servers through `uvx` (from PyPI, the same way; the database named by `--db-path` in
//! a `write` grant), and server-everything through `node` from inside its install; each called, restarted, and called again, what it wrote still there. Then
//! the same entries under a daemon's user that is not root: through `check-config --probe`, then
//! that daemon serving them, each called, restarted and called again. Pinned versions; the
//! registries are the one network these machines reach.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

/// `npx` as the daemon's PATH finds it: Debian's Node.js.
const NPX: &str = "/usr/bin/npx";
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";
const TIME: &str = "mcp-server-time==2026.10.19";
const SQLITE: &str = "mcp-server-sqlite==2025.4.25";
/// The last SDK the SQLite server's release runs on (it predates mcp 2), as its users pin it.
const SQLITE_SDK: &str = "mcp==1.30.0";

fn uvx() -> Option<PathBuf> {
    let root = std::env::var_os("TOOLHOST_TEST_TOOLS").map(PathBuf::from)?;
    Some(root.join("venv/bin/uvx")).filter(|path| path.exists())
}

async fn call(grpc: &mut pb::tool_host_client::ToolHostClient<tonic::transport::Channel>, tool: &str, arguments: Value) -> String {
    let request = pb::CallToolRequest { qualified_name: tool.into(), arguments_json: arguments.to_string(), ..Default::default() };
    let answer = grpc.call_tool(request).await.unwrap_or_else(|status| panic!("{tool}: {status:?}")).into_inner();
    assert!(!answer.is_error, "{tool}: {}", answer.content_json);
    let content: Value = serde_json::from_str(&answer.content_json).unwrap();
    content[0]["text"].as_str().unwrap_or_default().to_owned()
}

/// Waits until `server` is ready: its first start fetches its package, which takes seconds to
/// a minute on a busy machine (the suite runs beside it).
async fn fetched_and_ready(app: &toolhost::app::App, server: &str) {
    eventually_within(WAIT * 6, &format!("{server} fetched and ready"), async || {
        let view = app.registry().server(server).ok_or("no such server".to_owned())?;
        if view.state() == ServerState::Ready { Ok(()) } else { Err(format!("{:?}: {:?}", view.state(), view.last_error())) }
    })
    .await;
}

/// Restarts `server` and waits until a new session of it is ready.
async fn restarted(app: &toolhost::app::App, server: &str) {
    let before = app.registry().server(server).map(|view| view.num_restarts()).unwrap_or(0);
    client(app).await.restart_server(pb::RestartServerRequest { server: server.into() }).await.unwrap();
    wait_for_server(app.registry(), server, "restarted and ready", |v| v.num_restarts() > before && v.state() == ServerState::Ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npx_and_uvx_servers_run_in_the_sandbox_from_a_one_line_entry() {
    let Some(uvx) = uvx() else {
        assert!(requires("uv (installed into .tools/venv by the test command)", false));
        return;
    };
    if !requires("Node.js's npx (/usr/bin/npx)", std::path::Path::new(NPX).exists()) {
        return;
    }
    if !requires("server-everything (installed into .tools by the test command)", crate::interop::npm_tools_present()) {
        return;
    }
    // server-everything as an install leaves it: its dependencies hoisted to the top
    // `node_modules`, run by the host's `node`.
    let everything = crate::interop::npm_tools().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let dir = TestDir::new();
    let (shared, data) = (dir.path("shared"), dir.path("data"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(shared.join("hello.txt"), "hello from the host\n").unwrap();
    // The sandbox's own user writes what it is granted (a root daemon runs servers as another
    // id): the directories are that id's, as `check-config` tells an operator to make them.
    for dir in [&shared, &data] {
        std::os::unix::fs::chown(dir, Some(toolhost::sandbox::SANDBOX_ID), Some(toolhost::sandbox::SANDBOX_ID)).ok();
    }
    let database = data.join("notes.sqlite");
    let servers = format!(
        "[servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"{FILESYSTEM}\", {shared:?}]\nwrite = [{shared:?}]\nrequest_timeout = \"120s\"\n\n\
         [servers.time]\ncommand = {uvx:?}\nargs = [\"{TIME}\"]\nrequest_timeout = \"120s\"\n\n\
         [servers.notes]\ncommand = {uvx:?}\nargs = [\"--with\", \"{SQLITE_SDK}\", \"{SQLITE}\", \"--db-path\", {database:?}]\nwrite = [{data:?}]\nrequest_timeout = \"120s\"\n\n\
         [servers.everything]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n",
        shared = shared.display().to_string(),
        uvx = uvx.display().to_string(),
        database = database.display().to_string(),
        data = data.display().to_string(),
        everything = everything.display().to_string(),
    );
    let app = start(dir.config(&servers)).await;
    for server in ["files", "time", "notes", "everything"] {
        fetched_and_ready(&app, server).await;
    }
    let mut grpc = client(&app).await;
    let read = call(&mut grpc, "files__read_text_file", json!({"path": shared.join("hello.txt")})).await;
    assert_eq!(read.trim(), "hello from the host");
    call(&mut grpc, "files__write_file", json!({"path": shared.join("note.txt"), "content": "written inside"})).await;
    call(&mut grpc, "notes__create_table", json!({"query": "CREATE TABLE notes (body TEXT)"})).await;
    call(&mut grpc, "notes__write_query", json!({"query": "INSERT INTO notes VALUES ('kept across restarts')"})).await;
    let now = call(&mut grpc, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert!(now.contains("\"timezone\": \"UTC\"") || now.contains("UTC"), "{now}");
    // The launchers' caches are in each server's own home, never the operator's.
    let homes = dir.path("servers");
    assert!(homes.join("files/.npm").is_dir(), "npm's cache in the server's home");
    assert!(homes.join("time/.cache/uv").is_dir(), "uv's cache in the server's home");
    // Restarted (from the warm cache), each works again; what was written is still there.
    for server in ["files", "time", "notes", "everything"] {
        restarted(&app, server).await;
    }
    let rows = call(&mut grpc, "notes__read_query", json!({"query": "SELECT body FROM notes"})).await;
    assert!(rows.contains("kept across restarts"), "{rows}");
    let note = call(&mut grpc, "files__read_text_file", json!({"path": shared.join("note.txt")})).await;
    assert_eq!(note.trim(), "written inside");
    assert!(call(&mut grpc, "time__get_current_time", json!({"timezone": "Europe/Paris"})).await.contains("Europe/Paris"));
    assert_eq!(call(&mut grpc, "everything__echo", json!({"message": "through node"})).await, "Echo: through node");
    // Their way out reached the registries and refused nothing.
    let view = app.registry().server("files").unwrap();
    assert!(view.shared().egress.tunnels.load(std::sync::atomic::Ordering::Relaxed) > 0, "npx fetched through the proxy");
    assert_eq!(view.sandbox().map(|sandbox| sandbox.allow.clone()), Some(vec!["registry.npmjs.org:443".to_owned()]));
    app.shutdown().await;

    // The same entries under a daemon's user that is not root, through the daemon's own start
    // path (`check-config --probe`): its servers run as that user, with homes of their own in
    // its state directory, fetched afresh there.
    if !requires_root("to run the daemon as another user") {
        return;
    }
    const NOBODY: u32 = 65534;
    let unprivileged = dir.path("unprivileged");
    std::fs::create_dir_all(&unprivileged).unwrap();
    let config = unprivileged.join("toolhost.toml");
    std::fs::write(&config, format!("[store]\npath = \"catalog.db\"\n\n{servers}")).unwrap();
    for path in [&unprivileged, &shared, &data] {
        crate::sandbox::chown_tree(path, NOBODY);
    }
    let output = tokio::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", crate::sandbox::TOOLHOST, "check-config", "--probe", "--config"])
        .arg(&config)
        .env("HOME", &unprivileged)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    for server in ["files", "time", "notes", "everything"] {
        assert!(said.lines().any(|line| line.starts_with(&format!("{server}: probe: works: "))), "{server}: {said}");
    }
    assert!(unprivileged.join("servers/files/.npm").is_dir(), "the unprivileged daemon's server has its own cache");

    // And that daemon itself, serving: each server called, restarted, called again.
    let socket = unprivileged.join("toolhost.sock");
    std::fs::write(&config, format!("[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n{servers}")).unwrap();
    crate::sandbox::chown_tree(&unprivileged, NOBODY);
    let mut daemon = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", crate::sandbox::TOOLHOST, "serve", "--config"])
        .arg(&config)
        .env("HOME", &unprivileged)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path("unprivileged.log")).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(dir.path("unprivileged.log")).unwrap_or_default();
    // Waits until all three are ready, each restarted since `before` (its restart counts).
    let all_ready = async |what: &str, before: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        eventually_within(WAIT * 6, what, async || {
            let output = cli_as(NOBODY, None, &socket, &["servers", "--json"]).await;
            let servers: Value =
                serde_json::from_slice(&output.stdout).map_err(|_| String::from_utf8_lossy(&output.stderr).into_owned())?;
            let mut restarts = BTreeMap::new();
            for entry in servers.as_array().into_iter().flatten() {
                let (name, count) = (entry["name"].as_str().unwrap_or_default(), entry["restarts"].as_u64().unwrap_or(0));
                let restarted = before.get(name).is_none_or(|earlier| count > *earlier);
                if entry["state"] == "ready" && entry["available"] == true && restarted {
                    restarts.insert(name.to_owned(), count);
                }
            }
            if restarts.len() == 4 { Ok(restarts) } else { Err(servers.to_string()) }
        })
        .await
    };
    let call_as_nobody = async |tool: &str, arguments: Value| {
        let output = cli_as(NOBODY, None, &socket, &["call", tool, "--args", &arguments.to_string()]).await;
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{tool}: {said}{}\n{}", String::from_utf8_lossy(&output.stderr), log());
        said
    };
    let restarts = all_ready("the unprivileged daemon's servers ready", &BTreeMap::new()).await;
    call_as_nobody("notes__write_query", json!({"query": "INSERT INTO notes VALUES ('written by nobody')"})).await;
    call_as_nobody("files__write_file", json!({"path": shared.join("nobody.txt"), "content": "nobody wrote"})).await;
    for server in ["files", "time", "notes", "everything"] {
        assert!(cli_as(NOBODY, None, &socket, &["restart", server]).await.status.success());
    }
    all_ready("the unprivileged daemon's servers restarted and ready", &restarts).await;
    let rows = call_as_nobody("notes__read_query", json!({"query": "SELECT body FROM notes"})).await;
    assert!(rows.contains("kept across restarts") && rows.contains("written by nobody"), "{rows}");
    assert!(call_as_nobody("files__read_text_file", json!({"path": shared.join("nobody.txt")})).await.contains("nobody wrote"));
    assert!(call_as_nobody("time__get_current_time", json!({"timezone": "UTC"})).await.contains("UTC"));
    assert!(call_as_nobody("everything__echo", json!({"message": "as nobody"})).await.contains("Echo: as nobody"));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log());
}
