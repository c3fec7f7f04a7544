//! `toolhost __sandbox PLAN`: the process the daemon starts and supervises for a sandboxed
//! server. It makes the namespaces, forks their init, and exits as the init does.

use nix::fcntl::OFlag;
use nix::sched::{CloneFlags, clone};
use nix::sys::signal::{SigHandler, Signal, kill, signal};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, getpid, getuid, pipe2, setgroups};

use super::reporter::{Reporter, SETUP_FAILED};
use super::{Network, Plan, sandbox_ids};

/// The init's stack (it runs the filesystem setup and Landlock's and seccomp's builders).
const INIT_STACK: usize = 8 << 20;

/// Marks every descriptor above stderr close-on-exec: whatever the daemon inherited from what
/// started it (a shell's, a supervisor's) never reaches a server it runs, sandboxed or not.
/// Call it first, before anything opens a descriptor of its own.
pub fn seal_inherited_descriptors() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC changes flags only; no memory is touched.
    let sealed = unsafe { nix::libc::close_range(3, nix::libc::c_uint::MAX, nix::libc::CLOSE_RANGE_CLOEXEC as nix::libc::c_int) };
    if sealed != 0 {
        // Kernels before 5.11: one descriptor at a time, as /proc lists them.
        let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .map(|fds| fds.flatten().filter_map(|fd| fd.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        for fd in open.into_iter().filter(|fd| *fd > 2) {
            // SAFETY: F_SETFD on a number that is, or was a moment ago, a descriptor: at worst EBADF.
            unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) };
        }
    }
}

/// Makes the process `command` starts the child subreaper of its descendants (kept across its
/// `execve`): a server run without a sandbox that double-forks a process into a session of
/// its own (`setsid`) still has that process below it, where [`super::servers::owns_pid`]
/// finds it, instead of under pid 1, where it would pass for anyone of the daemon's user. What
/// outlives the server itself does go to pid 1: only a sandbox (a PID namespace) holds that.
pub fn adopt_orphans(command: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl, which
    // is async-signal-safe, with integer arguments.
    unsafe {
        command.pre_exec(|| {
            if nix::libc::prctl(nix::libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The helper's main: never returns.
pub fn run(plan_json: &str) -> ! {
    // Only stdio, the report channel and (for a proxied network) the egress channel cross into
    // the sandbox: close anything else the helper was started with before a process of the
    // sandbox exists.
    // SAFETY: closes descriptors nothing in this fresh process has opened or owns.
    unsafe { nix::libc::close_range(super::EGRESS_FD as nix::libc::c_uint + 1, nix::libc::c_uint::MAX, 0) };
    let mut reporter = Reporter::from_fd();
    let plan: Plan = match serde_json::from_str(plan_json) {
        Ok(plan) => plan,
        Err(error) => reporter.fail("the sandbox plan", error),
    };
    if plan.network != Network::Proxied {
        // SAFETY: closes a descriptor nothing in this process owns (or EBADF).
        unsafe { nix::libc::close(super::EGRESS_FD) };
    }
    // The daemon stops a server with SIGTERM to its process group: the server gets it and
    // exits in its own time; this process waits for that instead of dying first.
    for ignored in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: setting a disposition to SIG_IGN installs no handler code.
        let _ = unsafe { signal(ignored, SigHandler::SigIgn) };
    }
    if getuid().is_root() {
        // Root's supplementary groups must not reach the sandbox.
        if let Err(errno) = setgroups(&[]) {
            reporter.fail("cannot drop the supplementary groups", errno.desc());
        }
    }
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if plan.network != Network::All {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    let (go_read, go_write) = match pipe2(OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(errno) => reporter.fail("cannot make a pipe", errno.desc()),
    };
    let mut stack = vec![0u8; INIT_STACK];
    let init_main = Box::new(|| -> isize {
        // The init dies with this helper, and the whole namespace with the init.
        // SAFETY: prctl with integer arguments.
        unsafe { nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL as nix::libc::c_ulong, 0, 0, 0) };
        // Wait until the helper has written the id maps (a closed pipe without a byte: it failed).
        let mut byte = [0u8; 1];
        if !matches!(nix::unistd::read(&go_read, &mut byte), Ok(1)) {
            std::process::exit(SETUP_FAILED);
        }
        super::init::run(&plan, &mut reporter)
    });
    // SAFETY: this process is single-threaded (the daemon exec'd it and nothing here starts a
    // thread); the child runs on its own copy of the memory (no CLONE_VM), on `stack`.
    let init = match unsafe { clone(init_main, &mut stack, flags, Some(Signal::SIGCHLD as i32)) } {
        Ok(init) => init,
        Err(errno) => reporter.fail("cannot create the namespaces (user namespaces unavailable?)", errno.desc()),
    };
    if let Err(error) = write_maps(init) {
        let _ = kill(init, Signal::SIGKILL);
        reporter.fail("cannot map the sandbox's user", error);
    }
    let _ = nix::unistd::write(&go_write, b"1");
    drop(go_write);
    // The init reports from here on, on its own copy of the descriptor.
    drop(reporter);
    relay(init)
}

/// The init's uid and gid maps, written from outside (where a root helper may map any id, and
/// an unprivileged one only itself): one id inside, the same number outside.
fn write_maps(init: Pid) -> std::io::Result<()> {
    let (uid, gid) = sandbox_ids();
    // A root helper maps root as well: the init builds the view as root of the namespace
    // (creating mount points needs its own id mapped), then becomes the sandbox's id.
    let (uid_map, gid_map) = if getuid().is_root() {
        (format!("0 0 1\n{uid} {uid} 1\n"), format!("0 0 1\n{gid} {gid} 1\n"))
    } else {
        (format!("{uid} {uid} 1\n"), format!("{gid} {gid} 1\n"))
    };
    std::fs::write(format!("/proc/{init}/setgroups"), "deny")?;
    std::fs::write(format!("/proc/{init}/uid_map"), uid_map)?;
    std::fs::write(format!("/proc/{init}/gid_map"), gid_map)
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
