//! Which processes are supervised servers, so that a server is never taken for a caller.
//!
//! Every stdio server is started as the leader of its own process group, and registered here
//! by that leader's pid until it is reaped. A process belongs to a server when it or one of its
//! ancestors is a leader, or when its process group is one: a sandboxed server's processes can
//! never leave its PID namespace (whose init is the leader's child), and a server without a
//! sandbox that forks keeps its group unless it makes a new session on purpose.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// How far up the process tree a lookup walks (init is rarely more than a dozen away).
const MAX_ANCESTORS: usize = 64;

static LEADERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

pub fn register(leader: i32) {
    LEADERS.lock().unwrap_or_else(PoisonError::into_inner).insert(leader);
}

pub fn unregister(leader: i32) {
    LEADERS.lock().unwrap_or_else(PoisonError::into_inner).remove(&leader);
}

/// Whether a process of `uid` could be a server's: servers run as the daemon's user, or, under
/// a root daemon, as the sandbox's id. Anyone else is not looked up at all.
pub fn may_be_a_server(uid: u32) -> bool {
    uid == nix::unistd::getuid().as_raw() || uid == super::SANDBOX_ID
}

fn leaders() -> BTreeSet<i32> {
    LEADERS.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Whether `pid` (as this daemon's PID namespace numbers it) belongs to a supervised server.
/// Reads `/proc`: call it once per connection, off the async threads.
pub fn owns_pid(pid: i32) -> bool {
    let leaders = leaders();
    if leaders.is_empty() {
        return false;
    }
    let mut current = pid;
    for _ in 0..MAX_ANCESTORS {
        if leaders.contains(&current) {
            return true;
        }
        let Some((parent, group)) = stat(current) else { return false };
        if leaders.contains(&group) {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        current = parent;
    }
    false
}

/// Who holds a loopback socket whose owner's uid may be a server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketHolder {
    /// A process that is not a supervised server's: a caller, with its pid.
    Caller(i32),
    /// A process of a supervised server.
    Server,
    /// No process shows it, and a process of that uid hides its descriptors (it made itself
    /// non-dumpable, which an unprivileged daemon cannot see past): it cannot be told from a
    /// server, so it is taken for one.
    Hidden,
    /// Nobody holds it any more (the client is gone).
    Gone,
}

/// Which process holds the socket with this inode, created by `uid` (the peer of a loopback
/// TCP connection, which names no pid). Looks at every process in `/proc`, newest first (the
/// client is usually young); a process whose descriptors cannot be read counts only when it
/// runs as `uid`, and then, if nobody readable holds the socket, the answer is
/// [`SocketHolder::Hidden`], never a caller.
pub fn socket_holder(inode: u64, uid: u32) -> SocketHolder {
    let wanted = format!("socket:[{inode}]");
    let Ok(entries) = std::fs::read_dir("/proc") else { return SocketHolder::Hidden };
    let mut pids: Vec<i32> = entries.flatten().filter_map(|entry| entry.file_name().to_str()?.parse().ok()).collect();
    pids.sort_unstable_by(|a, b| b.cmp(a));
    let mut hidden = false;
    for pid in pids {
        match std::fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(fds) => {
                if fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted.as_str())) {
                    return if owns_pid(pid) { SocketHolder::Server } else { SocketHolder::Caller(pid) };
                }
            }
            Err(_) => hidden |= runs_as(pid, uid),
        }
    }
    if hidden { SocketHolder::Hidden } else { SocketHolder::Gone }
}

/// Whether any of the process's real, effective, saved or filesystem uids is `uid` (from
/// `/proc/PID/status`, which stays readable when the process hides the rest).
fn runs_as(pid: i32, uid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status.lines().find_map(|line| line.strip_prefix("Uid:")).is_some_and(|ids| ids.split_whitespace().any(|id| id.parse() == Ok(uid)))
}

/// When `pid` started, in clock ticks after boot (`/proc/PID/stat` field 22): with the pid, what
/// tells a process from a later one that took its number.
pub fn start_time(pid: i32) -> Option<u64> {
    Some(Stat::read(pid)?.field(22))
}

/// The parent and the process group of `pid`.
fn stat(pid: i32) -> Option<(i32, i32)> {
    let stat = Stat::read(pid)?;
    Some((i32::try_from(stat.field(4)).ok()?, i32::try_from(stat.field(5)).ok()?))
}

/// One `/proc/PID/stat`, read with one `read` into a buffer of its own: the sandbox watch reads
/// two of them per idle sandbox at each look and an init one per process at each of its looks,
/// so no allocation. The kernel writes the line in one go, far shorter than the buffer.
pub(super) struct Stat {
    line: [u8; 4096],
    len: usize,
}

impl Stat {
    pub(super) fn read(pid: i32) -> Option<Stat> {
        use std::io::Read;
        let mut stat = Stat { line: [0; 4096], len: 0 };
        let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
        stat.len = file.read(&mut stat.line).ok()?;
        // A line that fills the buffer may be cut: not one to count on.
        (stat.len < stat.line.len()).then_some(stat)
    }

    /// Field `n` as proc(5) numbers them (after the command name, which may hold spaces and
    /// parentheses), 0 when it is not a number.
    pub(super) fn field(&self, n: usize) -> u64 {
        let line = &self.line[..self.len];
        let Some(end) = line.iter().rposition(|byte| *byte == b')') else { return 0 };
        let rest = line.get(end + 2..).unwrap_or_default();
        let value = rest.split(|byte| *byte == b' ').nth(n.saturating_sub(3)).unwrap_or_default();
        std::str::from_utf8(value).ok().and_then(|value| value.trim().parse().ok()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn a_child_of_a_registered_leader_is_a_server_and_this_process_is_not() {
        let mut child = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
        let pid = child.id() as i32;
        assert!(!owns_pid(pid));
        register(pid);
        assert!(owns_pid(pid));
        assert!(!owns_pid(std::process::id() as i32));
        unregister(pid);
        assert!(!owns_pid(pid));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        assert_eq!(stat(std::process::id() as i32).map(|(parent, _)| parent), Some(nix::unistd::getppid().as_raw()));
    }
}
