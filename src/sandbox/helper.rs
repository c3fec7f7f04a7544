//! `toolhost __sandbox PLAN`: the process the daemon starts and supervises for a sandboxed
//! server. It makes the namespaces, forks their init, and exits as the init does.

use std::io::Write;
use std::os::fd::FromRawFd;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigHandler, Signal, kill, signal};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, getgid, getpid, getuid};

use super::{Network, Plan, REPORT_FD, Report};

/// The exit code when the sandbox could not be built (the server never ran).
pub(super) const SETUP_FAILED: i32 = 125;

/// Where the helper and the init say how things went: fd 3, or nowhere when the daemon did
/// not give one (a person running the helper by hand).
pub(super) struct Reporter(Option<std::fs::File>);

impl Reporter {
    fn from_fd() -> Reporter {
        // Only ours if it is open; then close-on-exec, so that the server never holds it.
        let open = nix::fcntl::fcntl(unsafe { std::os::fd::BorrowedFd::borrow_raw(REPORT_FD) }, nix::fcntl::FcntlArg::F_GETFD).is_ok();
        if !open {
            return Reporter(None);
        }
        // SAFETY: fd 3 is open (checked above) and nothing else in this process owns it.
        let file = unsafe { std::fs::File::from_raw_fd(REPORT_FD) };
        let _ = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
        Reporter(Some(file))
    }

    pub(super) fn send(&mut self, report: &Report) {
        if let Some(file) = &mut self.0 {
            let _ = file.write_all(report.line().as_bytes());
        }
    }

    /// Reports a failure to build the sandbox and exits. Also on stderr, which the daemon
    /// logs, for a person running the helper by hand.
    #[allow(clippy::print_stderr)]
    pub(super) fn fail(&mut self, stage: &str, error: impl std::fmt::Display) -> ! {
        self.send(&Report::Error(format!("{stage}: {error}")));
        eprintln!("toolhost sandbox: {stage}: {error}");
        std::process::exit(SETUP_FAILED)
    }
}

/// The helper's main: never returns.
pub fn run(plan_json: &str) -> ! {
    let mut reporter = Reporter::from_fd();
    let plan: Plan = match serde_json::from_str(plan_json) {
        Ok(plan) => plan,
        Err(error) => reporter.fail("the sandbox plan", error),
    };
    // The daemon stops a server with SIGTERM to its process group: the server gets it and
    // exits in its own time; this process waits for that instead of dying first.
    for ignored in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: setting a disposition to SIG_IGN installs no handler code.
        let _ = unsafe { signal(ignored, SigHandler::SigIgn) };
    }
    let (uid, gid) = (getuid(), getgid());
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if plan.network != Network::All {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if let Err(errno) = unshare(flags) {
        reporter.fail("cannot create the namespaces (user namespaces unavailable?)", errno.desc());
    }
    // The same ids inside as outside: files keep their owners, and nothing maps to anyone else.
    let maps = [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (file, content) in maps {
        if let Err(error) = std::fs::write(file, content) {
            reporter.fail(&format!("cannot write {file}"), error);
        }
    }
    // SAFETY: this process is single-threaded (the daemon exec'd it; nothing here spawns threads).
    match unsafe { fork() } {
        Err(errno) => reporter.fail("cannot fork the sandbox's init", errno.desc()),
        Ok(ForkResult::Child) => {
            // The init dies with this helper, and the whole namespace with the init.
            // SAFETY: prctl with integer arguments.
            // (Should the helper die before this line, the server still ends at the end of its
            // input, which was the daemon's; getppid() cannot tell, it is 0 across namespaces.)
            unsafe { nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL as nix::libc::c_ulong, 0, 0, 0) };
            super::init::run(&plan, &mut reporter)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(reporter);
            relay(child)
        }
    }
}

/// Waits for the init and ends the same way: the same exit code, or the same signal.
fn relay(init: Pid) -> ! {
    loop {
        match waitpid(init, None) {
            Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
            Ok(WaitStatus::Signaled(_, signal_, _)) => {
                // SAFETY: restoring the default disposition installs no handler code.
                let _ = unsafe { signal(signal_, SigHandler::SigDfl) };
                let _ = kill(getpid(), signal_);
                std::process::exit(128 + signal_ as i32)
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => std::process::exit(SETUP_FAILED),
        }
    }
}
