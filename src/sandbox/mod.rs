//! The stdio servers' sandbox: what a server process can reach, and the helper that confines it.
//!
//! The daemon never runs a sandboxed server directly. It runs itself as `toolhost __sandbox
//! PLAN` (the [`Plan`] as JSON), and that helper, a fresh single-threaded process, does what a
//! multi-threaded daemon cannot do between `fork` and `exec`:
//!
//! 1. `helper`: new user, mount, PID, IPC and UTS namespaces (and a network namespace unless the
//!    plan says `all`), its own uid mapped to itself; then it forks the namespace's init and
//!    waits for it, relaying its exit status. It ignores SIGTERM so that the server's own
//!    graceful exit is not cut short; SIGKILL takes it, and the init with it (`PDEATHSIG`).
//! 2. `root`: the init builds a new root from nothing (a tmpfs): the system directories
//!    read-only, the plan's grants, a private `/tmp` and `/dev`, a `/proc` of its own namespace,
//!    and every private place of the daemon's that lies inside a grant masked; then `pivot_root`.
//! 3. `confine`: limits (rlimits, nice), the loopback interface (`network = "loopback"`), no
//!    capabilities (bounding and inheritable sets emptied, `SECBIT_NOROOT`), Landlock (reads
//!    everywhere it can see, writes only in its grants; signals and abstract sockets scoped to
//!    the sandbox), then a seccomp filter of what a tool server never needs.
//! 4. `init`: forks and execs the server, reaps everything in the namespace, and stops the whole
//!    sandbox when a limit is crossed, saying which on the report channel (fd 3).
//!
//! Report lines (fd 3, to the daemon): `ready`, `limit KIND DETAIL`, `error STAGE: MESSAGE`.
//! The server itself never holds fd 3, so it cannot write a report.

// The one place that needs `unsafe` (the crate denies it elsewhere): fork, prctl, capset,
// ioctl and the report descriptor. Every block says why it is sound.
pub(crate) mod beneath;
#[allow(unsafe_code)]
mod confine;
#[allow(unsafe_code)]
mod helper;
#[allow(unsafe_code)]
mod init;
#[allow(unsafe_code)]
pub mod report;
#[allow(unsafe_code)]
mod reporter;
mod root;
pub mod servers;
mod setup;
#[allow(unsafe_code)]
pub mod watch;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use setup::KernelGap;

pub use helper::{adopt_orphans, run, seal_inherited_descriptors};

/// The uid and gid a sandbox's processes run as outside it (and inside: the map is one to one):
/// the daemon's own, or for a daemon run as root [`SANDBOX_ID`], so that no server is ever root
/// on the host (root's processes are exempt from the process limit, and root reads what nobody
/// else may).
pub(crate) fn sandbox_ids() -> (nix::unistd::Uid, nix::unistd::Gid) {
    use nix::unistd::{Gid, Uid, getgid, getuid};
    if getuid().is_root() { (Uid::from_raw(SANDBOX_ID), Gid::from_raw(SANDBOX_ID)) } else { (getuid(), getgid()) }
}

/// An id no account has: not `nobody`, which other services run as and which could then trace
/// a server's processes (same uid) and read its secrets. Files a root daemon's server must read
/// need to be readable by others, as for `nobody`.
pub const SANDBOX_ID: u32 = 2_140_000_000;
/// The file descriptor the helper reports on.
pub const REPORT_FD: i32 = 3;
/// With [`Network::Proxied`]: the Unix socket the init hands the daemon the sandbox's proxy
/// listener on.
pub const EGRESS_FD: i32 = 4;
/// The environment variables a proxied server's clients read their proxy from.
pub const PROXY_VARIABLES: &[&str] =
    &["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "npm_config_https_proxy", "npm_config_proxy"];
/// The hidden subcommand that runs the helper.
pub const HELPER_COMMAND: &str = "__sandbox";
/// What `toolhost-sandbox __identity` prints: the build of the sandbox code it holds. The
/// daemon runs that binary only when it prints the daemon's own [`IDENTITY`].
pub const IDENTITY_COMMAND: &str = "__identity";
pub const IDENTITY: &str = env!("TOOLHOST_SANDBOX_ID");
/// The small binary of the sandbox alone, looked for beside `toolhost`.
pub const SMALL_HELPER: &str = "toolhost-sandbox";

/// Directories every sandbox sees read-only (those that exist; symbolic links such as a merged
/// `/usr`'s `/lib` are recreated as links).
pub const SYSTEM_PATHS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// Everything the helper needs to start one server; built by the daemon for each start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The program to run: the configured one as found, behind its symbolic links (the view
    /// shows it at that path).
    pub program: PathBuf,
    /// The program as configured, which the server gets as `argv[0]`, and its arguments.
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Where it starts (absolute; visible read-only inside); without one, its private `/tmp`.
    pub cwd: Option<PathBuf>,
    /// Visible read-only, besides [`SYSTEM_PATHS`] (absolute, canonical, existing).
    pub read: Vec<PathBuf>,
    /// Visible and writable (absolute, canonical, existing).
    pub write: Vec<PathBuf>,
    /// The daemon's private places: directories and files never shown, masked where a grant
    /// would show them.
    pub hidden: Vec<PathBuf>,
    /// The server's own home, shown writable at its path (through a private place's mask when
    /// it lies inside one, as it does in the state directory).
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// Its data directory beside the homes (`data = true`), shown writable as the home is.
    #[serde(default)]
    pub data: Option<PathBuf>,
    pub network: Network,
    pub limits: Limits,
    /// The daemon's watch looks at this sandbox (see `watch`): once its processes are still,
    /// the init sleeps until a signal instead of looking again every few seconds.
    #[serde(default)]
    pub watched: bool,
}

/// What a sandboxed server may reach over the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Its own network namespace with no interface up: no sockets beyond Unix ones it makes.
    None,
    /// Its own network namespace with its own loopback: its processes talk to each other, never
    /// to the host's services (the daemon's listeners included).
    Loopback,
    /// The host's network.
    All,
    /// Its own network namespace with its own loopback, where a listener the daemon serves is
    /// its only way out: an HTTP CONNECT proxy that reaches the hosts its entry allows and
    /// nothing else (`network = { allow = [...] }`; the proxy variables point at it).
    Proxied,
}

impl Network {
    pub fn label(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Loopback => "loopback",
            Network::All => "all",
            Network::Proxied => "allow-list",
        }
    }
}

/// Bounds on one sandbox, all processes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Resident memory of all its processes, in bytes (and twice this per process as the
    /// kernel's hard bound on data).
    pub memory_bytes: u64,
    /// Processes and threads.
    pub processes: u32,
    /// Open files per process.
    pub open_files: u32,
    /// CPU time per process, in seconds.
    pub cpu_seconds: u64,
    /// Size of its private `/tmp` (memory), in bytes.
    pub tmp_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { memory_bytes: 1 << 30, processes: 256, open_files: 1024, cpu_seconds: 24 * 3600, tmp_bytes: 256 << 20 }
    }
}

/// Which limit stopped a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Memory,
    Processes,
    OpenFiles,
    Cpu,
    /// Its private `/tmp` filled up.
    Tmp,
}

impl LimitKind {
    pub fn label(self) -> &'static str {
        match self {
            LimitKind::Memory => "memory",
            LimitKind::Processes => "processes",
            LimitKind::OpenFiles => "open_files",
            LimitKind::Cpu => "cpu",
            LimitKind::Tmp => "tmp",
        }
    }

    fn parse(word: &str) -> Option<LimitKind> {
        [LimitKind::Memory, LimitKind::Processes, LimitKind::OpenFiles, LimitKind::Cpu, LimitKind::Tmp]
            .into_iter()
            .find(|kind| kind.label() == word)
    }
}

/// One line the helper reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The sandbox is built and the server is starting.
    Ready,
    /// A limit was crossed and the sandbox stopped.
    Limit { kind: LimitKind, detail: String },
    /// The sandbox could not be built (the server never ran), or the server could not be run.
    Error(String),
}

impl Report {
    /// Longest report line the daemon reads.
    pub const MAX_LINE: usize = 1024;

    pub fn parse(line: &str) -> Option<Report> {
        let line = line.trim_end();
        if line == "ready" {
            return Some(Report::Ready);
        }
        if let Some(rest) = line.strip_prefix("limit ") {
            let (kind, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            return Some(Report::Limit { kind: LimitKind::parse(kind)?, detail: detail.to_owned() });
        }
        line.strip_prefix("error ").map(|message| Report::Error(message.to_owned()))
    }

    /// What the operator reads as the server's last error.
    pub fn describe(&self) -> String {
        match self {
            Report::Ready => "the sandbox is ready".to_owned(),
            Report::Limit { kind, detail } => format!("stopped by its sandbox: the {} limit was reached ({detail})", kind.label()),
            Report::Error(message) => format!("sandbox: {message}"),
        }
    }

    fn line(&self) -> String {
        match self {
            Report::Ready => "ready\n".to_owned(),
            Report::Limit { kind, detail } => format!("limit {} {detail}\n", kind.label()),
            Report::Error(message) => format!("error {}\n", message.replace('\n', " ")),
        }
    }
}

/// How a sandbox's limits are held on this host. Memory, processes, CPU and `/tmp` are the
/// whole sandbox's; its init checks them every 50 ms while its processes work and stops the
/// whole sandbox at the first one crossed; rlimits bound each process in between (twice the
/// memory in data, the processes, the open files, the CPU time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// An idle init sleeps until woken: by a child starting or ending, by the daemon handing its
    /// server a message, or by the daemon's one look at every sandbox ([`watch::PERIOD`]).
    Watched,
    /// This kernel does not let the daemon watch from outside: each init looks at its own
    /// sandbox, backing off to every 5 s while its processes are still.
    OwnLook,
}

impl Enforcement {
    /// What applies to the sandboxes a daemon would start on this host (for `check-config`; a
    /// running daemon's reaper says what applies to its own).
    pub fn here() -> Enforcement {
        static HERE: std::sync::OnceLock<Enforcement> = std::sync::OnceLock::new();
        *HERE.get_or_init(|| if watch::available() { Enforcement::Watched } else { Enforcement::OwnLook })
    }

    pub fn label(self) -> &'static str {
        match self {
            Enforcement::Watched => "watched",
            Enforcement::OwnLook => "own-look",
        }
    }

    /// The operator's sentence, with why the kernel's cgroups do not hold them instead.
    pub fn describe(self) -> String {
        let how = match self {
            Enforcement::Watched => {
                "checked by its init every 50 ms while its processes work; idle, it sleeps until its server is sent a \
                 message or toolhost's one look at every sandbox (each second) sees its processes use CPU"
            }
            Enforcement::OwnLook => {
                "checked by its init every 50 ms while its processes work, then every 5 s at most while they are idle \
                 (this kernel has no /proc/PID/task/TID/children or pidfds for toolhost to watch from outside)"
            }
        };
        format!("limits of the whole sandbox ({}), {how}; rlimits bound each process in between; {}", self.label(), cgroup_gap())
    }
}

/// Why the kernel's cgroups do not hold the limits: what this host's cgroup v2 offers. Read once
/// (every listing of the servers says it).
fn cgroup_gap() -> &'static str {
    static GAP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    GAP.get_or_init(read_cgroup_gap)
}

fn read_cgroup_gap() -> String {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| text.lines().find_map(|line| line.strip_prefix("0::").map(str::to_owned)));
    let controllers = own
        .as_deref()
        .and_then(|own| std::fs::read_to_string(format!("/sys/fs/cgroup{}/cgroup.controllers", own.trim_end_matches('/'))).ok());
    match controllers {
        None => "no cgroup v2 hierarchy here (memory, pids and cpu are cgroup v1's), so no kernel cgroup holds them".to_owned(),
        Some(offered) if ["memory", "pids", "cpu"].iter().all(|wanted| offered.split_whitespace().any(|c| c == *wanted)) => {
            "this host's cgroup v2 offers memory, pids and cpu, which toolhost does not use yet".to_owned()
        }
        Some(offered) => format!(
            "this host's cgroup v2 offers toolhost's cgroup only [{}], not memory, pids and cpu, so no kernel cgroup holds them",
            offered.trim()
        ),
    }
}

/// Makes the daemon non-dumpable: processes of its own uid (a server without a sandbox, an
/// agent) can then neither read its memory and environment through `/proc` nor trace it.
pub fn protect_daemon() {
    if let Err(errno) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %errno, "cannot make the daemon non-dumpable");
    }
}

/// What this kernel offers a sandbox, checked by `check-config` and at each server's start.
///
/// # Errors
/// What is missing, in words an operator can act on.
pub fn kernel_support() -> Result<(), KernelGap> {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").ok().and_then(|text| text.trim().parse::<u64>().ok());
    if max == Some(0) {
        return Err(KernelGap::UserNamespaces);
    }
    if std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone").is_ok_and(|text| text.trim() == "0")
        && !nix::unistd::geteuid().is_root()
    {
        return Err(KernelGap::UnprivilegedUserNamespaces);
    }
    if std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_ok_and(|text| text.trim() == "1")
        && !nix::unistd::geteuid().is_root()
    {
        return Err(KernelGap::AppArmor);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_round_trip() {
        for report in [
            Report::Ready,
            Report::Limit { kind: LimitKind::Memory, detail: "1.1 GiB of 1 GiB".to_owned() },
            Report::Error("mount /usr: Operation not permitted".to_owned()),
        ] {
            assert_eq!(Report::parse(&report.line()), Some(report));
        }
        assert_eq!(Report::parse("limit bananas 3"), None);
        assert_eq!(Report::parse("hello"), None);
    }

    #[test]
    fn an_error_with_a_newline_stays_one_line() {
        assert_eq!(Report::Error("a\nb".to_owned()).line(), "error a b\n");
    }
}
