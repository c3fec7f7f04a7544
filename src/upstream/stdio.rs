//! stdio servers: a child process in its own process group, its stderr in toolhost's log, and
//! the MCP shutdown sequence (close stdin, wait, SIGTERM, wait, SIGKILL to the group, reap).

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncRead;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_util::task::AbortOnDropHandle;

use crate::config::StdioSpec;
use crate::mcp::lines::{Line, Lines};
use crate::sandbox::Report;
use crate::telemetry::throttle::Throttle;
use crate::upstream::confinement::{self, SandboxError};
use crate::upstream::exit::StderrTail;
use crate::upstream::reaper::Reaper;
use crate::upstream::{Ended, UpstreamError};

/// Longest stderr line kept whole; longer lines are logged truncated.
const STDERR_LINE_BYTES: usize = 4096;
/// stderr lines logged per second per server; the rest are counted and summarised.
const STDERR_LINES_PER_SECOND: u32 = 50;

/// A running stdio server process and the tasks that serve it (its stderr, its sandbox's
/// reports, its proxy), each ended when this value is dropped.
pub(crate) struct ChildProcess {
    child: Child,
    /// The process group id, which is the leader's pid (`process_group(0)`).
    pgid: Option<Pid>,
    /// When the leader started: once it is reaped, its number may name another process's group.
    leader_started: Option<u64>,
    stderr_pump: AbortOnDropHandle<()>,
    /// The sandbox helper's reports (none without a sandbox).
    reports: Option<AbortOnDropHandle<Option<Report>>>,
    /// A proxied sandbox's way out (`upstream::egress`), for as long as the process runs.
    egress: Option<AbortOnDropHandle<()>>,
    /// While set, the server's stderr goes to DEBUG: what a legacy server writes about the
    /// era probe (`server/discover`, a method it does not know) is not news to an operator.
    stderr_quiet: Arc<AtomicBool>,
    /// Its last stderr lines, whatever level they were logged at, for the next failure's message.
    stderr_tail: Arc<StderrTail>,
    reaper: Arc<Reaper>,
    /// The shutdown sequence ran to the end; until then, dropping kills the whole group.
    reaped: bool,
}

/// Spawns the server process with piped stdio in a new process group: inside its sandbox
/// (`toolhost __sandbox PLAN`, which execs the server) unless its entry says `sandbox = "off"`.
///
/// # Errors
/// [`UpstreamError::Spawn`] when the program cannot be started, [`UpstreamError::Sandbox`]
/// when its sandbox cannot be planned.
pub(crate) fn spawn(
    server: &Arc<str>,
    spec: &StdioSpec,
    reaper: Arc<Reaper>,
    egress_stats: Arc<super::egress::EgressStats>,
) -> Result<(ChildProcess, ChildStdout, ServerInput), UpstreamError> {
    // The sandbox helper in place of the server (it execs the server inside), with its report
    // pipe (and for a proxied network, the channel its proxy listener comes back on); or, with
    // `sandbox = "off"`, the server itself in its `cwd`.
    let mut egress_channel = None;
    let (mut command, report_pipe) = if spec.sandbox.enabled {
        let Some(helper) = reaper.program() else {
            return Err(SandboxError::Embedded.into());
        };
        // Fail closed: a kernel that cannot build the sandbox does not get an unconfined server.
        let support = if crate::faults::fire("sandbox.kernel", server) {
            Err(crate::sandbox::KernelGap::Simulated)
        } else {
            crate::sandbox::kernel_support()
        };
        support.map_err(SandboxError::Kernel)?;
        if let Some(home) = &spec.sandbox.home {
            confinement::make_home(home)?;
        }
        confinement::make_data(spec, Some(crate::sandbox::sandbox_ids()))?;
        let mut plan = confinement::plan_for(spec).map_err(SandboxError::Plan)?;
        plan.watched = reaper.enforcement() == crate::sandbox::Enforcement::Watched;
        let proxied = plan.network == crate::sandbox::Network::Proxied;
        let plan = serde_json::to_string(&plan).map_err(SandboxError::Encode)?;
        let mut command = Command::new(helper);
        command.arg(crate::sandbox::HELPER_COMMAND).arg(plan);
        let pipe = crate::sandbox::report::attach(&mut command).map_err(SandboxError::ReportPipe)?;
        if proxied {
            egress_channel = Some(crate::sandbox::report::attach_egress(&mut command).map_err(SandboxError::ReportPipe)?);
        }
        (command, Some(pipe))
    } else {
        warn_unconfined(server);
        // Unconfined, it runs as the daemon: its data directory stays the daemon's.
        confinement::make_data(spec, None)?;
        let mut command = Command::new(&spec.command);
        command.args(&spec.args);
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        crate::sandbox::adopt_orphans(&mut command);
        (command, None)
    };
    // A clean environment: a server never sees another's credentials, nor the service
    // manager's variables (NOTIFY_SOCKET and the like), only the base set, what it inherits by
    // name, and its own `env`.
    let inherited = crate::config::BASE_ENV.iter().copied().chain(spec.inherit_env.iter().map(String::as_str));
    let launchers = crate::config::LAUNCHER_ENV.iter().copied().filter_map(|name| {
        let value = std::env::var(name).ok()?;
        (!crate::config::carries_credentials(&value)).then_some((name, value))
    });
    // A sandboxed server's caches and settings live in its own home, never the operator's.
    let home = spec.sandbox.home.as_deref().filter(|_| spec.sandbox.enabled).map(confinement::home_env).into_iter().flatten();
    command
        .env_clear()
        .envs(launchers)
        .envs(inherited.filter_map(|name| std::env::var_os(name).map(|value| (name, value))))
        .envs(home)
        .envs(spec.env.iter().map(|(name, value)| (name, value.expose())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that a shutdown reaches `npx` and the `node` it started alike.
        .process_group(0)
        // If toolhost's owner drops the handle without the shutdown sequence, the child still dies.
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| UpstreamError::Spawn { command: spec.command.display().to_string(), source })?;
    let reports = report_pipe.map(|pipe| {
        drop(pipe.sender);
        AbortOnDropHandle::new(tokio::spawn(read_reports(pipe.receiver)))
    });
    // The proxy runs as long as this process: aborted when it is shut down or dropped.
    let egress = egress_channel.map(|(ours, theirs)| {
        drop(theirs);
        let route = confinement::egress(spec);
        AbortOnDropHandle::new(tokio::spawn(super::egress::run(server.clone(), ours, Arc::new(route), egress_stats)))
    });
    let pgid = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    if let Some(pgid) = pgid {
        reaper.register(pgid, spec.sandbox.enabled);
    }
    let (Some(stdout), Some(stdin), Some(stderr)) = (child.stdout.take(), child.stdin.take(), child.stderr.take()) else {
        return Err(UpstreamError::Protocol("the child's stdio pipes were not created".to_owned()));
    };
    let stderr_quiet = Arc::new(AtomicBool::new(false));
    let stderr_tail = Arc::new(StderrTail::default());
    let stderr_pump = AbortOnDropHandle::new(tokio::spawn(pump_stderr(server.clone(), stderr, stderr_quiet.clone(), stderr_tail.clone())));
    let wake = pgid.filter(|_| spec.sandbox.enabled).map(|helper| SandboxWake { reaper: reaper.clone(), helper, last: None });
    let input = ServerInput { stdin, wake };
    let leader_started = pgid.and_then(|pgid| crate::sandbox::servers::start_time(pgid.as_raw()));
    let process =
        ChildProcess { child, pgid, leader_started, stderr_pump, reports, egress, stderr_quiet, stderr_tail, reaper, reaped: false };
    Ok((process, stdout, input))
}

/// How often at most a sandboxed server's input wakes its init.
const WAKE_AT_MOST_EVERY: Duration = Duration::from_millis(100);

/// A server's stdin. A sandboxed server's wakes its init's look when a message is written (at
/// most every [`WAKE_AT_MOST_EVERY`]): a request is what usually sets an idle server to work,
/// and the init, asleep while its processes were still, then checks its limits from the first
/// 50 ms of that work instead of at the watch's next look.
pub(crate) struct ServerInput {
    stdin: ChildStdin,
    wake: Option<SandboxWake>,
}

struct SandboxWake {
    reaper: Arc<Reaper>,
    helper: Pid,
    last: Option<std::time::Instant>,
}

impl tokio::io::AsyncWrite for ServerInput {
    fn poll_write(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Some(wake) = &mut this.wake {
            let now = std::time::Instant::now();
            if wake.last.is_none_or(|last| now.saturating_duration_since(last) >= WAKE_AT_MOST_EVERY) {
                wake.last = Some(now);
                wake.reaper.wake_sandbox(wake.helper);
            }
        }
        std::pin::Pin::new(&mut this.stdin).poll_write(cx, buf)
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stdin).poll_flush(cx)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stdin).poll_shutdown(cx)
    }
}

/// `sandbox = "off"` is the operator's explicit choice, said at every start.
fn warn_unconfined(server: &Arc<str>) {
    tracing::warn!(
        server = %server,
        "starting without a sandbox (sandbox = \"off\"): this server can reach everything toolhost's user can, and a process it \
         leaves running after it exits is no longer known as a server's: it may act as toolhost's own user on toolhost's sockets"
    );
}

/// Reads the helper's reports until it exits; the last one that is not `ready` is the news.
async fn read_reports(receiver: tokio::net::unix::pipe::Receiver) -> Option<Report> {
    let mut lines = Lines::new(receiver, Report::MAX_LINE);
    let mut news = None;
    loop {
        match lines.next().await {
            Ok(Line::Complete(line)) => match Report::parse(&String::from_utf8_lossy(&line)) {
                Some(Report::Ready) | None => {}
                Some(report) => news = Some(report),
            },
            Ok(Line::Oversized(_)) => {}
            Ok(Line::Eof) | Err(_) => return news,
        }
    }
}

// === impl ChildProcess ===

impl ChildProcess {
    /// Waits for the process to exit on its own, signalling its group if it does not.
    ///
    /// The caller has already closed the child's stdin. Returns the exit status once reaped,
    /// what its sandbox reported (a limit it crossed, a sandbox it could not build) and its last
    /// stderr lines; anything left in the process group afterwards is killed.
    pub(crate) async fn shutdown(mut self, grace: Duration) -> Ended {
        let mut status = tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok);
        if status.is_none() {
            self.signal_group(Signal::SIGTERM);
            status = tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok);
        }
        if status.is_none() {
            self.signal_group(Signal::SIGKILL);
            status = self.child.wait().await.ok();
        }
        // The leader is gone; stragglers in its group (daemonised helpers) must not outlive it.
        self.signal_group(Signal::SIGKILL);
        if let Some(pgid) = self.pgid {
            self.reaper.unregister(pgid);
        }
        self.reaped = true;
        drop(self.egress.take());
        if tokio::time::timeout(Duration::from_millis(500), &mut self.stderr_pump).await.is_err() {
            self.stderr_pump.abort();
        }
        // The helper is gone, so its report pipe is at its end (or its init is about to be).
        let report = match self.reports.take() {
            // Past the wait, dropping the handle ends the reader.
            Some(mut reports) => match tokio::time::timeout(Duration::from_millis(500), &mut reports).await {
                Ok(Ok(report)) => report,
                _ => None,
            },
            None => None,
        };
        Ended { status, sandbox: report, stderr: self.stderr_tail.lines() }
    }

    /// Signals the server's process group, unless its number may name someone else's now: a
    /// process with the leader's pid that is not the leader took the number after the leader
    /// was reaped and made a group of its own (as a `pg_ctl`'s postmaster does). While the
    /// leader or anyone in its group lives, the kernel gives the number to nobody else.
    fn signal_group(&self, signal: Signal) {
        let Some(pgid) = self.pgid else { return };
        let now = crate::sandbox::servers::start_time(pgid.as_raw());
        if now.is_some() && now != self.leader_started {
            tracing::debug!(%pgid, "the server's group number names another process now; not signalled");
            return;
        }
        // ESRCH means the group is already empty.
        let _ = killpg(pgid, signal);
    }
}

impl Drop for ChildProcess {
    /// A process dropped without its shutdown sequence (its owner panicked or was aborted) takes
    /// its whole group with it; tokio reaps the leader (`kill_on_drop`); its tasks end as their
    /// handles drop.
    fn drop(&mut self) {
        if !self.reaped {
            self.signal_group(Signal::SIGKILL);
            if let Some(pgid) = self.pgid {
                self.reaper.unregister(pgid);
            }
        }
    }
}

impl ChildProcess {
    /// Sends the server's stderr to DEBUG (`true`) or back to INFO.
    pub(crate) fn quiet_stderr(&self, quiet: bool) {
        self.stderr_quiet.store(quiet, Ordering::Relaxed);
    }
}

/// Logs the server's stderr line by line, never letting a chatty child block on a full pipe.
/// Refused writes hinted at per process: past these, a server that keeps failing is not news.
const WRITE_HINTS: usize = 4;

/// The grant that would allow a write a server's stderr says was refused, logged at WARN once
/// per hint and for [`WRITE_HINTS`] of them at most in a process's life: a server that repeats
/// itself (or floods on purpose) costs one line each.
#[derive(Default)]
struct WriteHints(Vec<String>);

impl WriteHints {
    fn note(&mut self, server: &str, line: &str) {
        if self.0.len() >= WRITE_HINTS {
            return;
        }
        let Some(hint) = crate::upstream::exit::write_hint(line) else { return };
        if !self.0.contains(&hint) {
            tracing::warn!(server = %server, "{hint}");
            self.0.push(hint);
        }
    }
}

async fn pump_stderr<R: AsyncRead + Unpin>(server: Arc<str>, stderr: R, quiet: Arc<AtomicBool>, tail: Arc<StderrTail>) {
    let mut lines = Lines::new(stderr, STDERR_LINE_BYTES);
    let throttle = Throttle::new(STDERR_LINES_PER_SECOND);
    let mut hints = WriteHints::default();
    loop {
        let line = match lines.next().await {
            Ok(Line::Complete(line)) => String::from_utf8_lossy(&line).into_owned(),
            Ok(Line::Oversized(len)) => format!("<a line of {len} bytes, over the {STDERR_LINE_BYTES}-byte limit>"),
            Ok(Line::Eof) | Err(_) => break,
        };
        // The server's text, escaped once here: the log, its last error and any hint built
        // from it never carry a terminal's control character.
        let line = crate::upstream::exit::printable_owned(crate::secrets::redact_owned(line));
        tail.push(&line);
        hints.note(&server, &line);
        if quiet.load(Ordering::Relaxed) {
            tracing::debug!(target: "toolhost::server_stderr", server = %server, "{line}");
            continue;
        }
        match throttle.admit() {
            Some(0) => tracing::info!(target: "toolhost::server_stderr", server = %server, "{line}"),
            Some(suppressed) => {
                tracing::warn!(server = %server, lines = suppressed, "server stderr lines not logged (rate limit)");
                tracing::info!(target: "toolhost::server_stderr", server = %server, "{line}");
            }
            None => {}
        }
    }
    let suppressed = throttle.take_suppressed();
    if suppressed > 0 {
        tracing::warn!(server = %server, lines = suppressed, "server stderr lines not logged (rate limit)");
    }
}
