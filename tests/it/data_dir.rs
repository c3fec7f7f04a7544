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
    let before = app.registry().server(server).map(|view| view.num_restarts()).unwrap_or(0);
    client(app).await.restart_server(pb::RestartServerRequest { server: server.into() }).await.unwrap();
    wait_for_server(app.registry(), server, "restarted and ready", |v| v.num_restarts() > before && v.state() == ServerState::Ready).await;
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
            if view.state() == ServerState::Ready { Ok(()) } else { Err(format!("{:?}: {:?}", view.state(), view.last_error())) }
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
        wait_for_server(app.registry(), server, "ready", |v| v.state() == ServerState::Ready).await;
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

/// A server that can write where its data directory lies swaps a parent for a link: at its next
/// start the daemon does not follow it, makes and gives away nothing where it points, and says
/// so. (Another server's write grant or data directory is never where one lies: such a file is
/// refused, below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_on_the_way_to_a_data_directory_are_never_followed_by_the_daemon() {
    let dir = TestDir::new();
    let shared = dir.path("shared");
    // Its own lies two directories below what it may write: the link goes on the way, not last.
    std::fs::create_dir_all(shared.join("p/q")).unwrap();
    theirs(&shared);
    let victims: Vec<PathBuf> = ["parent"].iter().map(|name| dir.path(&format!("victim-{name}"))).collect();
    for victim in &victims {
        std::fs::create_dir(victim).unwrap();
    }
    let path = |p: &Path| p.display().to_string();
    let servers = hostile_table("planter", &format!("write = [{:?}]\ndata = {:?}", path(&shared), path(&shared.join("p/q/data"))));
    let app = start(dir.config(&servers)).await;
    wait_for_server(app.registry(), "planter", "ready", |v| v.state() == ServerState::Ready).await;
    assert!(shared.join("p/q/data").is_dir());
    // (Its data directory itself is a mount in its sandbox: it cannot be moved for a link.)
    let plant = format!("cd {} && mv p p-moved && ln -s {} p", path(&shared), path(&victims[0]));
    let results = attack(&app, "planter", &json!({"run": [["/bin/sh", "-c", plant]]})).await;
    let planted = results.iter().filter(|(probe, _)| probe.starts_with("process: "));
    assert!(planted.into_iter().all(|(_, result)| result.starts_with("reached")), "{results:#?}");
    let mut grpc = client(&app).await;
    grpc.restart_server(pb::RestartServerRequest { server: "planter".into() }).await.unwrap();
    for server in ["planter"] {
        let view = wait_for_server(app.registry(), server, "refused its data directory", |v| {
            v.last_error().is_some_and(|error| error.contains("data directory") && error.contains("symbolic link"))
        })
        .await;
        assert_ne!(view.state(), ServerState::Ready, "{server}: {:?}", view.last_error());
    }
    let ours = nix::unistd::getuid().as_raw();
    for victim in &victims {
        let meta = std::fs::metadata(victim).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (ours, 0o755), "{} was given away", victim.display());
        let made: Vec<_> = std::fs::read_dir(victim).unwrap().flatten().map(|entry| entry.file_name()).collect();
        assert!(made.is_empty(), "the daemon made {made:?} inside {}", victim.display());
    }
    assert!(std::fs::symlink_metadata(shared.join("p")).unwrap().file_type().is_symlink(), "the link is left as planted");
    app.shutdown().await;
}

/// The output of `toolhost check-config` on `dir`'s configuration, stdout and stderr.
fn check_config(dir: &TestDir) -> (Option<i32>, String) {
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["check-config", "--config", dir.path("toolhost.toml").to_str().unwrap()])
        .output()
        .unwrap();
    (checked.status.code(), format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr)))
}

/// An operator's `data` that is already there: somebody else's directory holding files is never
/// taken over (the server does not start, the directory and its file stay as they were, the
/// error names it and the fix); an empty one is given to the server; a missing one is made,
/// also behind the operator's own link. `check-config` says beforehand what each start does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_directory_is_never_taken_over_and_check_config_says_what_each_start_does() {
    use std::os::unix::fs::PermissionsExt;
    if !requires_root("for a directory of somebody else's the daemon could take") {
        return;
    }
    let dir = TestDir::new();
    // Its data directories apart from the scripts' directory, which every server here writes.
    let places = TestDir::new();
    let kept = places.path("kept");
    std::fs::create_dir(&kept).unwrap();
    std::fs::write(kept.join("secret"), "root's").unwrap();
    std::fs::set_permissions(kept.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o700)).unwrap();
    let empty = places.path("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::create_dir(places.path("real")).unwrap();
    std::os::unix::fs::symlink(places.path("real"), places.path("via")).unwrap();
    let env = "env = { MEMORY_FILE_PATH = \"${data}/memory.jsonl\" }";
    let table = |name: &str, data: &Path| {
        let script = dir.script(name, json!({"append_to_env_file": "MEMORY_FILE_PATH"}));
        let extra =
            format!("data = {:?}\n{env}\nrestart = {{ initial_backoff = \"10s\", max_backoff = \"10s\" }}", data.display().to_string());
        server_table(name, &script, &extra)
    };
    let tables = [table("taker", &kept), table("empty", &empty), table("linked", &places.path("via/data"))].join("\n");
    let config = dir.config(&tables);
    let (code, checked) = check_config(&dir);
    assert_eq!(code, Some(0), "{checked}");
    let line = |server: &str| checked.lines().filter(|line| line.contains(server)).collect::<Vec<_>>().join("\n");
    assert!(line("taker").contains("never takes over") && line("taker").contains("it will not start"), "{checked}");
    assert!(line("empty").contains("given to the server at its start"), "{checked}");
    let real = std::fs::canonicalize(places.path("real")).unwrap().join("data");
    assert!(line("linked").contains(&format!("is {}, not there yet: made for the server", real.display())), "{checked}");
    assert!(!checked.contains("does not exist") && !checked.contains("symbolic link"), "{checked}");

    let app = start(config).await;
    let view = wait_for_server(app.registry(), "taker", "refused its data directory", |v| {
        v.last_error().is_some_and(|error| error.contains("never takes over"))
    })
    .await;
    let error = view.last_error().map(str::to_owned).unwrap_or_default();
    assert!(error.contains(&kept.display().to_string()) && error.contains("chown -R"), "{error}");
    assert_ne!(view.state(), ServerState::Ready);
    let meta = std::fs::metadata(&kept).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o700), "taken over");
    assert_eq!(std::fs::metadata(kept.join("secret")).unwrap().uid(), 0);
    assert_eq!(std::fs::read_to_string(kept.join("secret")).unwrap(), "root's");
    for server in ["empty", "linked"] {
        wait_for_server(app.registry(), server, "ready", |v| v.state() == ServerState::Ready).await;
    }
    assert_eq!(std::fs::metadata(&empty).unwrap().uid(), server_uid(), "an empty one is given");
    assert_eq!(std::fs::read_to_string(empty.join("memory.jsonl")).unwrap(), "launch 1\n");
    assert_eq!(std::fs::read_to_string(real.join("memory.jsonl")).unwrap(), "launch 1\n", "behind the operator's link");
    app.shutdown().await;
}

/// Places no data directory may be are refused when the file is read, naming the key: a home
/// `/etc/passwd` names outside `/home`, one inside a home's dot-directory, one above a home,
/// the kernel's `/proc`, another server's data directory or write grant.
#[test]
fn a_home_the_systems_places_and_another_servers_place_are_never_a_data_directory() {
    let dir = TestDir::new();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let home = passwd
        .lines()
        .filter_map(|line| line.split(':').nth(5))
        .find(|home| home.starts_with("/var/lib/") || home.starts_with("/var/spool/"));
    let mut refused = vec!["/proc/self".to_owned(), "/root/.ssh/keys".to_owned(), "/etc/ssh".to_owned()];
    refused.extend(home.map(str::to_owned));
    for data in refused {
        std::fs::write(dir.path("toolhost.toml"), format!("[servers.m]\ncommand = \"npx\"\ndata = {data:?}\n")).unwrap();
        let (code, said) = check_config(&dir);
        assert_eq!(code, Some(64), "{data}: {said}");
        assert!(said.contains("servers.m.data"), "{data}: {said}");
    }
    let both = format!(
        "[servers.a]\ncommand = \"npx\"\nwrite = [{:?}]\n\n[servers.b]\ncommand = \"npx\"\nsandbox = \"off\"\ndata = {:?}\n",
        dir.path("x").display().to_string(),
        dir.path("x/a").display().to_string()
    );
    std::fs::write(dir.path("toolhost.toml"), both).unwrap();
    let (code, said) = check_config(&dir);
    assert_eq!(code, Some(64), "{said}");
    assert!(said.contains("servers.b.data") && said.contains("servers.a.write"), "{said}");
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
        v.last_error().is_some_and(|error| error.contains("exited with status 2"))
    })
    .await;
    let error = view.last_error().map(str::to_owned).unwrap_or_default();
    let grant = format!("write = [{:?}]", readable.display().to_string());
    assert!(error.contains(&grant) && error.contains("data = true"), "{error}");
    assert!(!target.exists());
    app.shutdown().await;
}
