//! A package launcher keeps its registry under an allow-list (issue 52): `uvx` and `npx`
//! entries that narrow their network to `api.example.com` still fetch their package through
//! the daemon's proxy, become ready and list their tools; `check-config` and `toolhost servers`
//! say what each may reach and why. With `registry = false` the index is refused, and the
//! failure names the refused host and the fix. Real packages, pinned; the registries (and
//! loopback) are the one network these machines reach: `api.example.com` need not resolve.

use std::path::PathBuf;
use std::process::Command;

use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

/// `npx` as the daemon's PATH finds it: Debian's Node.js.
const NPX: &str = "/usr/bin/npx";
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";
/// The fetch server of the same release as the time server `real_packages` runs.
const FETCH: &str = "mcp-server-fetch==2026.10.19";
const ALLOW: &str = "network = { allow = [\"api.example.com\"] }";

fn uvx() -> Option<PathBuf> {
    let root = std::env::var_os("TOOLHOST_TEST_TOOLS").map(PathBuf::from)?;
    Some(root.join("venv/bin/uvx")).filter(|path| path.exists())
}

fn toolhost(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost")).args(args).env_remove("TOOLHOST_TOKEN").output().expect("run toolhost");
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Waits until `server` is ready: its first start fetches its package (seconds to a minute).
async fn fetched_and_ready(app: &toolhost::app::App, server: &str) -> std::sync::Arc<toolhost::registry::ServerView> {
    eventually_within(WAIT * 6, &format!("{server} fetched and ready"), async || {
        let view = app.registry().server(server).ok_or("no such server".to_owned())?;
        if view.state() == ServerState::Ready { Ok(view) } else { Err(format!("{:?}: {:?}", view.state(), view.last_error())) }
    })
    .await
}

/// What `toolhost servers` (gRPC, as the CLI reads it) says `server` reaches: `host (why)`.
async fn reaches(app: &toolhost::app::App, server: &str) -> (Vec<String>, pb::Sandbox) {
    let servers = client(app).await.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    let sandbox = servers.into_iter().find(|s| s.name == server).and_then(|s| s.sandbox).expect("a sandboxed server");
    (sandbox.reaches.iter().map(|reach| format!("{} ({})", reach.host, reach.why)).collect(), sandbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uvx_with_an_allow_list_still_reaches_its_index_and_lists_its_tools() {
    let Some(uvx) = uvx() else {
        assert!(requires("uv (installed into .tools/venv by the test command)", false));
        return;
    };
    let dir = TestDir::new();
    let servers =
        format!("[servers.fetch]\ncommand = {:?}\nargs = [\"{FETCH}\"]\n{ALLOW}\nrequest_timeout = \"120s\"\n", uvx.display().to_string());
    let app = start(dir.config(&servers)).await;
    let view = fetched_and_ready(&app, "fetch").await;
    assert!(tool_names(&view).iter().any(|tool| tool == "fetch"), "{:?}", tool_names(&view));
    assert!(view.shared().egress.tunnels.load(std::sync::atomic::Ordering::Relaxed) > 0, "uv fetched through the proxy");
    let (said, _) = reaches(&app, "fetch").await;
    assert_eq!(
        said,
        [
            "api.example.com:443 (network.allow)",
            "pypi.org:443 (uvx's registry; registry = false to refuse)",
            "files.pythonhosted.org:443 (uvx's registry; registry = false to refuse)"
        ]
    );
    app.shutdown().await;
    // check-config says the same, before anything runs, and has nothing to warn about.
    let checked = toolhost(&["check-config", "--config", dir.path("toolhost.toml").to_str().unwrap()]);
    assert!(
        checked.contains("fetch: reaches: api.example.com:443 (network.allow), pypi.org:443 (uvx's registry; registry = false to refuse)"),
        "{checked}"
    );
    assert!(!checked.contains("warning"), "{checked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uvx_whose_entry_refuses_its_registry_fails_naming_the_refused_index_and_the_fix() {
    let Some(uvx) = uvx() else {
        assert!(requires("uv (installed into .tools/venv by the test command)", false));
        return;
    };
    let dir = TestDir::new();
    let servers = format!(
        "[servers.fetch]\ncommand = {:?}\nargs = [\"{FETCH}\"]\n{ALLOW}\nregistry = false\nrequest_timeout = \"120s\"\n",
        uvx.display().to_string()
    );
    let app = start(dir.config(&servers)).await;
    // Its own home's cache is empty: uv asks for its index, which the proxy refuses.
    let error = eventually_within(WAIT * 6, "fetch failed naming the index and the fix", async || {
        let view = app.registry().server("fetch").ok_or("no such server".to_owned())?;
        let error = view.last_error().map(str::to_owned).unwrap_or_default();
        if error.contains("pypi.org:443") && error.contains("remove `registry = false`") {
            Ok(error)
        } else {
            Err(format!("{:?}: {error}", view.state()))
        }
    })
    .await;
    assert!(error.contains("uvx's registry"), "{error}");
    assert_ne!(app.registry().server("fetch").unwrap().state(), ServerState::Ready);
    let (said, sandbox) = reaches(&app, "fetch").await;
    assert_eq!(said, ["api.example.com:443 (network.allow)"], "its registry is refused");
    assert_eq!(sandbox.last_denied, "pypi.org:443");
    assert!(sandbox.last_denied_fix.contains("remove `registry = false`"), "{}", sandbox.last_denied_fix);
    // `toolhost servers NAME` shows the refused host and its fix.
    let detail = toolhost(&["servers", "fetch", "--addr", &cli_addr(&app)]);
    assert!(detail.contains("refused   pypi.org:443") && detail.contains("fix       pypi.org:443 is uvx's registry"), "{detail}");
    app.shutdown().await;
    // check-config warns before it runs: nothing else allows its registry.
    let checked = toolhost(&["check-config", "--config", dir.path("toolhost.toml").to_str().unwrap()]);
    assert!(checked.contains("fetch: reaches: api.example.com:443 (network.allow); not pypi.org:443 (uvx's registry"), "{checked}");
    assert!(
        checked.contains("warning: fetch: uvx fetches its package from pypi.org:443") && checked.contains("remove `registry = false`"),
        "{checked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npx_with_an_allow_list_still_reaches_its_registry_and_lists_its_tools() {
    if !requires("Node.js's npx (/usr/bin/npx)", std::path::Path::new(NPX).exists()) {
        return;
    }
    let dir = TestDir::new();
    let shared = dir.path("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let servers = format!(
        "[servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"{FILESYSTEM}\", {:?}]\n{ALLOW}\nrequest_timeout = \"120s\"\n",
        shared.display().to_string()
    );
    let app = start(dir.config(&servers)).await;
    let view = fetched_and_ready(&app, "files").await;
    assert!(tool_names(&view).iter().any(|tool| tool == "read_text_file"), "{:?}", tool_names(&view));
    let (said, _) = reaches(&app, "files").await;
    assert_eq!(said, ["api.example.com:443 (network.allow)", "registry.npmjs.org:443 (npx's registry; registry = false to refuse)"]);
    app.shutdown().await;
}

/// A hostile launcher (a script called `npx`: the entry names it, so it gets its registry)
/// asks its proxy for a public host that is not its registry, then for `127.0.0.1:22`, and
/// prints what the proxy answered. The public host's fix speaks of the allow-list the entry
/// does not have (`network = { allow = [...] }`); the loopback address's advises nothing: not
/// in the proxy's answer, the log, the last error or `toolhost servers NAME`. The server
/// chooses the host it asks for, never the operator's advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_launcher_never_writes_the_operators_fix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new();
    let bin = dir.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let npx = bin.join("npx");
    std::fs::write(
        &npx,
        r#"#!/usr/bin/python3
import os, socket, sys
proxy = os.environ.get("HTTPS_PROXY", "")
host, port = proxy.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)
for target in ["example.org:443", "127.0.0.1:22"]:
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    answer = b""
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            break
        answer += chunk
    sys.stderr.write("proxy answered: " + answer.decode(errors="replace").split("\r\n\r\n", 1)[-1].strip() + "\n")
    sys.stderr.flush()
sys.exit(1)
"#,
    )
    .unwrap();
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n[servers.files]\ncommand = {:?}\n\
             args = [\"-y\", \"@scope/server\"]\n",
            npx.display().to_string()
        ),
    )
    .unwrap();
    let (mut daemon, mut grpc) = crate::telemetry::serve(&config, dir.path("toolhost.sock"), &[]).await;
    let log = || std::fs::read_to_string(config.with_extension("daemon.log")).unwrap_or_default();
    // Its start fails with both answers in its stderr and the last refusal named.
    let (error, sandbox) = eventually("the start fails naming both refusals", async || {
        let servers = grpc.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
        let server = servers.into_iter().find(|server| server.name == "files")?;
        let done = server.last_error.contains("its way out refused 127.0.0.1:22") && server.last_error.contains("example.org:443");
        done.then(|| (server.last_error, server.sandbox.unwrap_or_default()))
    })
    .await;
    assert_eq!(sandbox.last_denied, "127.0.0.1:22");
    assert!(sandbox.last_denied_fix.contains("npx asked for a host") && sandbox.last_denied_fix.contains("does not need"), "{sandbox:?}");
    // The public host: the allow-list it would need, in the words of an entry without one.
    assert!(error.contains(r#"give the entry network = { allow = ["example.org:443"] }"#), "{error}");
    let detail = toolhost(&["servers", "files", "--addr", &format!("unix:{}", dir.path("toolhost.sock").display())]);
    assert!(detail.contains("refused   127.0.0.1:22") && detail.contains("does not need"), "{detail}");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log());
    let logged = log();
    assert!(logged.contains("refused a connection"), "{logged}");
    // Nowhere is the operator told to allow what the server asked for, nor of a network.allow
    // this entry does not have.
    for (place, text) in [("the last error", &error), ("toolhost servers files", &detail), ("the log", &logged)] {
        for advice in ["add 127.0.0.1:22", "allow = [\"127.0.0.1", r#"allow = [\"127.0.0.1"#, "network.allow"] {
            assert!(!text.contains(advice), "{place} says {advice:?}: {text}");
        }
    }
}

/// A registry setting toolhost cannot read, or one at the metadata service's address, is a
/// configuration error naming its key, not a silent fall-back to the public registry.
#[test]
fn a_registry_setting_that_names_no_reachable_registry_is_a_configuration_error() {
    let dir = TestDir::new();
    for (key, value, said) in [
        ("UV_DEFAULT_INDEX", "not a url", "not a registry URL"),
        ("UV_INDEX_URL", "https://pypi.example.com:99999/simple", "not a registry URL"),
        ("UV_DEFAULT_INDEX", "http://169.254.169.254/latest/meta-data/", "link-local"),
    ] {
        let config = dir.path("toolhost.toml");
        std::fs::write(&config, format!("[servers.fetch]\ncommand = \"uvx\"\nargs = [\"{FETCH}\"]\nenv = {{ {key} = {value:?} }}\n"))
            .unwrap();
        let checked = toolhost(&["check-config", "--config", config.to_str().unwrap()]);
        assert!(checked.contains(&format!("servers.fetch.env.{key}")) && checked.contains(said), "{key} = {value}: {checked}");
    }
}
