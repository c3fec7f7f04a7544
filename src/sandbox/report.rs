//! The daemon's end of the report channel (fd 3 of the helper) and of the egress channel (fd 4,
//! for a proxied network: the init sends the listener of the sandbox's proxy on it).

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

/// Makes one end of a new Unix socket pair the child's fd 4 ([`super::EGRESS_FD`]); the other
/// end is the daemon's, to receive the proxy listener on. Drop the returned pair's second value
/// once the helper is spawned.
///
/// # Errors
/// The socket pair cannot be created.
pub fn attach_egress(command: &mut tokio::process::Command) -> std::io::Result<(std::os::unix::net::UnixStream, OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let theirs = OwnedFd::from(theirs);
    let raw = theirs.as_raw_fd();
    // SAFETY: as in `attach`: dup2 and fcntl only, between fork and exec; `raw` stays open in
    // the parent until after the spawn.
    unsafe {
        command.pre_exec(move || {
            let result = if raw == super::EGRESS_FD { libc::fcntl(raw, libc::F_SETFD, 0) } else { libc::dup2(raw, super::EGRESS_FD) };
            if result < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        });
    }
    Ok((ours, theirs))
}

/// Blocks until the init sends the proxy listener on `channel`: one byte with the descriptor
/// attached (`SCM_RIGHTS`).
///
/// # Errors
/// The channel fails or closes without a descriptor (the sandbox did not get that far).
pub fn receive_listener(channel: &std::os::unix::net::UnixStream) -> std::io::Result<std::net::TcpListener> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::FromRawFd;
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut io = [std::io::IoSliceMut::new(&mut byte)];
    let message = recvmsg::<()>(channel.as_raw_fd(), &mut io, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    for control in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = control {
            let mut owned: Vec<OwnedFd> = fds
                .iter()
                // SAFETY: the kernel just installed these descriptors in this process; nothing
                // else refers to them.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(*fd) })
                .collect();
            if let Some(fd) = owned.pop() {
                return Ok(std::net::TcpListener::from(fd));
            }
        }
    }
    Err(std::io::Error::other("the sandbox closed its egress channel without a listener"))
}
