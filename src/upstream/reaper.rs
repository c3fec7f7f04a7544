//! The orphan guard: a tiny helper process (`toolhost __reap`) that outlives the daemon just long
//! enough to kill every server process group the daemon left behind.
//!
//! The daemon tells the helper, over a pipe, which process groups it started (`+PGID`) and which
//! it has reaped (`-PGID`). When the pipe closes, because the daemon exited or was killed with
//! SIGKILL, the helper sends SIGKILL to every group still registered and exits. Process groups
//! reach grandchildren (`npx` and the `node` it starts) that `PR_SET_PDEATHSIG` would miss.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The daemon's side: registers and unregisters process groups with the helper.
pub struct Reaper {
    inner: Mutex<Option<(Child, ChildStdin)>>,
    /// What runs each sandboxed server (`PROGRAM __sandbox PLAN`): `toolhost-sandbox` beside
    /// toolhost when it holds the same sandbox code, else toolhost itself; `None` when the
    /// daemon is embedded (tests) and has no program of its own to run.
    program: Option<std::path::PathBuf>,
    /// The one look at every sandbox (see `sandbox::watch`).
    watch: crate::sandbox::watch::Watch,
}

impl Reaper {
    /// Starts the helper: `program __reap`, in its own process group so that a terminal's
    /// Ctrl-C does not take it down before the daemon has stopped its servers.
    ///
    /// # Errors
    /// The spawn error.
    pub fn spawn(program: &Path) -> std::io::Result<Reaper> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(program).arg("__reap").stdin(Stdio::piped()).stdout(Stdio::null()).process_group(0).spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("the helper's stdin was not piped"))?;
        Ok(Reaper { inner: Mutex::new(Some((child, stdin))), program: Some(sandbox_program(program)), watch: start_watch() })
    }

    /// A reaper that guards nothing (tests that run the daemon in-process); sandboxed servers
    /// then cannot start.
    pub fn disabled() -> Reaper {
        Reaper { inner: Mutex::new(None), program: None, watch: crate::sandbox::watch::Watch::disabled() }
    }

    /// The program that runs the sandbox helper (see [`sandbox_program`]).
    pub(crate) fn program(&self) -> Option<&Path> {
        self.program.as_deref()
    }

    /// How the limits of the sandboxes it starts are held: watched (their inits may sleep until
    /// woken) when its watch runs, else each init's own look.
    pub(crate) fn enforcement(&self) -> crate::sandbox::Enforcement {
        if self.watch.is_running() { crate::sandbox::Enforcement::Watched } else { crate::sandbox::Enforcement::OwnLook }
    }

    /// A new server process group: guarded against a daemon crash, and never a caller; with
    /// `sandboxed`, its leader is a sandbox's helper, which the watch looks at.
    pub(crate) fn register(&self, pgid: Pid, sandboxed: bool) {
        crate::sandbox::servers::register(pgid.as_raw());
        if sandboxed {
            self.watch.add(pgid.as_raw());
        }
        self.send(&format!("+{pgid}\n"));
    }

    /// Asks the watch to wake the init of the sandbox whose helper is `helper` now.
    pub(crate) fn wake_sandbox(&self, helper: Pid) {
        self.watch.wake(helper.as_raw());
    }

    pub(crate) fn unregister(&self, pgid: Pid) {
        crate::sandbox::servers::unregister(pgid.as_raw());
        self.watch.remove(pgid.as_raw());
        self.send(&format!("-{pgid}\n"));
    }

    fn send(&self, line: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // A line of a few bytes into a pipe the helper drains at once: this never blocks for long.
        if let Some((_, stdin)) = inner.as_mut()
            && let Err(error) = stdin.write_all(line.as_bytes())
        {
            tracing::warn!(%error, "the orphan guard is gone; server processes may outlive a crashed daemon");
            *inner = None;
        }
    }

    /// Stops the watch, closes the pipe (every server is stopped by now) and reaps the helper.
    pub async fn stop(&self) {
        self.watch.stop();
        let taken = self.inner.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((mut child, stdin)) = taken {
            drop(stdin);
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
    }
}

/// The watch, where this kernel allows it; else each sandbox looks at itself.
fn start_watch() -> crate::sandbox::watch::Watch {
    use crate::sandbox::watch::{PERIOD, Watch, available};
    if !available() {
        tracing::info!("this kernel lacks /proc/PID/task/TID/children or pidfds: each idle sandbox looks at itself every few seconds");
        return Watch::disabled();
    }
    Watch::start(PERIOD).unwrap_or_else(|error| {
        tracing::warn!(%error, "cannot start the sandbox watch: each idle sandbox looks at itself every few seconds");
        Watch::disabled()
    })
}

/// The program to run sandboxed servers with: `toolhost-sandbox` beside `toolhost` (two of its
/// processes stay up per server, and a binary of the sandbox's code alone keeps each one's
/// private memory to about a tenth of toolhost's), when it says it holds the very sandbox code
/// this toolhost was built with; else toolhost itself, which runs the same code as
/// `toolhost __sandbox`. A helper from another build is never run: the plan they exchange may
/// differ.
fn sandbox_program(toolhost: &Path) -> std::path::PathBuf {
    let small = toolhost.with_file_name(crate::sandbox::SMALL_HELPER);
    if !small.is_file() {
        return toolhost.to_path_buf();
    }
    let said = Command::new(&small).arg(crate::sandbox::IDENTITY_COMMAND).stdin(Stdio::null()).stderr(Stdio::null()).output();
    match said {
        Ok(output) if output.status.success() && String::from_utf8_lossy(&output.stdout).trim() == crate::sandbox::IDENTITY => small,
        Ok(output) => {
            let identity: String = String::from_utf8_lossy(&output.stdout).trim().chars().take(80).collect();
            tracing::warn!(helper = %small.display(), %identity, expected = crate::sandbox::IDENTITY,
                "the sandbox helper beside toolhost is from another build; sandboxed servers run as `toolhost __sandbox` instead");
            toolhost.to_path_buf()
        }
        Err(error) => {
            tracing::warn!(helper = %small.display(), %error, "cannot run the sandbox helper beside toolhost; sandboxed servers run as `toolhost __sandbox` instead");
            toolhost.to_path_buf()
        }
    }
}

/// The helper's main loop (`toolhost __reap`): track groups, kill the rest at end of input.
pub fn run_helper() {
    let mut groups: BTreeSet<i32> = BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (sign, number) = line.split_at(line.len().min(1));
        let Ok(pgid) = number.parse::<i32>() else { continue };
        match sign {
            "+" => {
                groups.insert(pgid);
            }
            "-" => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}
