//! The sandbox's end of the report channel: fd 3, written by the helper and the init.

use std::io::Write;
use std::os::fd::FromRawFd;

use super::{REPORT_FD, Report};

/// The exit code when the sandbox could not be built (the server never ran).
pub(super) const SETUP_FAILED: i32 = 125;

/// Where the helper and the init say how things went: fd 3, or nowhere when the daemon did
/// not give one (a person running the helper by hand).
pub(super) struct Reporter(Option<std::fs::File>);

impl Reporter {
    pub(super) fn from_fd() -> Reporter {
        // Only ours if it is open; then close-on-exec, so that the server never holds it.
        // Asked by number: a `BorrowedFd` may only be made of a descriptor known to be open,
        // which is what this asks.
        // SAFETY: F_GETFD reads a flag; on a closed number it fails with EBADF and touches nothing.
        let open = unsafe { nix::libc::fcntl(REPORT_FD, nix::libc::F_GETFD) } >= 0;
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
