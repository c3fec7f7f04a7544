//! The daemon's end of the report channel: fd 3 of the helper.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::libc;
use tokio::net::unix::pipe;

use super::REPORT_FD;

/// The pipe a helper reports on; drop [`ReportPipe::sender`] once the helper is spawned.
pub struct ReportPipe {
    pub receiver: pipe::Receiver,
    pub sender: OwnedFd,
}

/// Makes the write end of a new pipe the child's fd 3.
///
/// # Errors
/// The pipe cannot be created.
pub fn attach(command: &mut tokio::process::Command) -> std::io::Result<ReportPipe> {
    let (sender, receiver) = pipe::pipe()?;
    let sender = sender.into_blocking_fd()?;
    let raw = sender.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and calls only dup2 and
    // fcntl, which are async-signal-safe; `raw` stays open in the parent until after the spawn.
    unsafe {
        command.pre_exec(move || {
            let result = if raw == REPORT_FD {
                // Already fd 3: only the close-on-exec flag has to go.
                libc::fcntl(raw, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, REPORT_FD)
            };
            if result < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        });
    }
    Ok(ReportPipe { receiver, sender })
}
