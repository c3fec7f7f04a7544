//! Test harness: a temporary directory with scripts for the scripted MCP server, a real
//! configuration file and SQLite database, and helpers to wait for the daemon's state.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::api::pb::tool_host_client::ToolHostClient;
use toolhost::app::App;
use toolhost::config::{Config, ListenAddr};
use toolhost::listen::BoundAddr;
use toolhost::registry::{CatalogSnapshot, Registry, ServerView};

/// How long any wait in a test may take before it fails. Generous: CI machines are busy.
pub const WAIT: Duration = Duration::from_secs(20);

pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    /// Open to every user: a daemon run as root runs its sandboxed servers as an id of
    /// their own, and
    /// the scripted server writes its log and pid files here.
    pub fn new() -> TestDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        open_to_all(dir.path());
        TestDir { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a script for server `name`, adding a message log, a pid file and a state directory.
    pub fn script(&self, name: &str, mut script: Value) -> PathBuf {
        let state_dir = self.path(&format!("{name}-state"));
        std::fs::create_dir_all(&state_dir).expect("state dir");
        open_to_all(&state_dir);
        script["log_file"] = json!(self.path(&format!("{name}.log")));
        script["pid_file"] = json!(self.path(&format!("{name}.pids")));
        script["state_dir"] = json!(state_dir);
        let path = self.path(&format!("{name}.json"));
        std::fs::write(&path, script.to_string()).expect("write script");
        path
    }

    /// Every message server `name` received, in order, across all its launches.
    pub fn received(&self, name: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// The methods server `name` received, in order.
    pub fn methods(&self, name: &str) -> Vec<String> {
        self.received(name).iter().filter_map(|m| m["method"].as_str().map(str::to_owned)).collect()
    }

    /// The pids of every launch of server `name` (and the grandchildren it was asked to start),
    /// as this process numbers them. The server writes its PID namespace with each pid; in a
    /// sandbox's namespace the host's number is found by the namespace and the process's pid in
    /// it. A process already gone gets a pid that no process has.
    pub fn pids(&self, name: &str) -> Vec<i32> {
        let text = std::fs::read_to_string(self.path(&format!("{name}.pids"))).unwrap_or_default();
        let ours = std::fs::read_link("/proc/self/ns/pid").map(|link| link.display().to_string()).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let (namespace, pid, started) = (fields.next()?, fields.next()?.parse::<i32>().ok()?, fields.next()?);
                Some(if namespace == ours { pid } else { host_pid(namespace, pid, started).unwrap_or(GONE) })
            })
            .collect()
    }

    /// Writes `toolhost.toml` with the store in this directory and the given server tables.
    pub fn config(&self, servers: &str) -> Config {
        self.config_with("", servers)
    }

    /// [`TestDir::config`] with more sections (`[mcp]`, `[access]`) before the servers.
    pub fn config_with(&self, sections: &str, servers: &str) -> Config {
        let text = format!(
            "[store]\npath = \"catalog.db\"\n\n[grpc]\nlisten = [\"127.0.0.1:0\", \"unix:toolhost.sock\"]\n\n{sections}\n\n{servers}"
        );
        let path = self.path("toolhost.toml");
        std::fs::write(&path, &text).expect("write config");
        Config::load(&path).unwrap_or_else(|err| panic!("test config is invalid: {err}\n{text}"))
    }

    pub fn db_path(&self) -> PathBuf {
        self.path("catalog.db")
    }
}

/// Mode 0777 (sticky, as /tmp is): any user may write in it.
pub fn open_to_all(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).expect("open the directory to all");
}

/// The path of the scripted MCP server binary that cargo built for these tests.
pub fn scripted_server() -> &'static str {
    env!("CARGO_BIN_EXE_scripted-mcp-server")
}

/// A `[servers.NAME]` table running the scripted server with `script`, plus extra settings,
/// which replace the fast test defaults for `request_timeout` and `restart`.
/// The scripted server writes its log, pid and state files beside its script: that directory
/// is granted to its sandbox (the store and the configuration in it stay hidden).
pub fn server_table(name: &str, script: &std::path::Path, extra: &str) -> String {
    let mut table = format!("[servers.{name}]\ncommand = {:?}\nargs = [{:?}]\n", scripted_server(), script.display().to_string());
    if !extra.contains("write =") && !extra.contains("sandbox =") {
        let dir = script.parent().expect("a script's directory");
        table.push_str(&format!("write = [{:?}]\n", dir.display().to_string()));
    }
    if !extra.contains("request_timeout") {
        table.push_str("request_timeout = \"5s\"\n");
    }
    if !extra.contains("restart") {
        table.push_str("restart = { initial_backoff = \"50ms\", max_backoff = \"200ms\" }\n");
    }
    table.push_str(extra);
    table.push('\n');
    table
}

/// Starts the daemon in this process, with toolhost's own program for the orphan guard and the
/// servers' sandboxes, as `toolhost serve` has.
pub async fn start(config: Config) -> App {
    App::start_with(config, runtime()).await.expect("toolhost starts")
}

/// What `toolhost serve` gives the daemon, for a daemon run in-process.
pub fn runtime() -> toolhost::app::RuntimeOptions {
    toolhost::app::RuntimeOptions {
        reaper_program: Some(PathBuf::from(env!("CARGO_BIN_EXE_toolhost"))),
        notifier: toolhost::systemd::Notifier::disabled(),
    }
}

/// Waits until `condition` holds for the registry's snapshot, or fails the test saying `what`.
pub async fn wait_until(registry: &Arc<Registry>, what: &str, condition: impl Fn(&CatalogSnapshot) -> bool) -> Arc<CatalogSnapshot> {
    let mut revisions = registry.subscribe_status();
    let waited = tokio::time::timeout(WAIT, async {
        loop {
            let snapshot = registry.snapshot();
            if condition(&snapshot) {
                return snapshot;
            }
            let _ = revisions.changed().await;
        }
    })
    .await;
    match waited {
        Ok(snapshot) => snapshot,
        Err(_) => panic!("timed out waiting until {what}; servers: {:#?}", registry.snapshot().servers),
    }
}

/// Waits until server `name` satisfies `condition`.
pub async fn wait_for_server(registry: &Arc<Registry>, name: &str, what: &str, condition: impl Fn(&ServerView) -> bool) -> Arc<ServerView> {
    let snapshot =
        wait_until(registry, &format!("{name}: {what}"), |snapshot| snapshot.servers.get(name).is_some_and(|view| condition(view))).await;
    snapshot.servers[name].clone()
}

/// Tool names of a server's current generation.
pub fn tool_names(view: &ServerView) -> Vec<String> {
    view.generation().map(|g| g.tools.iter().map(|t| t.name.clone()).collect()).unwrap_or_default()
}

/// `n` simple tool definitions named `{prefix}{i}`.
pub fn tools(prefix: &str, n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"name": format!("{prefix}{i}"), "description": format!("tool {i}"), "inputSchema": {"type": "object"}})).collect()
}

/// A pid no process has (above any `pid_max`).
const GONE: i32 = i32::MAX;

/// The host's pid of the process that is `pid` in the PID namespace `namespace` (as
/// `/proc/PID/ns/pid` names it) and started at `started`: its `NSpid` line ends with that pid.
fn host_pid(namespace: &str, pid: i32, started: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let host: i32 = entry.file_name().to_str()?.parse().ok()?;
        let link = std::fs::read_link(entry.path().join("ns/pid")).ok()?;
        if link.display().to_string() != namespace {
            return None;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
        let inner = status.lines().find_map(|line| line.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse::<i32>().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let start = stat.get(stat.rfind(')')? + 2..)?.split(' ').nth(19)?;
        (inner == pid && start == started).then_some(host)
    })
}

/// Whether a process is still present (alive or a zombie) in /proc.
pub fn process_exists(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A gRPC client of the daemon over its Unix socket, where the kernel identifies the test as the
/// daemon's own user: a local operator, admitted to everything when no `[access]` is configured.
pub async fn client(app: &App) -> ToolHostClient<tonic::transport::Channel> {
    unix_client(app).await
}

/// The daemon's TCP listener (which admits bearer tokens only; health and reflection are open).
pub fn tcp_addr(app: &App) -> std::net::SocketAddr {
    app.grpc_addrs()
        .iter()
        .find_map(|a| match a {
            BoundAddr::Tcp(addr) => Some(*addr),
            BoundAddr::Unix(_) => None,
        })
        .expect("a TCP listener")
}

/// A gRPC client of the daemon over its Unix socket.
pub async fn unix_client(app: &App) -> ToolHostClient<tonic::transport::Channel> {
    let path = app.grpc_addrs().iter().find_map(|a| match a {
        BoundAddr::Unix(path) => Some(ListenAddr::Unix(path.clone())),
        BoundAddr::Tcp(_) => None,
    });
    let channel = toolhost::cli::connect(&path.expect("a Unix listener")).await.expect("connect over the Unix socket");
    ToolHostClient::new(channel)
}

/// `--addr` for the CLI, pointing at the daemon's Unix socket.
pub fn cli_addr(app: &App) -> String {
    app.grpc_addrs()
        .iter()
        .find_map(|a| match a {
            BoundAddr::Unix(path) => Some(format!("unix:{}", path.display())),
            BoundAddr::Tcp(_) => None,
        })
        .expect("a Unix listener")
}

/// The ErrorInfo reason and metadata toolhost attaches to every error status.
pub fn error_info(status: &tonic::Status) -> (String, std::collections::HashMap<String, String>) {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info().unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    (info.reason, info.metadata)
}

/// Whether the tests run as root (some fault tests mount filesystems or switch users).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| status.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// Says why a test did not run, past the test harness's capture (a passing test's output is
/// otherwise never shown), with how many tests skipped so far, and adds the line to the file
/// `.ci/test` counts skipped tests in (`TOOLHOST_TEST_SKIPS`), so that a run says how many of
/// its tests did nothing.
pub fn skipped(why: &str) {
    use std::io::Write;
    static SKIPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let count = SKIPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let _ = writeln!(std::io::stderr(), "{why} [{count} skipped so far]");
    if let Some(file) = std::env::var_os("TOOLHOST_TEST_SKIPS") {
        // One write of the whole line: appends from tests running at once never interleave.
        if let Ok(mut skips) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = skips.write_all(format!("{}\n", why.replace('\n', " ")).as_bytes());
        }
    }
}

/// Whether a test that needs root may run: as root, yes. Otherwise the test is skipped loudly
/// (a `SKIPPED` line naming it, counted), or fails where a skip is not allowed: under the test
/// command (`bash .ci/test` sets `TOOLHOST_TESTS_REQUIRE_ROOT=1`), a suite that passes has run
/// every one of them. `why`: what it needs root for.
pub fn requires_root(why: &str) -> bool {
    if is_root() {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let required = std::env::var("TOOLHOST_TESTS_REQUIRE_ROOT").is_ok_and(|value| value != "0");
    assert!(
        !required,
        "{test} needs root ({why}) and TOOLHOST_TESTS_REQUIRE_ROOT is set: run the suite as root, or with \
         TOOLHOST_TESTS_REQUIRE_ROOT=0 to skip the root tests (counted)"
    );
    skipped(&format!("SKIPPED {test}: needs root ({why})"));
    false
}

/// A TLS server configuration with a fresh self-signed certificate for `names`, and that
/// certificate (PEM) for a client to trust.
pub fn self_signed_tls(names: &[&str]) -> (std::sync::Arc<rustls::ServerConfig>, String) {
    let certified = rcgen::generate_simple_self_signed(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    (std::sync::Arc::new(config), certified.cert.pem())
}

/// Whether a test may run: `present` says whether what it needs (PostgreSQL, Chromium) is
/// there. Under the test command (`bash .ci/test`, which installs and starts all of it) a
/// missing piece fails the test; under a plain `cargo test` the test is skipped, saying how to
/// run it.
pub fn requires(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    assert!(std::env::var_os("TOOLHOST_TEST_TOOLS").is_none(), "{what} is missing, though the test command installs it");
    skipped(&format!("SKIPPED: needs {what}; run the suite with `bash .ci/test`, which installs and starts it"));
    false
}

/// Runs the CLI as `uid` (its gid too), with exactly the supplementary `groups` given (none when
/// `None`), against the Unix socket `socket`: a real process of another user.
pub async fn cli_as(uid: u32, groups: Option<&str>, socket: &std::path::Path, args: &[&str]) -> std::process::Output {
    let groups = groups.map(str::to_owned);
    let socket = socket.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli_as_blocking(uid, groups.as_deref(), &socket, &args)
    })
    .await
    .expect("the CLI's task")
}

/// [`cli_as`], waiting for the process on this thread.
pub fn cli_as_blocking(uid: u32, groups: Option<&str>, socket: &std::path::Path, args: &[&str]) -> std::process::Output {
    let uid = uid.to_string();
    let groups = groups.map_or_else(|| "--clear-groups".to_owned(), |groups| format!("--groups={groups}"));
    std::process::Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, &groups, env!("CARGO_BIN_EXE_toolhost")])
        .args(args)
        .args(["--addr", &format!("unix:{}", socket.display())])
        .output()
        .expect("run the CLI as another user")
}

/// Checks until `check` gives something, or fails the test saying `what` after [`WAIT`]: the one
/// way a test waits for what nothing can tell it (a process starting, another host's work).
/// `check` answers `Option<T>`, or `Result<T, String>` whose last `Err` the failure quotes.
pub async fn eventually<T, P: Progress<T>>(what: &str, check: impl AsyncFnMut() -> P) -> T {
    eventually_within(WAIT, what, check).await
}

/// [`eventually`] with its own limit, for what takes longer by design (a backlog of thousands
/// shipped, ten token lifetimes).
pub async fn eventually_within<T, P: Progress<T>>(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> P) -> T {
    let started = std::time::Instant::now();
    loop {
        // A check that hangs fails the test as well, instead of holding the whole suite: it gets
        // what is left of the limit, and the limit again.
        let bound = limit.saturating_sub(started.elapsed()).saturating_add(limit);
        let Ok(progress) = tokio::time::timeout(bound, check()).await else {
            panic!("{what} did not happen within {limit:?}: a check gave no answer within {bound:?}");
        };
        let why = match progress.outcome() {
            Ok(found) => return found,
            Err(why) => why,
        };
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}{}",
            why.map(|why| format!(": {why}")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
#[should_panic(expected = "a check gave no answer within")]
async fn eventually_fails_a_check_that_never_answers() {
    eventually_within(Duration::from_millis(50), "an answer", async || std::future::pending::<Option<()>>().await).await;
}

/// A steady pace for load a test keeps up while something else happens (one tick per call or
/// write): the load is the point, not a wait for an event.
pub fn pace(every: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// What one look of [`eventually`] found: the thing, or (perhaps) why not yet.
pub trait Progress<T> {
    fn outcome(self) -> Result<T, Option<String>>;
}

impl<T> Progress<T> for Option<T> {
    fn outcome(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T> Progress<T> for Result<T, String> {
    fn outcome(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

pub type Interceptor = Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;

/// A gRPC client over TCP that presents `token`: an agent, not the local operator.
pub async fn agent_client(
    app: &toolhost::app::App,
    token: &str,
) -> ToolHostClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Interceptor>> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", tcp_addr(app))).unwrap().connect().await.unwrap();
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    let interceptor: Interceptor = Box::new(move |mut request: tonic::Request<()>| {
        request.metadata_mut().insert("authorization", bearer.clone());
        Ok(request)
    });
    ToolHostClient::with_interceptor(channel, interceptor)
}
