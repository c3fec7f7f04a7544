//! A server's life inside its sandbox, past containment (`sandbox.rs`): it has a home of its
//! own, writes what its grants name across restarts, says why when it fails, and costs nothing
//! while idle; its CPU limit is the whole sandbox's.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::sandbox::{PYTHON, TOOLHOST, attack, hostile_table};

/// Writes a minimal MCP server in Python at `path`: `prelude` runs first, then it answers the
/// handshake, lists one tool named `tool`, and runs `on_call` (which sets `result` or exits) for
/// a call of it; anything else is -32601.
pub(crate) fn python_server(path: &Path, prelude: &str, tool: &str, on_call: &str) {
    let indent = |code: &str| code.lines().map(|line| format!("        {line}\n")).collect::<String>();
    let text = format!(
        "import json, sys\n{prelude}\n\
         for line in sys.stdin:\n\
         \x20   message = json.loads(line)\n\
         \x20   method, id = message.get(\"method\"), message.get(\"id\")\n\
         \x20   if id is None:\n\
         \x20       continue\n\
         \x20   if method == \"initialize\":\n\
         \x20       result = {{\"protocolVersion\": message[\"params\"][\"protocolVersion\"], \"capabilities\": {{\"tools\": {{}}}}, \"serverInfo\": {{\"name\": \"{tool}\", \"version\": \"1\"}}}}\n\
         \x20   elif method == \"tools/list\":\n\
         \x20       result = {{\"tools\": [{{\"name\": \"{tool}\", \"inputSchema\": {{\"type\": \"object\"}}}}]}}\n\
         \x20   elif method == \"tools/call\":\n{}\
         \x20   else:\n\
         \x20       print(json.dumps({{\"jsonrpc\": \"2.0\", \"id\": id, \"error\": {{\"code\": -32601, \"message\": \"no\"}}}}), flush=True)\n\
         \x20       continue\n\
         \x20   print(json.dumps({{\"jsonrpc\": \"2.0\", \"id\": id, \"result\": result}}), flush=True)\n",
        indent(on_call)
    );
    std::fs::write(path, text).unwrap();
}

/// A server that fails says why, in its last error and at WARN: a Python server run by its path
/// imports the module beside it, but one whose library lies elsewhere exits before it answers (status, its traceback's
/// last lines, and the grant that would fix it); one that dies in the middle of a session after
/// writing to stderr is shown with its status and those lines, not "the session is closed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_says_why_with_its_status_its_stderr_and_the_fix() {
    let dir = TestDir::new();
    // Its script's directory is shown (the module beside it imports), a library it adds to its
    // path from elsewhere is not.
    let code = dir.path("code");
    let lib = dir.path("lib");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(code.join("helpers.py"), "GREETING = 'hello from beside'\n").unwrap();
    std::fs::write(lib.join("shared.py"), "GREETING = 'hello from elsewhere'\n").unwrap();
    python_server(
        &code.join("works.py"),
        "import helpers",
        "greet",
        "result = {\"content\": [{\"type\": \"text\", \"text\": helpers.GREETING}]}",
    );
    std::fs::write(code.join("server.py"), format!("import sys\nsys.path.insert(0, {:?})\nimport shared\n", lib.display().to_string()))
        .unwrap();
    // Answers the handshake and listing; its one tool writes a line to stderr and exits 4.
    let dying = dir.path("dying.py");
    python_server(
        &dying,
        "",
        "die",
        "sys.stderr.write(\"fatal: the journal at /var/lib/dying/journal is locked by another process\\n\")\nsys.stderr.flush()\nsys.exit(4)",
    );
    let restart = "restart = { initial_backoff = \"10s\", max_backoff = \"10s\" }";
    let servers = [
        format!("[servers.imports]\ncommand = {PYTHON:?}\nargs = [{:?}]\n{restart}\n", code.join("server.py").display().to_string()),
        format!("[servers.dying]\ncommand = {PYTHON:?}\nargs = [{:?}]\n{restart}\n", dying.display().to_string()),
        format!("[servers.beside]\ncommand = {PYTHON:?}\nargs = [{:?}]\n{restart}\n", code.join("works.py").display().to_string()),
    ];
    let app = start(dir.config(&servers.join("\n"))).await;
    let view = wait_for_server(app.registry(), "imports", "its failure explained", |v| {
        v.last_error().is_some_and(|error| error.contains("exited with status"))
    })
    .await;
    let error = view.last_error().map(str::to_owned).unwrap();
    assert!(error.contains("before it answered") && error.contains("No module named 'shared'"), "{error}");
    assert!(error.contains("hint: a module it imports is not in its view"), "{error}");
    assert!(!error.contains("the session is closed"), "{error}");

    wait_for_server(app.registry(), "beside", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let greet = pb::CallToolRequest { qualified_name: "beside__greet".into(), arguments_json: "{}".into(), ..Default::default() };
    let greeted = client.call_tool(greet).await.unwrap().into_inner();
    assert!(greeted.content_json.contains("hello from beside"), "{greeted:?}");

    wait_for_server(app.registry(), "dying", "ready", |v| v.state() == ServerState::Ready).await;
    let call = pb::CallToolRequest { qualified_name: "dying__die".into(), arguments_json: "{}".into(), ..Default::default() };
    let failed = client.call_tool(call).await.expect_err("the server died under the call");
    assert_eq!(error_info(&failed).0, "OUTCOME_UNKNOWN", "{failed:?}");
    let view = wait_for_server(app.registry(), "dying", "its end explained", |v| v.last_error().is_some()).await;
    let error = view.last_error().map(str::to_owned).unwrap();
    assert!(error.contains("exited with status 4") && error.contains("journal at /var/lib/dying/journal is locked"), "{error}");
    // The CLI shows it, escaped and whole in JSON.
    let output = std::process::Command::new(TOOLHOST).args(["servers", "--json", "--addr", &cli_addr(&app)]).output().unwrap();
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    let shown =
        listed.as_array().and_then(|servers| servers.iter().find(|s| s["name"] == "dying")).cloned().unwrap_or_else(|| listed.clone());
    assert!(shown.to_string().contains("exited with status 4"), "{shown}");
    // One server whole: its last error with the server's own stderr line, its history, what
    // its sandbox reads; in JSON too; a server nobody configured is not found.
    let output = std::process::Command::new(TOOLHOST).args(["servers", "dying", "--addr", &cli_addr(&app)]).output().unwrap();
    let detail = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{detail}{}", String::from_utf8_lossy(&output.stderr));
    assert!(detail.contains("server      dying") && detail.contains("last error\n"), "{detail}");
    assert!(detail.contains("exited with status 4") && detail.contains("journal at /var/lib/dying/journal is locked"), "{detail}");
    assert!(detail.contains("history (newest first)") && detail.contains(&format!("  reads     {}", dying.display())), "{detail}");
    // How its limits are held here, and why not by a kernel cgroup.
    assert!(detail.contains("limits=watched") && detail.contains("  limits    limits of the whole sandbox (watched)"), "{detail}");
    assert!(detail.contains("cgroup"), "{detail}");
    let output = std::process::Command::new(TOOLHOST).args(["servers", "imports", "--json", "--addr", &cli_addr(&app)]).output().unwrap();
    let imports: Value = serde_json::from_slice(&output.stdout).unwrap();
    let history = imports["history"].as_array().cloned().unwrap_or_default();
    assert!(history.iter().any(|event| event["what"].as_str().is_some_and(|what| what.contains("No module named 'shared'"))), "{imports}");
    assert!(imports["sandbox"]["home"].as_str().is_some_and(|home| home.contains("imports")), "{imports}");
    let output = std::process::Command::new(TOOLHOST).args(["servers", "nobody", "--addr", &cli_addr(&app)]).output().unwrap();
    assert!(!output.status.success() && String::from_utf8_lossy(&output.stderr).contains("nobody"), "{output:?}");
    app.shutdown().await;
}

/// A file named in a server's arguments that lies in its write grant stays writable across
/// restarts (it was bound read-only on top of the grant once it existed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_named_in_the_arguments_inside_a_write_grant_stays_writable_across_restarts() {
    let dir = TestDir::new();
    let data = dir.path("data");
    std::fs::create_dir_all(&data).unwrap();
    open_to_all(&data);
    let journal = data.join("journal.log");
    // Appends a line at every start, and dies if it cannot: the journal must take it.
    let server = dir.path("journal.py");
    python_server(
        &server,
        "with open(sys.argv[1], \"a\") as journal:\n    journal.write(\"started\\n\")",
        "noop",
        "result = {\"content\": []}",
    );
    let table = format!(
        "[servers.journal]\ncommand = {PYTHON:?}\nargs = [{:?}, {:?}]\nwrite = [{:?}]\n",
        server.display().to_string(),
        journal.display().to_string(),
        data.display().to_string()
    );
    let app = start(dir.config(&table)).await;
    let starts = |n: usize| move |v: &toolhost::registry::ServerView| v.state() == ServerState::Ready && v.num_restarts() as usize >= n;
    wait_for_server(app.registry(), "journal", "ready", starts(0)).await;
    let mut client = client(&app).await;
    for restart in 1..=3 {
        let before = app.registry().server("journal").unwrap().num_restarts();
        client.restart_server(pb::RestartServerRequest { server: "journal".into() }).await.unwrap();
        wait_for_server(app.registry(), "journal", "restarted", |v| v.state() == ServerState::Ready && v.num_restarts() > before).await;
        let lines = std::fs::read_to_string(&journal).unwrap().lines().count();
        assert_eq!(lines, restart + 1, "after restart {restart}");
    }
    app.shutdown().await;
}

/// Each sandboxed server has a home of its own beside the store (in the private state
/// directory): its HOME and XDG directories, owned by the uid it runs as, writable, kept across
/// restarts; the rest of the state directory stays out of its sight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_has_a_home_of_its_own_that_outlives_its_restarts() {
    let dir = TestDir::new();
    let state = dir.path("state");
    std::fs::create_dir_all(&state).unwrap();
    let config = dir.path("toolhost.toml");
    // No [store] path: the store, and the servers' homes beside it, go to the state directory.
    std::fs::write(&config, format!("[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n{}", hostile_table("hostile", ""))).unwrap();
    let log = dir.path("daemon.log");
    let mut daemon = std::process::Command::new(TOOLHOST)
        .args(["serve", "--config"])
        .arg(&config)
        .env("STATE_DIRECTORY", &state)
        .env("RUNTIME_DIRECTORY", dir.path("run"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = format!("unix:{}", dir.path("toolhost.sock").display());
    let cli = |args: &[&str]| std::process::Command::new(TOOLHOST).args(args).args(["--addr", &addr]).output().unwrap();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    eventually("the server is ready", async || {
        String::from_utf8_lossy(&cli(&["servers", "--json"]).stdout).contains("\"state\":\"ready\"").then_some(())
    })
    .await;
    let call = |tool: &str, arguments: Value| {
        let output = cli(&["call", &format!("hostile__{tool}"), "--args", &arguments.to_string(), "--json"]);
        assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stderr), log_text());
        let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
        serde_json::from_str::<Value>(reply["content"][0]["text"].as_str().unwrap()).unwrap()
    };
    let home = state.join("servers/hostile");
    let who = call("whoami", json!({}));
    assert_eq!(who["home"], home.display().to_string(), "{who}");
    assert_eq!(who["cache"], home.join(".cache").display().to_string(), "{who}");
    let meta = std::fs::metadata(&home).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), who["uid"].as_u64().unwrap() as u32, "owned by the uid it runs as");
    // It writes in its home; the store beside it stays hidden, and so does the directory.
    let mark = home.join(".cache/mark");
    let report = call("attack", json!({"write": [mark], "read": [state.join("catalog.db")], "run": [["ls", state.display().to_string()]]}));
    assert!(report["process"][format!("write {}", mark.display())].as_str().unwrap().starts_with("reached"), "{report}");
    assert!(report["process"][format!("read {}", state.join("catalog.db").display())].as_str().unwrap().starts_with("blocked"), "{report}");
    // At most the way to its home: nothing of the state directory itself.
    let listed = report["process"][format!("run ls {}", state.display())].as_str().unwrap();
    assert!(listed.starts_with("blocked") || listed.ends_with(": servers"), "{report}");
    // Restarted: its home is still there, with what it wrote.
    let restarted = cli(&["restart", "hostile"]);
    assert!(restarted.status.success(), "{}", String::from_utf8_lossy(&restarted.stderr));
    eventually("ready again", async || {
        let listed: Value = serde_json::from_slice(&cli(&["servers", "--json"]).stdout).ok()?;
        let server = listed.as_array()?.iter().find(|server| server["name"] == "hostile")?.clone();
        (server["state"] == "ready" && server["restarts"].as_u64() >= Some(1)).then_some(())
    })
    .await;
    let report = call("attack", json!({"read": [mark]}));
    assert!(report["process"][format!("read {}", mark.display())].as_str().unwrap().starts_with("reached"), "{report}");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log_text());
}

/// A server whose home cannot be made (here a file stands where its directory goes; a full
/// disk or a directory the daemon may not write end the same way) fails with that reason, named
/// with the path, and is not retried in a loop; its neighbour starts and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_that_cannot_be_made_fails_its_server_alone_and_says_why() {
    let dir = TestDir::new();
    std::fs::create_dir_all(dir.path("servers")).unwrap();
    std::fs::write(dir.path("servers/homeless"), "not a directory").unwrap();
    let app = start(dir.config(&format!("{}{}", hostile_table("homeless", ""), hostile_table("neighbour", "")))).await;
    let view = wait_for_server(app.registry(), "homeless", "failed", |v| v.state() == ServerState::Failed).await;
    let error = view.last_error().map(str::to_owned).unwrap_or_default();
    assert!(error.contains("cannot make its home") && error.contains(&dir.path("servers/homeless").display().to_string()), "{error}");
    wait_for_server(app.registry(), "neighbour", "ready", |v| v.state() == ServerState::Ready).await;
    let mut grpc = client(&app).await;
    let request = pb::CallToolRequest { qualified_name: "neighbour__whoami".into(), arguments_json: "{}".into(), ..Default::default() };
    assert!(!grpc.call_tool(request).await.unwrap().into_inner().is_error);
    app.shutdown().await;
}

/// The sandbox processes (helper and init: the init is the helper's clone) of the server whose
/// home is `home`: each one's program and the memory it holds privately (kB).
fn sandbox_processes(home: &Path) -> Vec<(String, u64)> {
    let home = home.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let argv: Vec<String> = cmdline.split(|byte| *byte == 0).map(|arg| String::from_utf8_lossy(arg).into_owned()).collect();
        if argv.get(1).map(String::as_str) != Some("__sandbox") || !argv.get(2).is_some_and(|plan| plan.contains(&home)) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let anon = status
            .lines()
            .find_map(|line| line.strip_prefix("RssAnon:"))
            .and_then(|kb| kb.trim().trim_end_matches(" kB").trim().parse().ok());
        found.push((argv[0].clone(), anon.unwrap_or(u64::MAX)));
    }
    found
}

/// A sandboxed server runs in `toolhost-sandbox` (the sandbox's code alone, beside toolhost),
/// whose two processes hold little memory of their own; a `toolhost-sandbox` of another build
/// is never run (the plan they exchange may differ): the daemon runs `toolhost __sandbox`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_run_in_the_small_helper_of_the_same_build_only() {
    let dir = TestDir::new();
    let app = start(dir.config(&hostile_table("small", ""))).await;
    wait_for_server(app.registry(), "small", "ready", |v| v.state() == ServerState::Ready).await;
    let processes = sandbox_processes(&dir.path("servers/small"));
    assert_eq!(processes.len(), 2, "the helper and the init: {processes:?}");
    for (program, anon_kb) in &processes {
        assert!(program.ends_with("/toolhost-sandbox"), "{processes:?}");
        // The goal (0.5 MB a sandbox, both processes) is measured in BENCHMARKS.md; here, that
        // the full binary's 2 MB of relocated data is not paid again.
        assert!(*anon_kb < 1024, "{processes:?}");
    }
    app.shutdown().await;

    // Beside a toolhost, a toolhost-sandbox that answers for another build.
    let elsewhere = TestDir::new();
    std::os::unix::fs::symlink(TOOLHOST, elsewhere.path("toolhost")).unwrap();
    let stranger = elsewhere.path("toolhost-sandbox");
    std::fs::write(&stranger, "#!/bin/sh\necho 0.0.1-0000000000000000\n").unwrap();
    std::fs::set_permissions(&stranger, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let options = toolhost::app::RuntimeOptions {
        reaper_program: Some(elsewhere.path("toolhost")),
        notifier: toolhost::systemd::Notifier::disabled(),
    };
    let other = TestDir::new();
    let app = toolhost::app::App::start_with(other.config(&hostile_table("skewed", "")), options).await.unwrap();
    wait_for_server(app.registry(), "skewed", "ready", |v| v.state() == ServerState::Ready).await;
    let processes = sandbox_processes(&other.path("servers/skewed"));
    assert!(processes.len() == 2 && processes.iter().all(|(program, _)| program.ends_with("/toolhost")), "{processes:?}");
    app.shutdown().await;
}

/// The CPU limit is the whole sandbox's: three processes that each stay under `cpu_time` but
/// together pass it stop the sandbox, the limit named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_limit_counts_every_process_of_the_sandbox_together() {
    let dir = TestDir::new();
    let limits = "limits = { cpu_time = \"3s\" }\nrestart = { initial_backoff = \"30s\", max_backoff = \"30s\" }";
    let table = hostile_table("spinner", limits).replace("restart = { initial_backoff = \"50ms\", max_backoff = \"200ms\" }\n", "");
    let app = start(dir.config(&table)).await;
    wait_for_server(app.registry(), "spinner", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let call = pb::CallToolRequest {
        qualified_name: "spinner__runaway".into(),
        arguments_json: json!({"kind": "cpu"}).to_string(),
        ..Default::default()
    };
    let failed = client.call_tool(call).await.expect_err("stopped under the call");
    assert_eq!(error_info(&failed).0, "OUTCOME_UNKNOWN", "{failed:?}");
    let view = wait_for_server(app.registry(), "spinner", "stopped at its CPU limit", |v| {
        v.last_error().is_some_and(|e| e.contains("the cpu limit"))
    })
    .await;
    let error = view.last_error().map(str::to_owned).unwrap();
    assert!(error.contains("together"), "the sum, not one process's own limit: {error}");
    assert_eq!(view.sandbox().and_then(|s| s.last_limit).map(|k| k.label()), Some("cpu"));
    app.shutdown().await;
}

/// Context switches of a process so far, all its threads (each sleep it wakes from counts one).
fn switches(pid: i32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .flatten()
        .map(|task| std::fs::read_to_string(task.path().join("status")).unwrap_or_default())
        .flat_map(|status| {
            status
                .lines()
                .filter_map(|line| {
                    line.strip_prefix("voluntary_ctxt_switches:").or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                })
                .filter_map(|n| n.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Every descendant of `root`, from the kernel's lists of each thread's children.
fn descendants(root: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            let children: Vec<i32> = children.split_whitespace().filter_map(|child| child.parse().ok()).collect();
            found.extend(&children);
            pending.extend(children);
        }
    }
    found
}

/// Idle sandboxes cost nothing: once their servers are ready and still, no sandbox process
/// (helper, init, server) wakes at all, and the daemon wakes only for its one watch over all
/// of them, however many there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sandboxes_leave_the_cpu_alone() {
    const SERVERS: usize = 12;
    const WINDOW: Duration = Duration::from_secs(4);
    let dir = TestDir::new();
    let tables: Vec<String> =
        (0..SERVERS).map(|n| server_table(&format!("idle{n}"), &dir.script(&format!("idle{n}"), json!({})), "")).collect();
    let daemon = crate::daemon::Daemon::start(&dir, &tables.join("\n"), &[]);
    daemon
        .wait_servers("all ready", |servers| servers.len() == SERVERS && servers.iter().all(|s| s.state == pb::ServerState::Ready as i32))
        .await;
    let daemon_pid = daemon.pid().as_raw();
    // The orphan guard (`__reap`) waits on a pipe; everything else below the daemon is a sandbox's.
    let sandboxes = || -> Vec<i32> {
        descendants(daemon_pid)
            .into_iter()
            .filter(|pid| !std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default().windows(6).any(|w| w == b"__reap"))
            .collect()
    };
    assert_eq!(sandboxes().len(), SERVERS * 3, "a helper, an init and a server each");
    // Settled: every init has had its last look after its server's start (a look is 50 ms
    // after the last activity it saw), and no sandbox process has woken for a whole window.
    let mut window = pace(WINDOW);
    window.tick().await;
    let mut before = (switches(daemon_pid), sandboxes().iter().map(|pid| switches(*pid)).sum::<u64>());
    let mut rounds = 0;
    let (daemon_woke, sandboxes_woke) = loop {
        window.tick().await;
        let after = (switches(daemon_pid), sandboxes().iter().map(|pid| switches(*pid)).sum::<u64>());
        let woke = (after.0 - before.0, after.1 - before.1);
        rounds += 1;
        if woke.1 == 0 || rounds == 3 {
            break woke;
        }
        before = after;
    };
    assert_eq!(sandboxes_woke, 0, "context switches of {SERVERS} idle sandboxes' processes in {WINDOW:?}");
    // The daemon's own: its watch once a second, its housekeeping timers; nothing per server
    // (12 servers looked at every 50 ms would be about a thousand).
    assert!(daemon_woke < 40, "the daemon's context switches in {WINDOW:?}: {daemon_woke}");
}

/// A server replaces its home's XDG directories with links to places of the host's (here
/// directories the test owns; in the attack, `/etc` or the store's directory). At its next start
/// the daemon makes and gives away nothing through them: the targets keep their owner, nothing
/// is made inside them, and the server still starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_a_server_plants_in_its_home_are_never_followed_by_the_daemon() {
    use std::os::unix::fs::MetadataExt;
    let dir = TestDir::new();
    let victims: Vec<_> = ["cache", "config", "local"].iter().map(|name| dir.path(&format!("victim-{name}"))).collect();
    for victim in &victims {
        std::fs::create_dir(victim).unwrap();
    }
    let app = start(dir.config(&hostile_table("planter", ""))).await;
    wait_for_server(app.registry(), "planter", "ready", |v| v.state() == ServerState::Ready).await;
    let plant = format!(
        "cd \"$HOME\" && rm -rf .cache .config .local && ln -s {} .cache && ln -s {} .config && ln -s {} .local",
        victims[0].display(),
        victims[1].display(),
        victims[2].display()
    );
    let results = attack(&app, "planter", &json!({"run": [["/bin/sh", "-c", plant]]})).await;
    let planted = results.iter().filter(|(probe, _)| probe.starts_with("process: "));
    assert!(planted.into_iter().all(|(_, result)| result.starts_with("reached")), "{results:#?}");
    let mut grpc = client(&app).await;
    grpc.restart_server(pb::RestartServerRequest { server: "planter".into() }).await.unwrap();
    wait_for_server(app.registry(), "planter", "ready again", |v| v.state() == ServerState::Ready && v.num_restarts() >= 1).await;
    let ours = nix::unistd::getuid().as_raw();
    for victim in &victims {
        assert_eq!(std::fs::metadata(victim).unwrap().uid(), ours, "{} was given away", victim.display());
        let made: Vec<_> = std::fs::read_dir(victim).unwrap().flatten().map(|entry| entry.file_name()).collect();
        assert!(made.is_empty(), "the daemon made {made:?} inside {}", victim.display());
    }
    let home = dir.path("servers/planter");
    assert!(std::fs::symlink_metadata(home.join(".cache")).unwrap().file_type().is_symlink(), "the link is left as the server made it");
    app.shutdown().await;
}

/// The store (and so the servers' homes beside it) in a directory a server is granted: the
/// server still sees its own home, never a sibling's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_of_the_stores_directory_never_shows_a_siblings_home() {
    let dir = TestDir::new();
    let data = dir.path("data");
    std::fs::create_dir(&data).unwrap();
    open_to_all(&data);
    let servers =
        format!("{}{}", hostile_table("nosy", &format!("read = [{:?}]", data.display().to_string())), hostile_table("sibling", ""));
    let text = format!("[store]\npath = \"data/catalog.db\"\n\n[grpc]\nlisten = [\"127.0.0.1:0\", \"unix:toolhost.sock\"]\n\n{servers}");
    let path = dir.path("toolhost.toml");
    std::fs::write(&path, &text).unwrap();
    let app = start(toolhost::config::Config::load(&path).unwrap()).await;
    for name in ["nosy", "sibling"] {
        wait_for_server(app.registry(), name, "ready", |v| v.state() == ServerState::Ready).await;
    }
    let secret = data.join("servers/sibling/.npmrc");
    std::fs::write(&secret, "//registry.example/:_authToken=sibling-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let own = data.join("servers/nosy/.cache/mine");
    let report = attack(&app, "nosy", &json!({"read": [secret], "write": [own]})).await;
    let result = |probe: String| report.get(&format!("process: {probe}")).unwrap_or_else(|| panic!("no {probe}: {report:#?}")).clone();
    assert!(result(format!("read {}", secret.display())).starts_with("blocked"), "{report:#?}");
    assert!(result(format!("write {}", own.display())).starts_with("reached"), "its own home stays writable: {report:#?}");
    app.shutdown().await;
}

/// A write grant of the directory that holds the store's directory: the server could rename the
/// store's directory (its masks are mounts on the places inside, which move with it), then read
/// a sibling's home and, under an unprivileged daemon, the signing key. The grant is refused at
/// its start, naming the directory and the fix; its neighbour serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_grant_above_the_stores_directory_is_refused_and_named() {
    let dir = TestDir::new();
    let above = dir.path("w");
    std::fs::create_dir_all(above.join("st")).unwrap();
    open_to_all(&above);
    let servers =
        format!("{}{}", hostile_table("mover", &format!("write = [{:?}]", above.display().to_string())), hostile_table("neighbour", ""));
    let text = format!("[store]\npath = \"w/st/catalog.db\"\n\n[grpc]\nlisten = [\"127.0.0.1:0\", \"unix:toolhost.sock\"]\n\n{servers}");
    let path = dir.path("toolhost.toml");
    std::fs::write(&path, &text).unwrap();
    let app = start(toolhost::config::Config::load(&path).unwrap()).await;
    let failed = wait_for_server(app.registry(), "mover", "failed", |v| v.state() == ServerState::Failed).await;
    let error = failed.last_error().map(str::to_owned).unwrap_or_default();
    let store_dir = std::fs::canonicalize(above.join("st")).unwrap();
    assert!(error.contains("cannot be granted writable") && error.contains(&store_dir.display().to_string()), "{error}");
    wait_for_server(app.registry(), "neighbour", "ready", |v| v.state() == ServerState::Ready).await;
    app.shutdown().await;
}
