//! The `toolhost serve` process as systemd runs it: notify protocol, reload on SIGHUP, a clean
//! stop on SIGTERM, and no surviving descendant after SIGKILL.

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use toolhost::api::pb;
use toolhost::api::pb::tool_host_client::ToolHostClient;
use toolhost::config::ListenAddr;

use crate::harness::*;

/// A `toolhost serve` child with its stderr in a file.
pub(crate) struct Daemon {
    child: Child,
    socket: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Daemon {
    pub(crate) fn start(dir: &TestDir, servers: &str, env: &[(&str, String)]) -> Daemon {
        let config = dir.path("daemon.toml");
        write_config(dir, servers);
        let log = dir.path("daemon.log");
        let child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, socket: dir.path("daemon.sock"), log }
    }

    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub(crate) fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap();
    }

    pub(crate) async fn client(&self) -> ToolHostClient<tonic::transport::Channel> {
        let addr = ListenAddr::Unix(self.socket.clone());
        let channel = eventually("the daemon listens", async || {
            toolhost::cli::connect(&addr).await.map_err(|error| format!("{error}; log:\n{}", self.log_text()))
        })
        .await;
        ToolHostClient::new(channel)
    }

    pub(crate) async fn wait_servers(&self, what: &str, condition: impl Fn(&[pb::Server]) -> bool) -> Vec<pb::Server> {
        let mut client = self.client().await;
        eventually(what, async || {
            let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
            match condition(&servers) {
                true => Ok(servers),
                false => Err(format!("{servers:#?}\nlog:\n{}", self.log_text())),
            }
        })
        .await
    }

    pub(crate) async fn wait_exit(&mut self) -> std::process::ExitStatus {
        let log = self.log.clone();
        let child = &mut self.child;
        eventually("the daemon exits", async || {
            child.try_wait().unwrap().ok_or_else(|| format!("log:\n{}", std::fs::read_to_string(&log).unwrap_or_default()))
        })
        .await
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(dir: &TestDir, servers: &str) {
    let text = format!("[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"unix:daemon.sock\"]\n\n{servers}");
    std::fs::write(dir.path("daemon.toml"), text).unwrap();
}

fn ready(servers: &[pb::Server]) -> bool {
    servers.iter().all(|s| s.state == pb::ServerState::Ready as i32)
}

/// Whether a process still runs (a zombie waiting for its reaper counts as gone).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_status_watchdog_reload_and_stopping_reach_the_notify_socket() {
    let dir = TestDir::new();
    let notify_path = dir.path("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let script = dir.script("one", json!({"tools": tools("t", 3)}));
    let env = [("NOTIFY_SOCKET", notify_path.display().to_string()), ("WATCHDOG_USEC", "200000".to_owned())];
    let mut daemon = Daemon::start(&dir, &server_table("one", &script, ""), &env);

    let mut messages: Vec<String> = Vec::new();
    let receive_until = |messages: &mut Vec<String>, what: &str, done: &dyn Fn(&[String]) -> bool| {
        let deadline = Instant::now() + WAIT;
        let mut buf = [0u8; 4096];
        while !done(messages) {
            assert!(Instant::now() < deadline, "no {what}; got {messages:?}");
            if let Ok(n) = notify.recv(&mut buf) {
                messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    };
    receive_until(&mut messages, "READY=1", &|m| m.iter().any(|m| m == "READY=1"));
    // READY=1 promises bound listeners: the API answers at once.
    daemon.client().await.list_servers(pb::ListServersRequest::default()).await.unwrap();
    receive_until(&mut messages, "a status with the server ready", &|m| m.iter().any(|m| m == "STATUS=1/1 servers ready, 3 tools"));
    receive_until(&mut messages, "two watchdog pings", &|m| m.iter().filter(|m| *m == "WATCHDOG=1").count() >= 2);

    daemon.signal(Signal::SIGHUP);
    receive_until(&mut messages, "RELOADING=1", &|m| m.iter().any(|m| m.starts_with("RELOADING=1\nMONOTONIC_USEC=")));
    let reloading_at = messages.iter().position(|m| m.starts_with("RELOADING=1")).unwrap();
    receive_until(&mut messages, "READY=1 after the reload", &|m| m[reloading_at..].iter().any(|m| m == "READY=1"));

    daemon.signal(Signal::SIGTERM);
    receive_until(&mut messages, "STOPPING=1", &|m| m.iter().any(|m| m == "STOPPING=1"));
    assert!(daemon.wait_exit().await.success());
    let server_pid = dir.pids("one")[0];
    assert!(!running(server_pid), "the server stopped with the daemon");
    assert!(!daemon.socket.exists(), "the socket is removed on a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_removes_and_restarts_only_what_changed() {
    let dir = TestDir::new();
    let scripts: Vec<_> = ["gone", "edited", "kept", "added"].iter().map(|n| dir.script(n, json!({"tools": tools(n, 1)}))).collect();
    let before = [server_table("gone", &scripts[0], ""), server_table("edited", &scripts[1], ""), server_table("kept", &scripts[2], "")];
    let daemon = Daemon::start(&dir, &before.join("\n"), &[]);
    daemon.wait_servers("all ready", |s| s.len() == 3 && ready(s)).await;

    // An invalid file is refused and everything keeps running.
    std::fs::write(dir.path("daemon.toml"), "[servers.kept\ncommand = ").unwrap();
    daemon.signal(Signal::SIGHUP);
    eventually("the refusal is logged", async || daemon.log_text().contains("the new configuration is invalid").then_some(())).await;
    assert!(daemon.log_text().contains("daemon.toml"), "the refusal names the file");
    daemon.wait_servers("still three", |s| s.len() == 3 && ready(s)).await;
    // So is an empty file (a truncated write), which would otherwise stop every server.
    std::fs::write(dir.path("daemon.toml"), "").unwrap();
    daemon.signal(Signal::SIGHUP);
    eventually("the empty file's refusal is logged", async || daemon.log_text().contains("the file is empty").then_some(())).await;
    daemon.wait_servers("still three", |s| s.len() == 3 && ready(s)).await;

    let after = [
        server_table("edited", &scripts[1], "request_timeout = \"7s\""),
        server_table("kept", &scripts[2], ""),
        server_table("added", &scripts[3], ""),
    ];
    write_config(&dir, &after.join("\n"));
    daemon.signal(Signal::SIGHUP);
    let servers = daemon
        .wait_servers("the new set, ready", |s| {
            s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>() == ["added", "edited", "kept"] && ready(s)
        })
        .await;
    assert_eq!(servers.len(), 3);
    assert_eq!(dir.pids("kept").len(), 1, "an unchanged server keeps its process");
    assert!(running(dir.pids("kept")[0]));
    assert_eq!(dir.pids("edited").len(), 2, "a changed server is restarted");
    assert!(!running(dir.pids("gone")[0]), "a removed server is stopped");
    assert_eq!(dir.pids("added").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_descendant_survives_a_sigkill_of_the_daemon() {
    let dir = TestDir::new();
    let scripts: Vec<_> = ["a", "b"].iter().map(|n| dir.script(n, json!({"tools": tools(n, 1), "spawn_grandchild": true}))).collect();
    let servers = [server_table("a", &scripts[0], ""), server_table("b", &scripts[1], "")];
    let daemon = Daemon::start(&dir, &servers.join("\n"), &[]);
    daemon.wait_servers("ready", |s| s.len() == 2 && ready(s)).await;
    let mut pids = dir.pids("a");
    pids.extend(dir.pids("b"));
    assert_eq!(pids.len(), 4, "two servers and their grandchildren");
    assert!(pids.iter().all(|pid| running(*pid)));

    daemon.signal(Signal::SIGKILL);
    eventually("every descendant is gone", async || {
        let alive: Vec<_> = pids.iter().filter(|pid| running(**pid)).collect();
        if alive.is_empty() { Ok(()) } else { Err(format!("still running: {alive:?}")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_serves_the_stored_catalog_at_once() {
    let dir = TestDir::new();
    let script = dir.script("s", json!({"tools": tools("t", 4)}));
    let mut daemon = Daemon::start(&dir, &server_table("s", &script, ""), &[]);
    daemon.wait_servers("ready", ready).await;
    daemon.signal(Signal::SIGTERM);
    assert!(daemon.wait_exit().await.success());
    drop(daemon);

    // Now the server hangs at initialize: only the store can answer.
    let hanging = dir.script("s", json!({"tools": tools("t", 4), "hang_methods": ["initialize"]}));
    let daemon = Daemon::start(&dir, &server_table("s", &hanging, "request_timeout = \"30s\""), &[]);
    let mut client = daemon.client().await;
    let tools = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner().tools;
    assert_eq!(tools.len(), 4, "the previous catalog is served right after the restart");
    assert!(tools.iter().all(|t| !t.available));
    let server = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers.remove(0);
    assert!(server.revalidating && server.last_verified_unix_ms > 0);
    assert_eq!(server.generation, 1);
}

/// Runs `toolhost serve` on the test's configuration, which must refuse to start: its stderr.
fn serve_refused(dir: &TestDir) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["serve", "--config", dir.path("daemon.toml").to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "this daemon must not run: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_store_is_refused_and_the_first_keeps_serving() {
    let dir = TestDir::new();
    let script = dir.script("s", json!({"tools": tools("t", 2)}));
    let daemon = Daemon::start(&dir, &server_table("s", &script, ""), &[]);
    daemon.wait_servers("ready", ready).await;
    let socket_inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&daemon.socket).unwrap());

    let stderr = serve_refused(&dir);
    assert!(stderr.contains(&dir.db_path().display().to_string()), "the store is named: {stderr}");
    assert!(stderr.contains(&format!("pid {}", daemon.child.id())), "the running daemon's pid is named: {stderr}");

    // The first daemon's socket was left alone, it still answers, and it ran the server once.
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&daemon.socket).unwrap()), socket_inode);
    let servers = daemon.wait_servers("still ready", ready).await;
    assert_eq!(servers.len(), 1);
    assert_eq!(dir.pids("s").len(), 1, "no second copy of the server was started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_somebody_listens_on_is_never_replaced() {
    let dir = TestDir::new();
    // Another program (not a toolhost) listens where the configuration puts the gRPC socket.
    let listener = std::os::unix::net::UnixListener::bind(dir.path("daemon.sock")).unwrap();
    let script = dir.script("s", json!({"tools": tools("t", 1)}));
    write_config(&dir, &server_table("s", &script, ""));
    let stderr = serve_refused(&dir);
    assert!(stderr.contains("daemon.sock") && stderr.contains("another process is listening"), "{stderr}");
    // The other program's socket still works.
    let _client = std::os::unix::net::UnixStream::connect(dir.path("daemon.sock")).expect("the socket is still the other program's");
    assert!(listener.accept().is_ok());

    // A socket nobody listens on (left by a killed daemon) is replaced.
    drop(listener);
    let daemon = Daemon::start(&dir, &server_table("s", &script, ""), &[]);
    daemon.wait_servers("ready over the replaced socket", ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_garbage_costs_a_bounded_number_of_log_lines() {
    let dir = TestDir::new();
    let script = dir.script(
        "noisy",
        json!({"tools": tools("t", 2), "garbage_lines": 20000, "foreign_responses": 5000, "stderr_lines": 5000, "server_requests": vec!["sampling/createMessage"; 500]}),
    );
    let daemon = Daemon::start(&dir, &server_table("noisy", &script, ""), &[]);
    daemon.wait_servers("ready", |s| s.len() == 1 && ready(s)).await;
    let mut client = daemon.client().await;
    let tools = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner().tools;
    assert_eq!(tools.len(), 2, "the server's listing is served whatever its noise");
    let log = daemon.log_text();
    let about = |needle: &str| log.lines().filter(|line| line.contains(needle)).count();
    let garbage = about("not a JSON-RPC message") + about("never issued") + about("refused a server request");
    assert!(garbage <= 40, "{garbage} log lines for 25,500 bad messages");
    assert!(about("scripted-mcp-server chatter") <= 200, "stderr is rate-limited too");
    assert!(log.lines().count() < 400, "{} log lines in all", log.lines().count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_reload_stops_everything_within_the_shutdown_timeout() {
    let dir = TestDir::new();
    // Servers that ignore SIGTERM and keep running after their input closes: each one's
    // shutdown sequence runs to SIGKILL (2 × shutdown_grace).
    let stubborn = |name: &str, grace: &str| {
        let script = dir.script(name, json!({"tools": tools(name, 1), "linger_after_eof_ms": 60000}));
        let inner = format!("trap '' TERM; exec {} {}", scripted_server(), script.display());
        // The program and its script are inside the shell's command string, not arguments of
        // their own: they are granted by name.
        let granted = script.parent().unwrap().display().to_string();
        let program = scripted_server();
        format!(
            "[servers.{name}]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {inner:?}]\nread = [{program:?}]\nwrite = [{granted:?}]\nshutdown_grace = \"{grace}\"\nrestart = {{ initial_backoff = \"50ms\", max_backoff = \"200ms\" }}\n"
        )
    };
    let config =
        |grace: &str| format!("[daemon]\nshutdown_timeout = \"3s\"\n\n{}", ["a", "b", "c"].map(|name| stubborn(name, grace)).join("\n"));
    let mut daemon = Daemon::start(&dir, &config("2s"), &[]);
    daemon.wait_servers("all ready", |s| s.len() == 3 && ready(s)).await;
    let pids: Vec<i32> = ["a", "b", "c"].iter().flat_map(|name| dir.pids(name)).collect();

    // A reload that must stop all three (each takes 4 s to die), then SIGTERM at once.
    write_config(&dir, &config("3s"));
    daemon.signal(Signal::SIGHUP);
    eventually("the reload starts", async || daemon.log_text().contains("received SIGHUP").then_some(())).await;
    let stop_sent = Instant::now();
    daemon.signal(Signal::SIGTERM);
    let status = daemon.wait_exit().await;
    let took = stop_sent.elapsed();
    assert!(status.success(), "{status:?}\n{}", daemon.log_text());
    // shutdown_timeout is 3 s; a serial reload would have taken 12 s before the stop even began.
    assert!(took < Duration::from_secs(7), "the daemon took {took:?} to stop after SIGTERM:\n{}", daemon.log_text());
    eventually("no server outlives the daemon", async || pids.iter().all(|pid| !running(*pid)).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_stream_of_commits_loses_nothing_that_was_published() {
    let dir = TestDir::new();
    let tools_file = dir.path("tools.json");
    let round_tools = |round: u64| {
        let mut listed = tools("t", 3);
        listed.push(json!({"name": "changing", "description": format!("round {round}"), "inputSchema": {"type": "object"}}));
        json!(listed).to_string()
    };
    std::fs::write(&tools_file, round_tools(0)).unwrap();
    let script = dir.script("busy", json!({"tools_file": tools_file, "watch_tools_file": true}));
    let table = server_table("busy", &script, "");
    let mut round = 0;
    let mut highest_seen = 0;
    for kill in 0..3 {
        let mut daemon = Daemon::start(&dir, &table, &[]);
        let servers = daemon.wait_servers("ready", |s| s.len() == 1 && ready(s)).await;
        assert!(servers[0].generation >= highest_seen, "kill {kill}: generation {} went back below {highest_seen}", servers[0].generation);
        // Change the tools every few tens of milliseconds (a burst, paced by quiet periods, so
        // commits keep coming) while watching what is published.
        let mut client = daemon.client().await;
        let (until, mut pace) = (Instant::now() + Duration::from_millis(900), pace(Duration::from_millis(35)));
        while Instant::now() < until {
            pace.tick().await;
            round += 1;
            std::fs::write(&tools_file, round_tools(round)).unwrap();
            let server = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers.remove(0);
            assert!(server.generation >= highest_seen, "numbers never go back");
            highest_seen = server.generation;
        }
        daemon.signal(Signal::SIGKILL);
        daemon.wait_exit().await;
        drop(daemon);
        assert!(highest_seen >= 3, "the stream of commits was real ({highest_seen} generations)");

        let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!("sqlite://{}", dir.db_path().display())).await.unwrap();
        let integrity: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut db).await.unwrap();
        assert_eq!(integrity, "ok");
        let stored: i64 =
            sqlx::query_scalar("SELECT current_generation FROM servers WHERE name = 'busy'").fetch_one(&mut db).await.unwrap();
        sqlx::Connection::close(db).await.unwrap();
        assert!(stored as u64 >= highest_seen, "kill {kill}: generation {highest_seen} was published but the file holds {stored}");
        highest_seen = stored as u64;
    }
    // After the last kill: the stored catalog is served, and the next change takes the next number.
    let daemon = Daemon::start(&dir, &table, &[]);
    let mut client = daemon.client().await;
    let served = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers.remove(0);
    assert!(served.generation >= highest_seen, "the last committed generation (or a newer one) is served at once");
    daemon.wait_servers("ready", |s| s.len() == 1 && ready(s)).await;
    let base = daemon.wait_servers("settled", |s| s[0].generation >= highest_seen).await[0].generation;
    std::fs::write(&tools_file, round_tools(round + 1_000)).unwrap();
    let after = daemon.wait_servers("the next change", |s| s[0].generation > base).await;
    assert_eq!(after[0].generation, base + 1, "no number is skipped or reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gets_a_clean_environment() {
    let dir = TestDir::new();
    let env_file = dir.path("env.txt");
    let script = dir.script("clean", json!({"tools": tools("t", 1), "env_file": env_file}));
    let extra = "inherit_env = [\"ALLOWED_EXTRA\"]\nenv = { OWN = \"own-value\", FROM_REF = \"${FOR_THIS_SERVER}\" }";
    let daemon = Daemon::start(
        &dir,
        &server_table("clean", &script, extra),
        &[
            ("ANOTHER_SERVERS_TOKEN", "must-not-leak".to_owned()),
            ("ALLOWED_EXTRA", "shared".to_owned()),
            ("FOR_THIS_SERVER", "resolved-secret".to_owned()),
            // What the host trusts and where launchers fetch through pass; a credential does not.
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt".to_owned()),
            ("NODE_EXTRA_CA_CERTS", "/etc/ssl/certs/ca-certificates.crt".to_owned()),
            ("NPM_CONFIG_REGISTRY", "https://registry.internal.example/".to_owned()),
            ("HTTPS_PROXY", "http://proxy-user:proxy-password@proxy.internal.example:3128".to_owned()),
        ],
    );
    daemon.wait_servers("ready", |s| s.len() == 1 && ready(s)).await;
    let env = std::fs::read_to_string(&env_file).unwrap();
    let names: Vec<&str> = env.lines().filter_map(|line| line.split_once('=').map(|(name, _)| name)).collect();
    assert!(names.contains(&"PATH"), "the base set is there: {names:?}");
    assert!(!names.contains(&"ANOTHER_SERVERS_TOKEN"), "toolhost's environment is not: {names:?}");
    assert!(
        env.contains("ALLOWED_EXTRA=shared\n") && env.contains("OWN=own-value\n") && env.contains("FROM_REF=resolved-secret\n"),
        "{env}"
    );
    assert!(env.contains("SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n") && env.contains("NODE_EXTRA_CA_CERTS="), "{env}");
    assert!(env.contains("NPM_CONFIG_REGISTRY=https://registry.internal.example/\n"), "{env}");
    assert!(!env.contains("proxy-password") && !names.contains(&"HTTPS_PROXY"), "a proxy with a password is not passed on: {env}");
    let log = daemon.log_text();
    assert!(!log.contains("resolved-secret"), "a resolved reference is never logged");
}

/// `toolhost reload` as a person types it, against the running daemon.
fn reload_cli(dir: &TestDir) -> std::process::Output {
    let addr = format!("unix:{}", dir.path("daemon.sock").display());
    Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["reload", "--addr", &addr]).output().unwrap()
}

/// An HTTP status line from `GET /` at `addr`, or why not.
fn get_root(addr: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).map_err(|error| error.to_string())?;
    stream.write_all(format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|error| error.to_string())?;
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolhost_reload_opens_and_closes_listeners_and_names_what_it_could_not_apply() {
    let dir = TestDir::new();
    let scripts: Vec<_> = ["one", "two"].iter().map(|n| dir.script(n, json!({"tools": tools(n, 1)}))).collect();
    let daemon = Daemon::start(&dir, &server_table("one", &scripts[0], ""), &[]);
    daemon.wait_servers("one ready", |s| s.len() == 1 && ready(s)).await;

    // A console and an MCP socket where there were none, a server more, and a setting the
    // running daemon cannot change.
    let servers = [server_table("one", &scripts[0], ""), server_table("two", &scripts[1], "")].join("\n");
    let listeners =
        "[console]\nlisten = [\"127.0.0.1:0\"]\n\n[mcp]\nlisten = [\"unix:mcp.sock\"]\n\n[daemon]\nshutdown_timeout = \"9s\"\n\n";
    write_config(&dir, &format!("{listeners}{servers}"));
    let output = reload_cli(&dir);
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    // (A new socket is one of the daemon's private places, which every sandbox is restarted to hide.)
    assert!(said.starts_with("reloaded: servers added two;"), "{said}");
    assert!(!said.contains("[mcp] page size"), "only what changed is said: {said}");
    assert!(said.contains("not applied: [daemon]: it takes effect at the next restart"), "{said}");
    assert!(said.contains(&format!("applied: [mcp] listen unix:{}: listening", dir.path("mcp.sock").display())), "{said}");
    let console = said
        .lines()
        .find_map(|line| line.strip_prefix("applied: [console] listen ")?.strip_suffix(": listening"))
        .unwrap_or_else(|| panic!("the console's new address is said: {said}"))
        .to_owned();
    assert!(!console.ends_with(":0"), "the port bound, not the one asked for: {console}");
    let status = get_root(&console).unwrap();
    assert!(["HTTP/1.1 200", "HTTP/1.1 303"].iter().any(|ok| status.starts_with(ok)), "the console answers at once: {status}");
    let mut mcp = std::os::unix::net::UnixStream::connect(dir.path("mcp.sock")).expect("the MCP socket is open");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    std::io::Write::write_all(&mut mcp, format!("{initialize}\n").as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&mcp), &mut line).unwrap();
    assert!(line.contains("\"serverInfo\""), "{line}");
    daemon.wait_servers("two ready", |s| s.len() == 2 && ready(s)).await;

    // The console removed again: closed, and said so; what stays is left alone.
    write_config(&dir, &format!("[mcp]\nlisten = [\"unix:mcp.sock\"]\n\n[daemon]\nshutdown_timeout = \"9s\"\n\n{servers}"));
    let said = String::from_utf8_lossy(&reload_cli(&dir).stdout).into_owned();
    assert!(said.contains(&format!("applied: [console] listen {console}: closed")), "{said}");
    assert!(!said.contains("[mcp] listen"), "an unchanged listener is not touched: {said}");
    eventually("the console's port is closed", async || get_root(&console).err()).await;

    // An invalid file: the reload says why, and everything keeps running.
    std::fs::write(dir.path("daemon.toml"), "[servers.one\ncommand = ").unwrap();
    let refused = reload_cli(&dir);
    let why = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(3), "{why}");
    assert!(why.contains("invalid") && why.contains("daemon.toml") && why.contains("the running one is kept"), "{why}");
    daemon.wait_servers("both still ready", |s| s.len() == 2 && ready(s)).await;
}

/// The MCP endpoint answers `initialize` on the Unix socket at `path`.
fn mcp_answers_on(path: &std::path::Path) -> bool {
    let Ok(mut mcp) = std::os::unix::net::UnixStream::connect(path) else { return false };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut line = String::new();
    std::io::Write::write_all(&mut mcp, format!("{initialize}\n").as_bytes()).is_ok()
        && std::io::BufRead::read_line(&mut std::io::BufReader::new(&mcp), &mut line).is_ok()
        && line.contains("\"serverInfo\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_sockets_and_ports_from_one_door_to_another() {
    let dir = TestDir::new();
    let listeners = |grpc: &str, mcp: &str, console: &str| {
        let text = format!(
            "[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"unix:daemon.sock\"{grpc}]\n\n[mcp]\nlisten = [{mcp}]\n\n\
             [console]\nlisten = [{console}]\n"
        );
        std::fs::write(dir.path("daemon.toml"), text).unwrap();
    };
    let daemon = Daemon::start(&dir, "", &[]);
    daemon.wait_servers("the daemon answers", |_| true).await;
    listeners(", \"unix:a.sock\"", "\"unix:b.sock\"", "\"127.0.0.1:0\"");
    let said = String::from_utf8_lossy(&reload_cli(&dir).stdout).into_owned();
    let port = said
        .lines()
        .find_map(|line| line.strip_prefix("applied: [console] listen ")?.strip_suffix(": listening"))
        .unwrap_or_else(|| panic!("the console's address is said: {said}"))
        .to_owned();
    assert!(mcp_answers_on(&dir.path("b.sock")), "{said}");

    // The sockets swap doors, and the console's port becomes the MCP endpoint's.
    listeners(", \"unix:b.sock\"", &format!("\"unix:a.sock\", \"{port}\""), "");
    let output = reload_cli(&dir);
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success() && !said.contains("not applied"), "every listener moved: {said}");
    assert!(said.contains(&format!("applied: [mcp] listen {port}: listening")), "{said}");
    assert!(mcp_answers_on(&dir.path("a.sock")), "the MCP endpoint took the gRPC API's socket: {said}");
    let addr = format!("unix:{}", dir.path("b.sock").display());
    let servers = Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["servers", "--addr", &addr]).output().unwrap();
    assert!(servers.status.success(), "the gRPC API took the MCP endpoint's socket: {}", String::from_utf8_lossy(&servers.stderr));
    let mut http = std::net::TcpStream::connect(&port).expect("the MCP endpoint listens on the console's old port");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    std::io::Write::write_all(&mut http, request.as_bytes()).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut http, &mut answer).unwrap();
    assert!(!answer.contains("<html"), "the console no longer answers there: {answer}");
}
