//! The servers' sandbox, tried as an attacker would: a hostile stdio server (a real Python
//! process) probes at call time, from itself and from a child it forks, everything a package
//! turned malicious would try against toolhost, its store, its sockets and a sibling server with
//! secrets; every attempt must fail while both servers keep answering. Then the limits: a leak,
//! a fork bomb and a descriptor leak are each stopped alone. Runs as root in CI; the same
//! probes against a daemon run as an unprivileged user.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

fn hostile_script() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hostile_server.py")
}

pub(crate) const PYTHON: &str = "/usr/bin/python3";
pub(crate) const TOOLHOST: &str = env!("CARGO_BIN_EXE_toolhost");

/// A `[servers.NAME]` table for the hostile server, started directly; toolhost's own program
/// is an argument, so that the server can run the CLI against the daemon.
pub(crate) fn hostile_table(name: &str, extra: &str) -> String {
    format!(
        "[servers.{name}]\ncommand = {PYTHON:?}\nargs = [{:?}, {TOOLHOST:?}]\nrequest_timeout = \"30s\"\n\
         restart = {{ initial_backoff = \"50ms\", max_backoff = \"200ms\" }}\n{extra}\n",
        hostile_script()
    )
}

/// The same server started through `sh -c`: the script and the CLI are granted by name.
fn hostile_through_a_shell(name: &str) -> String {
    let inner = format!("exec {PYTHON} {} {TOOLHOST}", hostile_script());
    format!(
        "[servers.{name}]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {inner:?}]\nread = [{:?}, {TOOLHOST:?}]\nrequest_timeout = \"30s\"\n",
        hostile_script()
    )
}

/// Calls a hostile server's `attack` and returns every probe's result, from the server's own
/// process and from the child it forked.
pub(crate) async fn attack(app: &toolhost::app::App, server: &str, targets: &Value) -> BTreeMap<String, String> {
    let mut client = client(app).await;
    let reply = client
        .call_tool(pb::CallToolRequest {
            qualified_name: format!("{server}__attack"),
            arguments_json: targets.to_string(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("{server}'s attack: {status:?}"))
        .into_inner();
    let content: Value = serde_json::from_str(&reply.content_json).unwrap();
    let report: Value = serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap();
    let mut results = BTreeMap::new();
    for side in ["process", "child"] {
        for (probe, result) in report[side].as_object().unwrap_or_else(|| panic!("no {side} results: {report}")) {
            results.insert(format!("{side}: {probe}"), result.as_str().unwrap().to_owned());
        }
    }
    results
}

fn assert_all_blocked(server: &str, results: &BTreeMap<String, String>, expected: usize) {
    let reached: Vec<_> = results.iter().filter(|(_, result)| !result.starts_with("blocked")).collect();
    assert!(reached.is_empty(), "{server} reached: {reached:#?}");
    assert_eq!(results.len(), expected, "every probe ran from both processes: {results:#?}");
}

fn text_of(reply: &pb::CallToolResponse) -> String {
    serde_json::from_str::<Value>(&reply.content_json).unwrap()[0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_reaches_nothing_and_every_server_keeps_working() {
    let dir = TestDir::new();
    let secret_file = dir.path("sibling.secret");
    std::fs::write(&secret_file, "file-secret-of-the-sibling").unwrap();
    let token_file = dir.path("remote.oauth.json");
    std::fs::write(&token_file, r#"{"refresh_token":"a-refresh-token"}"#).unwrap();
    let sibling = dir.script("sibling", json!({"tools": tools("echo", 1)}));
    let servers = [
        server_table(
            "sibling",
            &sibling,
            &format!(
                "audit_arguments = \"full\"\nenv = {{ SIBLING_FILE = \"${{file:{}}}\", SIBLING_ENV = \"env-secret-of-the-sibling\" }}",
                secret_file.display()
            ),
        ),
        hostile_table("hostile", ""),
        hostile_through_a_shell("shell"),
        format!(
            "[servers.remote]\nurl = \"http://127.0.0.1:9/mcp\"\nauth = {{ grant = \"client_credentials\", client_id = \"c\", \
             client_secret = \"s\", issuer = \"http://127.0.0.1:9\", token_file = {:?} }}\n",
            token_file.display().to_string()
        ),
    ];
    let access = "[access]\n[[access.agents]]\nname = \"operator\"\nuids = [0]\nallow = [\"*\"]\nadmin = true\n";
    let config = dir.config_with(access, &servers.join("\n"));
    let app = start(config).await;
    for name in ["sibling", "hostile", "shell"] {
        wait_for_server(app.registry(), name, "ready", |v| v.state() == ServerState::Ready).await;
    }
    // The sibling has served a call whose arguments the audit trail keeps.
    let mut client = client(&app).await;
    client
        .call_tool(pb::CallToolRequest {
            qualified_name: "sibling__echo0".into(),
            arguments_json: r#"{"recorded":"audit-secret-argument"}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let sibling_pid = dir.pids("sibling")[0];
    let daemon_pid = std::process::id();
    let unix = dir.path("toolhost.sock");
    let tcp = tcp_addr(&app).to_string();
    let db = dir.db_path();
    let config_file = dir.path("toolhost.toml");
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    let targets = json!({
        "read": [
            format!("/proc/{daemon_pid}/environ"), format!("/proc/{daemon_pid}/mem"), format!("/proc/{daemon_pid}/cmdline"),
            format!("/proc/{sibling_pid}/environ"), format!("/proc/{sibling_pid}/mem"),
            secret_file, token_file, db, wal, config_file, "/etc/shadow",
        ],
        "write": [db, dir.path("catalog.db-shm"), config_file, secret_file, "/usr/lib/toolhost-was-here", "/etc/passwd"],
        "unix": [unix],
        "tcp": [tcp],
        "signal": [daemon_pid, sibling_pid],
        "ptrace": true,
        "run": [
            [TOOLHOST, "approve", "hostile", "--all", "--addr", format!("unix:{}", unix.display())],
            [TOOLHOST, "servers", "--addr", tcp],
        ],
    });
    // 11 reads, 6 writes, 1 + 1 connects, 2 signals, ptrace, 2 commands: 24, from both processes.
    for server in ["hostile", "shell"] {
        let results = attack(&app, server, &targets).await;
        assert_all_blocked(server, &results, 48);
    }
    // Nothing a probe tried changed the daemon's state or the sibling.
    let echoed = client
        .call_tool(pb::CallToolRequest { qualified_name: "sibling__echo0".into(), arguments_json: "{}".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(!echoed.is_error);
    let who = client
        .call_tool(pb::CallToolRequest { qualified_name: "hostile__whoami".into(), arguments_json: "{}".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let who: Value = serde_json::from_str(&text_of(&who)).unwrap();
    assert!(who["pid"].as_i64().unwrap() < 10, "the server is a low pid in its own PID namespace: {who}");
    assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), "file-secret-of-the-sibling");
    let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    let hostile = servers.iter().find(|s| s.name == "hostile").unwrap();
    let sandbox = hostile.sandbox.as_ref().expect("a stdio server shows its sandbox");
    assert!(sandbox.enabled);
    assert_eq!(sandbox.network, "none");
    assert!(servers.iter().find(|s| s.name == "remote").unwrap().sandbox.is_none(), "an HTTP server has none");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_never_a_caller_even_with_its_sandbox_off_or_its_network_open() {
    let dir = TestDir::new();
    // The operator's token: the servers are given it too, so that only their being servers
    // can refuse them.
    let token = "operator-token-0123456789abcdef";
    let token_file = dir.path("operator.token");
    std::fs::write(&token_file, token).unwrap();
    let servers = [hostile_table("unconfined", "sandbox = \"off\""), hostile_table("networked", "network = \"all\"")];
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"operator\"\nuids = [0]\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\nadmin = true\n",
        token_file.display()
    );
    let app = start(dir.config_with(&access, &servers.join("\n"))).await;
    for name in ["unconfined", "networked"] {
        wait_for_server(app.registry(), name, "ready", |v| v.state() == ServerState::Ready).await;
    }
    let unix = format!("unix:{}", dir.path("toolhost.sock").display());
    let tcp = tcp_addr(&app).to_string();
    let approve = |addr: &str| {
        vec![
            TOOLHOST.to_owned(),
            "approve".into(),
            "unconfined".into(),
            "--all".into(),
            "--addr".into(),
            addr.to_owned(),
            "--token".into(),
            token.into(),
        ]
    };
    // The test itself, the same user with the same token, is an operator over both listeners.
    for addr in [&unix, &tcp] {
        let argv = approve(addr);
        let ours = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        assert!(ours.status.success(), "{}", String::from_utf8_lossy(&ours.stderr));
    }
    for (server, addr) in [("unconfined", &unix), ("unconfined", &tcp), ("networked", &tcp)] {
        let results = attack(&app, server, &json!({"run": [approve(addr)]})).await;
        assert_eq!(results.len(), 2);
        for (probe, result) in &results {
            assert!(result.starts_with("blocked"), "{server} through {addr}: {probe}: {result}");
            // On a Unix socket the refusal names its reason; over TCP the connection is closed
            // before a byte is read.
            if addr == &unix {
                assert!(result.contains("SERVER_PROCESS"), "{server} through {addr}: {probe}: {result}");
            }
        }
    }
    // A helper the unconfined server double-forks into a session of its own, whose parent then
    // exits: still a server's process (the server is its subreaper), never an operator.
    let results = attack(&app, "unconfined", &json!({"orphan_run": [approve(&unix)]})).await;
    assert_eq!(results.len(), 2);
    for (probe, result) in &results {
        assert!(result.starts_with("blocked") && result.contains("SERVER_PROCESS"), "{probe}: {result}");
    }
    let servers = client(&app).await.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    let unconfined = servers.iter().find(|s| s.name == "unconfined").unwrap().sandbox.clone().unwrap();
    assert!(!unconfined.enabled, "sandbox = \"off\" is shown");
    // Audited as such: the trail is written behind the call path and drained by the stop.
    app.shutdown().await;
    let store = toolhost::store::Store::open(&dir.db_path(), 50).await.unwrap();
    let records = store.audit().query(0, None, 100).await.unwrap();
    let refused: Vec<_> = records.iter().filter(|record| record.outcome == "server_process").collect();
    assert_eq!(refused.len(), 4, "the four attempts on the Unix socket: {records:?}");
    assert!(refused.iter().all(|record| record.agent.as_ref() == "(a server's process)" && record.caller.contains("pid")), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_server_is_stopped_alone_at_its_limit_and_restarted() {
    let dir = TestDir::new();
    let limits = "limits = { memory = \"64MiB\", processes = 16, open_files = 64, tmp = \"8MiB\" }\nrestart = { initial_backoff = \"2s\", max_backoff = \"2s\" }";
    let steady = dir.script("steady", json!({"tools": tools("echo", 1)}));
    let servers = [
        hostile_table("leak", limits).replace("restart = { initial_backoff = \"50ms\", max_backoff = \"200ms\" }\n", ""),
        hostile_table("bomb", limits).replace("restart = { initial_backoff = \"50ms\", max_backoff = \"200ms\" }\n", ""),
        hostile_table("files", limits).replace("restart = { initial_backoff = \"50ms\", max_backoff = \"200ms\" }\n", ""),
        hostile_table("filler", limits).replace("restart = { initial_backoff = \"50ms\", max_backoff = \"200ms\" }\n", ""),
        server_table("steady", &steady, ""),
    ];
    let app = start(dir.config(&servers.join("\n"))).await;
    for name in ["leak", "bomb", "files", "filler", "steady"] {
        wait_for_server(app.registry(), name, "ready", |v| v.state() == ServerState::Ready).await;
    }
    for (server, kind) in [("leak", "memory"), ("bomb", "processes"), ("files", "open_files"), ("filler", "tmp")] {
        let mut client = client(&app).await;
        let call = client.call_tool(pb::CallToolRequest {
            qualified_name: format!("{server}__runaway"),
            arguments_json: json!({"kind": kind}).to_string(),
            ..Default::default()
        });
        let failed = call.await.expect_err("the runaway call never completes: its server is stopped");
        assert_eq!(error_info(&failed).0, "OUTCOME_UNKNOWN", "{server}: {failed:?}");
        let view = wait_for_server(app.registry(), server, "stopped at its limit", |v| {
            v.state() == ServerState::Failed && v.last_error().is_some_and(|e| e.contains(&format!("the {kind} limit")))
        })
        .await;
        assert_eq!(view.sandbox().and_then(|s| s.last_limit).map(|k| k.label()), Some(kind));
        let output = std::process::Command::new(TOOLHOST).args(["servers", "--addr", &cli_addr(&app)]).output().unwrap();
        let listed = String::from_utf8_lossy(&output.stdout);
        let line = listed.lines().find(|line| line.starts_with(server)).unwrap_or_default();
        assert!(line.contains(&format!("hit={kind}")), "{listed}");
        // The others answer all the while.
        let echoed = client
            .call_tool(pb::CallToolRequest { qualified_name: "steady__echo0".into(), arguments_json: "{}".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert!(!echoed.is_error);
        // And the server comes back by the usual backoff.
        wait_for_server(app.registry(), server, "restarted", |v| v.state() == ServerState::Ready).await;
    }
    app.shutdown().await;
}

#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_that_cannot_sandbox_fails_the_server_closed_and_says_why() {
    let dir = TestDir::new();
    let script = dir.script("closed", json!({"tools": tools("t", 1)}));
    toolhost::faults::arm("sandbox.kernel", "closed");
    let app = start(dir.config(&server_table("closed", &script, ""))).await;
    let view = wait_for_server(app.registry(), "closed", "failed", |v| v.state() == ServerState::Failed).await;
    let error = view.last_error().map(str::to_owned).unwrap_or_default();
    assert!(error.contains("cannot sandbox") && error.contains("sandbox = \"off\""), "{error}");
    assert!(dir.pids("closed").is_empty(), "the server never ran unconfined");
    // The next start (the fault fired once) runs it in its sandbox.
    wait_for_server(app.registry(), "closed", "ready", |v| v.state() == ServerState::Ready).await;
    app.shutdown().await;
}

/// The daemon as an unprivileged user, as the shipped unit runs it: the sandbox needs no
/// capability, and the hostile server reaches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_daemon_sandboxes_its_servers_all_the_same() {
    if !requires_root("to switch to an unprivileged user") {
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = TestDir::new();
    let home = dir.path("home");
    std::fs::create_dir_all(home.join("run")).unwrap();
    let config = home.join("toolhost.toml");
    let secret = home.join("secret");
    std::fs::write(&secret, "unprivileged-secret").unwrap();
    // A systemd credential, as LoadCredential= gives one.
    let credentials = home.join("credentials");
    std::fs::create_dir_all(&credentials).unwrap();
    std::fs::write(credentials.join("token"), "credential-secret").unwrap();
    // The server may read the whole home directory: everything private in it is masked.
    let granted = format!("read = [{:?}]", home.display().to_string());
    let public = home.join("public.txt");
    std::fs::write(&public, "anyone may read this").unwrap();
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n{}\nenv = {{ S = \"${{file:{}}}\", C = \"${{cred:token}}\" }}\n",
            hostile_table("hostile", &granted),
            secret.display()
        ),
    )
    .unwrap();
    chown_tree(&dir.path(""), NOBODY);
    let mut daemon = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", TOOLHOST, "serve", "--config"])
        .arg(&config)
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let socket = home.join("toolhost.sock");
    let log = || std::fs::read_to_string(dir.path("daemon.log")).unwrap_or_default();
    eventually("the unprivileged daemon's server is ready", async || {
        let output = cli_as_blocking(NOBODY, None, &socket, &["servers", "--json"]);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.contains("\"state\":\"ready\"").then_some(())
    })
    .await;
    let targets = json!({
        "read": [public, config, secret, home.join("catalog.db"), credentials.join("token"), home.join("run/toolhost")],
        "write": [home.join("catalog.db"), config],
        "unix": [socket],
        "signal": [daemon.id()],
        "ptrace": true,
    });
    let output = cli_as(NOBODY, None, &socket, &["call", "hostile__attack", "--args", &targets.to_string(), "--json"]).await;
    assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stderr), log());
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Only the one file the grant shows and nothing private is reached, from both processes.
    let reached: Vec<&str> = stdout.match_indices("reached").map(|(at, _)| &stdout[at.saturating_sub(120)..at]).collect();
    assert_eq!(reached.len(), 2, "{stdout}");
    assert!(reached.iter().all(|before| before.contains("public.txt")), "{stdout}");
    assert!(stdout.contains("blocked"), "{stdout}");
    // The secret is rotated as rotation tools do it, by a rename over it, while the server runs:
    // the server still sees nothing of it (the home is a snapshot without the private files).
    let rotated = home.join("secret.new");
    std::fs::write(&rotated, "rotated-secret").unwrap();
    std::fs::rename(&rotated, &secret).unwrap();
    let targets = json!({"read": [secret, public]});
    let output = cli_as(NOBODY, None, &socket, &["call", "hostile__attack", "--args", &targets.to_string(), "--json"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && !stdout.contains("rotated"), "{stdout}");
    let reply: Value = serde_json::from_str(&stdout).unwrap();
    let report: Value = serde_json::from_str(reply["content"][0]["text"].as_str().unwrap()).unwrap();
    for side in ["process", "child"] {
        let read_secret = report[side][format!("read {}", secret.display())].as_str().unwrap_or_default();
        assert!(read_secret.starts_with("blocked"), "{side}: the rotated secret: {read_secret}");
        let read_public = report[side][format!("read {}", public.display())].as_str().unwrap_or_default();
        assert!(read_public.starts_with("reached"), "{side}: the public file: {read_public}");
    }
    // Non-dumpable: another process of the daemon's own user (an unconfined server, an agent)
    // cannot read its environment or memory.
    for file in ["environ", "mem"] {
        let read = std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "cat"])
            .arg(format!("/proc/{}/{file}", daemon.id()))
            .output()
            .unwrap();
        assert!(!read.status.success(), "{file} of the daemon was readable by its own user");
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log());
}

/// The daemon as its own unprivileged user, as the shipped unit runs it, with a server whose
/// network is open: the server makes itself non-dumpable (so that the daemon cannot read its
/// descriptors) and, holding the operator's token, knocks on the MCP endpoint and the console
/// over IPv4 and over the IPv4-mapped IPv6 address; and writes to a descriptor the daemon
/// inherited from what started it. Nothing answers it, while the operator, the same user, is
/// served over the same addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_daemons_networked_server_is_never_a_caller_on_any_loopback_address() {
    if !requires_root("to switch to an unprivileged user") {
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = TestDir::new();
    let home = dir.path("home");
    std::fs::create_dir_all(home.join("run")).unwrap();
    let token = "operator-token-0123456789abcdef";
    std::fs::write(home.join("operator.token"), token).unwrap();
    let config = home.join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n[mcp]\nlisten = [\"127.0.0.1:0\"]\n\n\
             [console]\nlisten = [\"127.0.0.1:0\"]\n\n[access]\ndefault = \"deny\"\n[[access.agents]]\nname = \"operator\"\n\
             uids = [{NOBODY}]\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\nadmin = true\n\n{}",
            home.join("operator.token").display(),
            hostile_table("networked", "network = \"all\"\nchanges = \"hold\"")
        ),
    )
    .unwrap();
    chown_tree(&dir.path(""), NOBODY);
    // A root-only file the daemon's starter left open as fd 7.
    let inherited = dir.path("root-only.log");
    std::fs::write(&inherited, "").unwrap();
    std::os::unix::fs::chown(&inherited, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&inherited, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let log_path = dir.path("daemon.log");
    let mut daemon = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "exec 7>>{:?}; exec setpriv --reuid 65534 --regid 65534 --clear-groups {TOOLHOST} serve --config {:?}",
            inherited.display().to_string(),
            config.display().to_string()
        ))
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let socket = home.join("toolhost.sock");
    eventually("the unprivileged daemon's server is ready", async || {
        let output = cli_as_blocking(NOBODY, None, &socket, &["servers", "--json"]);
        String::from_utf8_lossy(&output.stdout).contains("\"state\":\"ready\"").then_some(())
    })
    .await;
    let port_of = |what: &str| -> u16 {
        let text = log();
        let line = text.lines().find(|line| line.contains(what)).unwrap_or_else(|| panic!("no {what:?} in {text}"));
        let after = &line[line.find("127.0.0.1:").unwrap_or_else(|| panic!("{line}")) + "127.0.0.1:".len()..];
        after.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
    };
    let (mcp, console) = (port_of("serving the MCP endpoint"), port_of("serving the operator console"));
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#;
    // The Host header the daemon accepts, whatever address the socket uses: only who connects decides.
    let requests: Vec<Value> = ["127.0.0.1", "::ffff:127.0.0.1"]
        .into_iter()
        .flat_map(|host| {
            [
                json!({"host": host, "port": mcp, "method": "POST", "path": "/mcp", "body": initialize,
                       "headers": {"Authorization": format!("Bearer {token}"), "Content-Type": "application/json",
                                   "Accept": "application/json, text/event-stream", "Host": format!("127.0.0.1:{mcp}")}}),
                json!({"host": host, "port": console, "path": "/review",
                       "headers": {"Authorization": format!("Bearer {token}"), "Host": format!("127.0.0.1:{console}")}}),
                json!({"host": host, "port": console, "path": "/", "headers": {"Host": format!("127.0.0.1:{console}")}}),
            ]
        })
        .collect();
    let targets = json!({"http": requests, "write_fd": [7]});
    let output = cli_as(NOBODY, None, &socket, &["call", "networked__attack", "--args", &targets.to_string(), "--json"]).await;
    assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stderr), log());
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    let report: Value = serde_json::from_str(reply["content"][0]["text"].as_str().unwrap()).unwrap();
    let mut probes = 0;
    for side in ["process", "child"] {
        for (probe, result) in report[side].as_object().unwrap() {
            probes += 1;
            assert!(result.as_str().unwrap().starts_with("blocked"), "{side}: {probe}: {result}\n{}", log());
        }
    }
    assert_eq!(probes, 14, "{report}");
    assert_eq!(std::fs::read_to_string(&inherited).unwrap(), "", "nothing reached the inherited descriptor");
    // The operator, the same user in a process of its own, is served over both addresses.
    for host in ["127.0.0.1", "::ffff:127.0.0.1"] {
        let script = format!(
            "import http.client; c = http.client.HTTPConnection({host:?}, {mcp}, timeout=5); \
             c.request('POST', '/mcp', body={initialize:?}, headers={{'Authorization': 'Bearer {token}', \
             'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream', \
             'Host': '127.0.0.1:{mcp}'}}); print(c.getresponse().status)"
        );
        let answered = std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", PYTHON, "-c", &script])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&answered.stdout).trim(), "200", "{host}: {answered:?}\n{}", log());
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log());
}

pub(crate) fn chown_tree(path: &Path, uid: u32) {
    let _ = std::os::unix::fs::chown(path, Some(uid), Some(uid));
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            chown_tree(&entry.path(), uid);
        }
    }
}

/// The tool `knock`: a TLS client's hello to `target`, straight there (`direct`) or through a
/// CONNECT to the proxy its environment names; says how many bytes came back before the other
/// end closed (a TLS listener that reads the hello answers it).
pub(crate) const KNOCK: &str = r#"args = message["params"].get("arguments", {})
host, port = args["target"].rsplit(":", 1)
said = "direct"
if args.get("direct"):
    conn = socket.create_connection((host, int(port)), timeout=10)
else:
    proxy = os.environ.get("HTTPS_PROXY", "")
    phost, pport = proxy.rsplit("/", 1)[-1].rsplit(":", 1)
    conn = socket.create_connection((phost, int(pport)), timeout=10)
    conn.sendall(("CONNECT %s HTTP/1.1\r\n\r\n" % args["target"]).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(1)
        if not chunk:
            break
        head += chunk
    said = head.split(b"\r\n", 1)[0].decode()
if said == "direct" or " 200 " in said:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    conn.sendall(outgoing.read())
    conn.settimeout(3)
    got = b""
    try:
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    said += " | %d bytes" % len(got)
result = {"content": [{"type": "text", "text": said}]}"#;

/// "Never a caller" holds on every address of this machine, not only loopback. The daemon's
/// TLS gRPC listener on `0.0.0.0` (which takes a token without a certificate) closes a
/// connection from a server unread, before any token could count: one with the network reaching
/// it through the machine's own interface address, and one whose proxy entry names that address
/// (the tunnel's socket is the daemon's, but the caller is the server). A process of the same
/// user that is no server's is answered over the same address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_never_a_caller_on_any_of_this_machines_addresses() {
    let Some(own) = crate::egress::this_machines_address() else {
        return skipped("skipped: this machine has no IPv4 address but loopback to reach its listeners by");
    };
    let dir = TestDir::new();
    let certified = rcgen::generate_simple_self_signed(vec![own.to_string()]).unwrap();
    let (cert, key) = (dir.path("server.pem"), dir.path("server.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    // The listener's port, chosen before the start so that an entry can name it.
    let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let knocker = dir.path("knock.py");
    crate::sandbox_life::python_server(&knocker, "import os, socket, ssl", "knock", KNOCK);
    let knock = |name: &str, extra: &str| {
        format!("[servers.{name}]\ncommand = {PYTHON:?}\nargs = [{:?}]\n{extra}\n", knocker.display().to_string())
    };
    let text = format!(
        "[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"unix:toolhost.sock\", {{ address = \"0.0.0.0:{port}\", tls = {{ cert = {:?}, \
         key = {:?}, client_ca = {:?} }} }}]\n\n{}\n{}",
        cert.display().to_string(),
        key.display().to_string(),
        cert.display().to_string(),
        knock("networked", "network = \"all\""),
        knock("proxied", &format!("network = {{ allow = [\"{own}:{port}\"] }}")),
    );
    std::fs::write(dir.path("toolhost.toml"), &text).unwrap();
    let app = start(toolhost::config::Config::load(&dir.path("toolhost.toml")).unwrap()).await;
    for name in ["networked", "proxied"] {
        wait_for_server(app.registry(), name, "ready", |v| v.state() == ServerState::Ready).await;
    }
    let target = format!("{own}:{port}");
    let mut client = client(&app).await;
    let mut knock = async |server: &str, direct: bool| {
        let call = pb::CallToolRequest {
            qualified_name: format!("{server}__knock"),
            arguments_json: json!({"target": target, "direct": direct}).to_string(),
            ..Default::default()
        };
        text_of(&client.call_tool(call).await.unwrap().into_inner())
    };
    // The test, a process of the daemon's user that is no server's, is answered there.
    let ours = std::process::Command::new(PYTHON)
        .arg("-c")
        .arg(format!("import json, os, socket, ssl\nmessage = {{'params': {{'arguments': {{'target': {target:?}, 'direct': True}}}}}}\n{KNOCK}\nprint(result['content'][0]['text'])"))
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).trim().to_owned();
    assert!(ours.starts_with("direct | ") && ours != "direct | 0 bytes", "the listener answers a caller: {ours}");
    // The networked server, straight to the machine's own address: closed before a byte is read.
    assert_eq!(knock("networked", true).await, "direct | 0 bytes");
    // Through the proxy, to the address its entry names: the tunnel opens, and the listener
    // closes it unread.
    assert_eq!(knock("proxied", false).await, "HTTP/1.1 200 Connection established | 0 bytes");
    app.shutdown().await;
}
