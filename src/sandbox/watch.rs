//! The daemon's one look at every sandbox: a single thread that, once a period, reads how much
//! CPU each sandbox's processes have used together and wakes the init of every sandbox whose
//! count moved (`SIGUSR1`), so that the init checks its limits. An idle sandbox's init sleeps
//! until a signal comes: a thousand idle servers cost one wake-up a period, not a thousand. A
//! sandbox still at look after look is looked at less often (every period, then every second
//! period…, up to [`STILL_EVERY`] periods), and a request written to its server looks at once.
//!
//! The count is read from outside the sandbox (the host's `/proc`): the init is the helper's
//! only child, found through `/proc/PID/task/TID/children`, and held by a pidfd so that a
//! signal never reaches a process that took a dead init's pid. The init's own CPU is left out
//! (its look must not count as the sandbox's activity, or every look would cause the next).

use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::servers::Stat;

/// How often the daemon looks at every sandbox: coarse, since the init checks its limits every
/// 50 ms for as long as its processes work; this only notices that they started to.
pub const PERIOD: Duration = Duration::from_secs(1);
/// The most periods between two looks at a sandbox whose processes stay still: what the init's
/// own look used to wait at most, so nothing is seen later than before.
pub const STILL_EVERY: u32 = 5;
/// Processes walked in one sandbox at most (its process limit is far below).
const MAX_WALKED: usize = 16_384;

/// The watching thread's handle: the daemon adds each sandbox's helper when it starts it and
/// removes it when it is reaped.
pub struct Watch {
    inner: Mutex<Option<(Sender<Change>, JoinHandle<()>)>>,
}

enum Change {
    Add(i32),
    Remove(i32),
    /// Wake this sandbox's init now (the daemon just gave its server work).
    Wake(i32),
}

impl Watch {
    /// Starts the thread (`sandbox-watch`). It sleeps without a timeout while no sandbox runs.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(period: Duration) -> std::io::Result<Watch> {
        let (sender, receiver) = channel();
        let thread = std::thread::Builder::new().name("sandbox-watch".to_owned()).spawn(move || run(&receiver, period))?;
        Ok(Watch { inner: Mutex::new(Some((sender, thread))) })
    }

    /// A watch that looks at nothing: sandboxes then look at themselves (see [`available`]).
    pub fn disabled() -> Watch {
        Watch { inner: Mutex::new(None) }
    }

    /// Whether sandboxes started now are watched (an idle init may then sleep until woken).
    pub fn is_running(&self) -> bool {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// The sandbox whose helper is `helper` (a child of this process, not yet reaped).
    pub fn add(&self, helper: i32) {
        self.send(Change::Add(helper));
    }

    pub fn remove(&self, helper: i32) {
        self.send(Change::Remove(helper));
    }

    /// Wakes the sandbox's init now, without waiting for the next look.
    pub fn wake(&self, helper: i32) {
        self.send(Change::Wake(helper));
    }

    fn send(&self, change: Change) {
        if let Some((sender, _)) = self.inner.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            let _ = sender.send(change);
        }
    }

    /// Stops the thread and waits for it (at most one look, which reads only `/proc`).
    pub fn stop(&self) {
        let taken = self.inner.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((sender, thread)) = taken {
            drop(sender);
            if thread.join().is_err() {
                tracing::error!("the sandbox watch panicked; idle sandboxes were looking at themselves since");
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether this kernel lets the daemon watch sandboxes from outside: `/proc/PID/task/TID/children`
/// (`CONFIG_PROC_CHILDREN`) and pidfds (Linux 5.3). Without them each init looks at its own
/// sandbox, backing off to every few seconds while it is idle.
pub fn available() -> bool {
    let me = std::process::id();
    std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists() && pidfd_open(me as i32).is_some()
}

fn run(changes: &Receiver<Change>, period: Duration) {
    let mut sandboxes: BTreeMap<i32, Sandbox> = BTreeMap::new();
    let mut next_look = Instant::now();
    loop {
        let change = if sandboxes.is_empty() {
            changes.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            changes.recv_timeout(next_look.saturating_duration_since(Instant::now()))
        };
        match change {
            Ok(Change::Add(helper)) => {
                if sandboxes.is_empty() {
                    next_look = after(Instant::now(), period);
                }
                sandboxes.insert(helper, Sandbox::new(helper));
            }
            Ok(Change::Remove(helper)) => {
                sandboxes.remove(&helper);
            }
            Ok(Change::Wake(helper)) => {
                if let Some(sandbox) = sandboxes.get_mut(&helper) {
                    sandbox.wake();
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                // A look that panics (a bug, whatever /proc said) costs that sandbox its look,
                // never the watch: the other inits would sleep unwatched from then on.
                for sandbox in sandboxes.values_mut() {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sandbox.tick())).is_err() {
                        tracing::error!(helper = sandbox.helper, "the sandbox watch's look panicked; it goes on with the next");
                        sandbox.init = None;
                    }
                }
                next_look = after(Instant::now(), period);
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn after(now: Instant, period: Duration) -> Instant {
    now.checked_add(period).unwrap_or(now)
}

/// One sandbox as the watch knows it.
struct Sandbox {
    helper: i32,
    /// The init, once it exists: its pid (in this namespace) and a pidfd that names it alone.
    init: Option<(i32, OwnedFd)>,
    /// The CPU ticks its processes had used at the last look.
    used: Option<u64>,
    /// The init's descendants the last walk found.
    processes: Vec<i32>,
    /// Looks in a row that found its processes still, and periods left until the next look.
    still: u32,
    due_in: u32,
}

impl Sandbox {
    fn new(helper: i32) -> Sandbox {
        Sandbox { helper, init: None, used: None, processes: Vec::new(), still: 0, due_in: 1 }
    }

    /// One period passed: a look if one is due, the next one further off while it is still.
    fn tick(&mut self) {
        self.due_in = self.due_in.saturating_sub(1);
        if self.due_in > 0 {
            return;
        }
        let moved = self.look();
        self.paced(moved);
    }

    /// After a look: the next one in a period if its processes moved, else twice as far off as
    /// the last gap, up to [`STILL_EVERY`].
    fn paced(&mut self, moved: bool) {
        self.still = if moved { 0 } else { self.still.saturating_add(1) };
        self.due_in = 1u32.checked_shl(self.still).unwrap_or(u32::MAX).min(STILL_EVERY);
    }

    /// The quick look first: the processes the last walk found, which is all of them unless
    /// one of them used CPU since (a fork takes some). Only when the count moved, a new walk.
    /// Whether it moved (or could not be read yet).
    fn look(&mut self) -> bool {
        let before = self.used;
        let known = std::mem::take(&mut self.processes);
        let Some((init, pidfd)) = self.init() else { return true };
        let init = *init;
        let still = before.is_some() && ticks_of(init, &known) == before;
        if still {
            self.processes = known;
            return false;
        }
        if before.is_some() {
            wake(pidfd);
        }
        let (used, processes) = walk(init);
        self.used = Some(used);
        self.processes = processes;
        true
    }

    /// Wakes its init now (its server was sent work), and looks at it from the next period on.
    fn wake(&mut self) {
        (self.still, self.due_in) = (0, 1);
        if let Some((_, pidfd)) = self.init() {
            wake(pidfd);
        }
    }

    fn init(&mut self) -> Option<&(i32, OwnedFd)> {
        if self.init.is_none() {
            self.init = find_init(self.helper);
        }
        self.init.as_ref()
    }
}

/// The helper's only child, held by a pidfd; `None` before the helper has cloned it or after it
/// ended.
fn find_init(helper: i32) -> Option<(i32, OwnedFd)> {
    let children = std::fs::read_to_string(format!("/proc/{helper}/task/{helper}/children")).ok()?;
    let pid: i32 = children.split_whitespace().next()?.parse().ok()?;
    let pidfd = pidfd_open(pid)?;
    // The pid named the helper's child when the file was read; the pidfd is that process only if
    // it still is (the helper, not yet reaped by the daemon, keeps its own pid from being reused).
    let parent = Stat::read(pid)?.field(4);
    (parent == u64::try_from(helper).ok()?).then_some((pid, pidfd))
}

/// CPU ticks used by the init's descendants, walking them all: the live ones' (with what each
/// reaped), and what the init reaped; the init's own ticks are left out. With the descendants.
fn walk(init: i32) -> (u64, Vec<i32>) {
    let mut total = reaped_by(init);
    let mut found = Vec::new();
    let mut pending = children(init, 1);
    while let Some(pid) = pending.pop() {
        if found.len() >= MAX_WALKED {
            break;
        }
        let Some(stat) = Stat::read(pid) else { continue };
        total = total.saturating_add(used(&stat));
        found.push(pid);
        let threads = usize::try_from(stat.field(20)).unwrap_or(1);
        pending.extend(children(pid, threads));
    }
    (total, found)
}

/// The same count over `processes` alone; `None` when one of them is gone.
fn ticks_of(init: i32, processes: &[i32]) -> Option<u64> {
    processes.iter().try_fold(reaped_by(init), |total, pid| Some(total.saturating_add(used(&Stat::read(*pid)?))))
}

/// What the init's reaped children used (fields 16 and 17 of its stat).
fn reaped_by(init: i32) -> u64 {
    Stat::read(init).map_or(0, |stat| stat.field(16).saturating_add(stat.field(17)))
}

/// What a process used, and its reaped children (fields 14 to 17).
fn used(stat: &Stat) -> u64 {
    (14..=17).fold(0u64, |sum, n| sum.saturating_add(stat.field(n)))
}

/// The children of every thread of `pid` (a thread that forks is its child's parent).
fn children(pid: i32, threads: usize) -> Vec<i32> {
    let read = |tid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children"))
            .map(|text| text.split_whitespace().filter_map(|child| child.parse().ok()).collect::<Vec<i32>>())
            .unwrap_or_default()
    };
    if threads <= 1 {
        return read(&pid.to_string());
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks.flatten().flat_map(|task| read(&task.file_name().to_string_lossy())).collect()
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the descriptor was just returned to this process and is owned by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Wakes the init: `SIGUSR1`, which it keeps blocked and waits for (a namespace's init gets no
/// signal from outside it has not asked for, so nothing else can come of it).
fn wake(pidfd: &OwnedFd) {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            nix::libc::SIGUSR1,
            std::ptr::null::<nix::libc::siginfo_t>(),
            0,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_can_watch_from_outside() {
        assert!(available(), "the tests' machines have /proc/PID/task/TID/children and pidfds");
    }

    #[test]
    fn a_still_sandbox_is_looked_at_less_often_up_to_its_ceiling_and_work_brings_it_back() {
        let mut sandbox = Sandbox::new(i32::MAX);
        // Found still look after look: the gaps between looks grow to the ceiling.
        let gaps: Vec<u32> = (0..6)
            .map(|_| {
                sandbox.paced(false);
                sandbox.due_in
            })
            .collect();
        assert_eq!(gaps, [2, 4, STILL_EVERY, STILL_EVERY, STILL_EVERY, STILL_EVERY]);
        // The periods pass: no look until the gap is over (a helper with no init never has one
        // to find, so each look says it moved).
        for _ in 1..STILL_EVERY {
            sandbox.tick();
            assert!(sandbox.due_in > 0 && sandbox.still > 0, "no look before its turn");
        }
        sandbox.tick();
        assert_eq!((sandbox.still, sandbox.due_in), (0, 1), "looked, and (moving) looked at every period again");
        sandbox.paced(false);
        sandbox.wake();
        assert_eq!((sandbox.still, sandbox.due_in), (0, 1), "a request brings the next look to the next period");
    }

    /// `sh` stands for a helper and the `sleep` it starts for its init: the watch finds that
    /// child, and its wake-up reaches it (a `sleep` has no use for SIGUSR1 and dies of it).
    #[test]
    fn the_helpers_child_is_found_and_woken_through_its_pidfd() {
        use std::io::BufRead;
        let mut helper = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo started; wait $!; echo $?"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh");
        let mut out = std::io::BufReader::new(helper.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line).expect("sh says it started its child");
        assert_eq!(line.trim(), "started");
        let helper_pid = helper.id() as i32;
        let mut sandbox = Sandbox::new(helper_pid);
        let init = sandbox.init().map(|(pid, _)| *pid).expect("the helper's child");
        assert_eq!(Stat::read(init).expect("its stat").field(4), helper_pid as u64);
        let own = Stat::read(std::process::id() as i32).expect("this process's stat");
        assert_eq!(own.field(4), u64::from(std::os::unix::process::parent_id()), "field 4 is the parent");
        sandbox.look();
        assert!(sandbox.used.is_some(), "a look counts the child's CPU");
        sandbox.wake();
        line.clear();
        out.read_line(&mut line).expect("sh says how its child ended");
        assert_eq!(line.trim(), (128 + nix::libc::SIGUSR1).to_string(), "the child got SIGUSR1");
        assert!(helper.wait().expect("sh").success());
        // Nothing is found below a process without children, and nothing is signalled.
        assert!(find_init(std::process::id() as i32).is_none_or(|(pid, _)| pid != init));
    }
}
