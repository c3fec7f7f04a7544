//! Starting `toolhost serve` with N benchmark servers, and reading its resource use.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use toolhost::api::pb;
use toolhost::api::pb::tool_host_client::ToolHostClient;
use toolhost::config::ListenAddr;

/// Presents an agent's bearer token on every request.
#[derive(Clone)]
pub struct Bearer(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl Bearer {
    pub fn new(token: &str) -> Bearer {
        Bearer(format!("Bearer {token}").parse().expect("a token is a header value"))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
}

/// `[servers.NAME]` tables for the benchmark server, `tools` tools each.
pub fn servers(names: &[String], tools: usize, extra: &str) -> String {
    let exe = std::env::current_exe().expect("the bench binary's path");
    names
        .iter()
        .map(|name| {
            format!("[servers.{name}]\ncommand = {:?}\nargs = [\"--serve-mcp\", \"{tools}\"]\n{extra}\n", exe.display().to_string())
        })
        .collect()
}

impl Daemon {
    /// Starts the daemon in `dir` (kept between starts, so a restart finds its store).
    pub fn start(dir: &std::path::Path, servers: &str) -> Daemon {
        Daemon::start_with(dir, "", servers, None)
    }

    /// [`Daemon::start`] with more configuration sections, optionally pinned to one CPU (its
    /// servers inherit the pinning).
    pub fn start_with(dir: &std::path::Path, sections: &str, servers: &str, cpu: Option<usize>) -> Daemon {
        std::fs::create_dir_all(dir).expect("bench dir");
        let config = dir.join("toolhost.toml");
        // `sections` may bring its own [grpc] (more listeners); the Unix socket is the default.
        let grpc = if sections.contains("[grpc]") { "" } else { "[grpc]\nlisten = [\"unix:toolhost.sock\"]\n" };
        let text = format!("[store]\npath = \"catalog.db\"\n\n{grpc}\n{sections}\n\n{servers}");
        std::fs::write(&config, text).expect("write config");
        let mut command = match cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &cpu.to_string(), env!("CARGO_BIN_EXE_toolhost")]);
                taskset
            }
            None => Command::new(env!("CARGO_BIN_EXE_toolhost")),
        };
        let child = command
            .args(["serve", "--config", config.to_str().expect("utf-8 path")])
            .env("RUST_LOG", std::env::var("BENCH_DAEMON_LOG").unwrap_or_else(|_| "warn".to_owned()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start toolhost");
        Daemon { child, socket: dir.join("toolhost.sock") }
    }

    pub async fn client(&self) -> ToolHostClient<Channel> {
        ToolHostClient::new(self.channel().await)
    }

    pub async fn channel(&self) -> Channel {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(channel) = toolhost::cli::connect(&ListenAddr::Unix(self.socket.clone())).await {
                return channel;
            }
            assert!(Instant::now() < deadline, "the daemon never listened");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until every server is ready; returns how long that took from `since`.
    pub async fn wait_ready(&self, count: usize, since: Instant) -> Duration {
        let mut client = self.client().await;
        loop {
            let servers = client.list_servers(pb::ListServersRequest::default()).await.expect("ListServers").into_inner().servers;
            if servers.len() == count && servers.iter().all(|s| s.state == pb::ServerState::Ready as i32) {
                return since.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Resident memory of the daemon process alone, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// CPU time (user + system) the daemon has used so far.
    pub fn cpu_time(&self) -> Duration {
        cpu_time_of(self.pid())
    }

    pub fn stop(mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User plus system CPU time of a process, from /proc/PID/stat (clock ticks of 10 ms).
pub fn cpu_time_of(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0) + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The pids of a process's children (spawned by any of its threads).
pub fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    children
}
