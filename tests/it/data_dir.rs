//! Where a server writes, by design: its `write` grants and its `data` directory (`data = true`
//! beside the store, or a path of the operator's), offered to its `env` as `${data}`, kept across
//! restarts, never reached through a link a server planted; and a refused write answered with
//! the grant that would allow it. The README's own example runs as written.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::sandbox::{attack, hostile_table};

/// The uid a root daemon's servers run as (else the daemon's own).
fn server_uid() -> u32 {
    if is_root() { toolhost::sandbox::SANDBOX_ID } else { nix::unistd::getuid().as_raw() }
}

/// A directory servers may write, as an operator makes one: theirs.
fn theirs(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    if is_root() {
        crate::sandbox::chown_tree(path, toolhost::sandbox::SANDBOX_ID);
    }
}

/// Restarts `server` and waits until a new session of it is ready.
async fn restarted(app: &toolhost::app::App, server: &str) {
    let before = app.registry().server(server).map(|view| view.num_restarts).unwrap_or(0);
    client(app).await.restart_server(pb::RestartServerRequest { server: server.into() }).await.unwrap();
    wait_for_server(app.registry(), server, "restarted and ready", |v| v.num_restarts > before && v.state == ServerState::Ready).await;
}

/// The ```toml block of the README's "### 2." section, as written.
fn readme_section_two_toml() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme.split("\n### 2.").nth(1).expect("README has a \"### 2.\" section");
    let section = section.split("\n### ").next().unwrap_or(section);
    let block = section.split("```toml\n").nth(1).expect("§2 has a ```toml block");
    block.split("\n```").next().unwrap().to_owned()
}

/// `text`'s `[servers.*]` tables without those that reach a remote `url` (a test reaches no
/// service of a third party, and has no token for one).
fn without_remote_servers(text: &str) -> String {
    let mut kept = String::new();
    let mut table = String::new();
    let flush = |table: &mut String, kept: &mut String| {
        if !table.lines().any(|line| line.trim_start().starts_with("url")) {
            kept.push_str(table);
        }
        table.clear();
    };
    for line in text.lines() {
        if line.starts_with('[') {
            flush(&mut table, &mut kept);
        }
        table.push_str(line);
        table.push('\n');
    }
    flush(&mut table, &mut kept);
    kept
}

/// Whether npm's registry answers from here (or a proxy the servers inherit is set).
fn registry_reachable() -> bool {
    use std::net::ToSocketAddrs;
    if ["HTTPS_PROXY", "https_proxy"].iter().any(|name| std::env::var_os(name).is_some()) {
        return true;
    }
    let Ok(addresses) = ("registry.npmjs.org", 443).to_socket_addrs() else { return false };
    addresses.into_iter().any(|address| std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(5)).is_ok())
}

async fn call(app: &toolhost::app::App, tool: &str, arguments: Value) -> String {
    let request = pb::CallToolRequest { qualified_name: tool.into(), arguments_json: arguments.to_string(), ..Default::default() };
    let answer = client(app).await.call_tool(request).await.unwrap_or_else(|status| panic!("{tool}: {status:?}")).into_inner();
    assert!(!answer.is_error, "{tool}: {}", answer.content_json);
    answer.content_json
}

/// The README's §2 example, run by a daemon as written (its paths in a directory of the test's,
/// its remote server left out): the filesystem server writes in its `write` grant, the memory
/// server's graph lands in `${data}/memory.jsonl` and is there again after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_own_servers_write_their_grant_and_keep_their_data_across_a_restart() {
    if !requires("Node.js's npx (/usr/bin/npx)", Path::new("/usr/bin/npx").exists()) {
        return;
    }
    if !registry_reachable() {
        skipped("SKIPPED: the README's example fetches its servers from npm's registry (registry.npmjs.org:443), unreachable from here");
        return;
    }
    let dir = TestDir::new();
    let shared = dir.path("shared");
    theirs(&shared);
    let example = readme_section_two_toml();
    assert!(example.contains("/srv/shared") && example.contains("${data}/memory.jsonl"), "{example}");
    let servers = without_remote_servers(&example.replace("/srv/shared", &shared.display().to_string()));
    assert!(servers.contains("[servers.files]") && servers.contains("[servers.memory]") && !servers.contains("url ="), "{servers}");
    let app = start(dir.config(&servers)).await;
    for server in ["files", "memory"] {
        eventually_within(WAIT * 6, &format!("{server} fetched and ready"), async || {
            let view = app.registry().server(server).ok_or("no such server".to_owned())?;
            if view.state == ServerState::Ready { Ok(()) } else { Err(format!("{:?}: {:?}", view.state, view.last_error)) }
        })
        .await;
    }
    call(&app, "files__write_file", json!({"path": shared.join("note.txt"), "content": "written in its grant"})).await;
    assert_eq!(std::fs::read_to_string(shared.join("note.txt")).unwrap(), "written in its grant");

    let entities = json!({"entities": [{"name": "toolhost", "entityType": "project", "observations": ["keeps its data"]}]});
    call(&app, "memory__create_entities", entities).await;
    let data = dir.path("servers/memory.data");
    let memory = data.join("memory.jsonl");
    assert!(std::fs::read_to_string(&memory).unwrap_or_default().contains("keeps its data"), "{}", memory.display());
    assert_eq!(std::fs::metadata(&data).unwrap().uid(), server_uid(), "its data directory is the server's");
    restarted(&app, "memory").await;
    let graph = call(&app, "memory__read_graph", json!({})).await;
    assert!(graph.contains("keeps its data"), "{graph}");
    assert!(!dir.path("servers/memory").join("memory.jsonl").exists());
    app.shutdown().await;
}

/// `data = true`: a directory beside its home, the server's, named to it by `${data}` in its
/// env; what it writes there is there at its next start. Without the sandbox too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_data_directory_is_made_for_it_named_in_its_env_and_kept_across_restarts() {
    let dir = TestDir::new();
    let env = "env = { MEMORY_FILE_PATH = \"${data}/memory.jsonl\" }";
    let tables = [
        server_table("keeper", &dir.script("keeper", json!({"append_to_env_file": "MEMORY_FILE_PATH"})), &format!("data = true\n{env}")),
        server_table(
            "bare",
            &dir.script("bare", json!({"append_to_env_file": "MEMORY_FILE_PATH"})),
            &format!("data = true\nsandbox = \"off\"\n{env}"),
        ),
    ];
    let app = start(dir.config(&tables.join("\n"))).await;
    for server in ["keeper", "bare"] {
        wait_for_server(app.registry(), server, "ready", |v| v.state == ServerState::Ready).await;
        restarted(&app, server).await;
        let file = dir.path(&format!("servers/{server}.data/memory.jsonl"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "launch 1\nlaunch 2\n", "{server}: {}", file.display());
    }
    assert_eq!(std::fs::metadata(dir.path("servers/keeper.data")).unwrap().uid(), server_uid());
    assert_eq!(
        std::fs::metadata(dir.path("servers/bare.data")).unwrap().uid(),
        nix::unistd::getuid().as_raw(),
        "unconfined, it is the daemon"
    );
    app.shutdown().await;
}

/// A server that can write where another's data directory goes (or where its own lies below)
/// swaps a parent for a link, and plants a link where the directory itself goes: at their next
/// start the daemon follows neither, makes and gives away nothing where they point, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_on_the_way_to_a_data_directory_are_never_followed_by_the_daemon() {
    let dir = TestDir::new();
    let shared = dir.path("shared");
    // Its own lies two directories below what it may write: the link goes on the way, not last.
    std::fs::create_dir_all(shared.join("p/q")).unwrap();
    theirs(&shared);
    let victims: Vec<PathBuf> = ["parent", "position"].iter().map(|name| dir.path(&format!("victim-{name}"))).collect();
    for victim in &victims {
        std::fs::create_dir(victim).unwrap();
    }
    let path = |p: &Path| p.display().to_string();
    let servers = format!(
        "{}{}",
        hostile_table("planter", &format!("write = [{:?}]\ndata = {:?}", path(&shared), path(&shared.join("p/q/data")))),
        hostile_table("victim", &format!("data = {:?}", path(&shared.join("d")))),
    );
    let app = start(dir.config(&servers)).await;
    for server in ["planter", "victim"] {
        wait_for_server(app.registry(), server, "ready", |v| v.state == ServerState::Ready).await;
    }
    assert!(shared.join("d").is_dir() && shared.join("p/q/data").is_dir());
    let plant =
        format!("cd {} && mv p p-moved && ln -s {} p && mv d d-moved && ln -s {} d", path(&shared), path(&victims[0]), path(&victims[1]));
    let results = attack(&app, "planter", &json!({"run": [["/bin/sh", "-c", plant]]})).await;
    let planted = results.iter().filter(|(probe, _)| probe.starts_with("process: "));
    assert!(planted.into_iter().all(|(_, result)| result.starts_with("reached")), "{results:#?}");
    let mut grpc = client(&app).await;
    for server in ["planter", "victim"] {
        grpc.restart_server(pb::RestartServerRequest { server: server.into() }).await.unwrap();
    }
    for server in ["planter", "victim"] {
        let view = wait_for_server(app.registry(), server, "refused its data directory", |v| {
            v.last_error.as_deref().is_some_and(|error| error.contains("data directory") && error.contains("symbolic link"))
        })
        .await;
        assert_ne!(view.state, ServerState::Ready, "{server}: {:?}", view.last_error);
    }
    let ours = nix::unistd::getuid().as_raw();
    for victim in &victims {
        let meta = std::fs::metadata(victim).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (ours, 0o755), "{} was given away", victim.display());
        let made: Vec<_> = std::fs::read_dir(victim).unwrap().flatten().map(|entry| entry.file_name()).collect();
        assert!(made.is_empty(), "the daemon made {made:?} inside {}", victim.display());
    }
    assert!(std::fs::symlink_metadata(shared.join("d")).unwrap().file_type().is_symlink(), "the link is left as planted");
    app.shutdown().await;
}

/// A server that may read a directory but not write it, and tries: its failure names the grant
/// that would allow it, that directory and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_is_reported_with_the_grant_that_would_allow_it() {
    let dir = TestDir::new();
    let elsewhere = TestDir::new();
    let readable = elsewhere.path("reports");
    std::fs::create_dir(&readable).unwrap();
    let target = readable.join("today.txt");
    let script = dir.script("writer", json!({"write_at_start": target}));
    // The directory is an argument: shown to it, read-only.
    let table = format!(
        "[servers.writer]\ncommand = {:?}\nargs = [{:?}, {:?}]\nwrite = [{:?}]\nrestart = {{ initial_backoff = \"10s\", max_backoff = \"10s\" }}\n",
        scripted_server(),
        script.display().to_string(),
        readable.display().to_string(),
        dir.path("").display().to_string(),
    );
    let app = start(dir.config(&table)).await;
    let view = wait_for_server(app.registry(), "writer", "its failure explained", |v| {
        v.last_error.as_deref().is_some_and(|error| error.contains("exited with status 2"))
    })
    .await;
    let error = view.last_error.clone().unwrap_or_default();
    let grant = format!("write = [{:?}]", readable.display().to_string());
    assert!(error.contains(&grant) && error.contains("data = true"), "{error}");
    assert!(!target.exists());
    app.shutdown().await;
}
