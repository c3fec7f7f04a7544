//! PID 1 of a sandbox: builds and confines it, runs the server, reaps every process in the
//! namespace, and stops them all when a limit is crossed or the server exits.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

use super::reporter::Reporter;
use super::servers::Stat;
use super::{LimitKind, Limits, Plan, Report};

/// How often the init looks at what the sandbox uses while its processes work.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Without the daemon's watch, the longest it waits between looks while they are idle: the wait
/// doubles from [`SAMPLE_EVERY`] for as long as they used no CPU, since nothing can grow without
/// it (an allocation, a fork, a file opened all take CPU), and a child starting or ending wakes
/// it at once.
const IDLE_SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Clock ticks a second in `/proc/PID/stat` (`USER_HZ`, 100 on every Linux ABI).
const TICKS_PER_SECOND: u64 = 100;
/// The init's exit code when it stopped the sandbox at a limit.
const STOPPED_AT_LIMIT: i32 = 137;

pub(super) fn run(plan: &Plan, reporter: &mut Reporter) -> ! {
    if let Err(error) = super::root::build(plan) {
        reporter.fail("cannot build the server's filesystem view", error);
    }
    if let Err(error) = super::confine::privileged(plan) {
        reporter.fail("cannot confine the server", error);
    }
    let proxy_port = match super::confine::proxy_listener(plan) {
        Ok(port) => port,
        Err(error) => reporter.fail("cannot set up the server's way out", error),
    };
    // The view was built with the helper's credentials (which may reach a grant below a
    // directory only root may enter); from here on, the sandbox's own user. Leaving root of
    // the namespace also clears what capabilities were left.
    let (uid, gid) = super::sandbox_ids();
    if let Err(errno) = nix::unistd::setresgid(gid, gid, gid).and_then(|()| nix::unistd::setresuid(uid, uid, uid)) {
        reporter.fail("cannot switch to the sandbox's user", errno.desc());
    }
    if let Err(error) = super::confine::seal(plan) {
        reporter.fail("cannot confine the server", error);
    }
    let mut wake = SigSet::empty();
    wake.add(Signal::SIGCHLD);
    wake.add(Signal::SIGUSR1);
    if let Err(errno) = wake.thread_block() {
        reporter.fail("cannot block SIGCHLD and SIGUSR1", errno.desc());
    }
    // SAFETY: the init is single-threaded.
    let server = match unsafe { fork() } {
        Err(errno) => reporter.fail("cannot fork the server", errno.desc()),
        Ok(ForkResult::Child) => exec_server(plan, proxy_port, &wake, reporter),
        Ok(ForkResult::Parent { child }) => child,
    };
    reporter.send(&Report::Ready);
    let mut pace = Pace::new(plan.watched, Instant::now());
    loop {
        let woken = wait_for_signal(&wake, pace.wait);
        if let Some(code) = reap(server, reporter) {
            stop_all();
            std::process::exit(code);
        }
        if !pace.look_now(woken, Instant::now()) {
            continue;
        }
        // The cheap look first: the CPU its processes used, all together (the reaped ones'
        // included). Unchanged, nothing else can have changed.
        let now = activity();
        if !pace.moved(now) {
            continue;
        }
        let over = now
            .filter(|used| used.ticks >= plan.limits.cpu_seconds.saturating_mul(TICKS_PER_SECOND))
            .map(|used| {
                (
                    LimitKind::Cpu,
                    format!("its processes used {} s of CPU together, of {}", used.ticks / TICKS_PER_SECOND, plan.limits.cpu_seconds),
                )
            })
            .or_else(|| over_limit(&plan.limits));
        if let Some((kind, detail)) = over {
            reporter.send(&Report::Limit { kind, detail });
            stop_all();
            std::process::exit(STOPPED_AT_LIMIT);
        }
    }
}

/// When the init looks at its sandbox: every [`SAMPLE_EVERY`] while its processes work; once
/// they are still, not until a signal comes (a child started or ended, or the daemon's watch saw
/// them use CPU) when the daemon watches, else after twice the last wait, up to
/// [`IDLE_SAMPLE_EVERY`]. Looks stay at least [`SAMPLE_EVERY`] apart whatever wakes it, so a
/// server that signals its init in a loop gets a look no more often than a busy one.
#[derive(Debug, Clone, PartialEq)]
struct Pace {
    watched: bool,
    /// How long the next wait may last; `None`: until a signal.
    wait: Option<Duration>,
    looked_at: Instant,
    /// A signal came since the last look: look even if the CPU count did not move.
    owed: bool,
    last: Option<Activity>,
}

impl Pace {
    fn new(watched: bool, now: Instant) -> Pace {
        Pace { watched, wait: Some(SAMPLE_EVERY), looked_at: now, owed: true, last: None }
    }

    /// After a wait (`woken`: by a signal, else its time ran out): whether to look now, or wait
    /// out the rest of the spacing first.
    fn look_now(&mut self, woken: bool, now: Instant) -> bool {
        self.owed |= woken;
        let since = now.saturating_duration_since(self.looked_at);
        if since < SAMPLE_EVERY {
            self.wait = Some(SAMPLE_EVERY.saturating_sub(since));
            return false;
        }
        self.looked_at = now;
        true
    }

    /// What the look found: whether to check the limits (the count moved, or a signal asked).
    fn moved(&mut self, now: Option<Activity>) -> bool {
        let moved = now != self.last || self.owed;
        self.owed = false;
        self.last = now;
        self.wait = if moved {
            Some(SAMPLE_EVERY)
        } else if self.watched {
            None
        } else {
            Some(self.wait.unwrap_or(SAMPLE_EVERY).saturating_mul(2).min(IDLE_SAMPLE_EVERY))
        };
        moved
    }
}

/// What the sandbox's processes did, as cheaply as it can be read: their CPU ticks together
/// (the live ones' and, through the init's own children's counters, every one it reaped) and
/// how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Activity {
    ticks: u64,
    processes: u64,
}

fn activity() -> Option<Activity> {
    // The init's own line: fields 16 and 17 are the CPU of the children it reaped.
    let reaped = Stat::read(1).map_or(0, |stat| stat.field(16).saturating_add(stat.field(17)));
    let mut used = Activity { ticks: reaped, processes: 0 };
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        if pid == 1 {
            continue;
        }
        if let Some(stat) = Stat::read(pid) {
            used.ticks = used.ticks.saturating_add(stat.field(14)).saturating_add(stat.field(15));
            used.processes += 1;
        }
    }
    Some(used)
}

fn exec_server(plan: &Plan, proxy_port: Option<u16>, wake: &SigSet, reporter: &mut Reporter) -> ! {
    let _ = wake.thread_unblock();
    let mut command = std::process::Command::new(&plan.program);
    command.arg0(&plan.command).args(&plan.args);
    if let Some(port) = proxy_port {
        // Every client that honours a proxy variable goes out through the daemon's proxy;
        // nothing is exempt (the sandbox's loopback reaches nothing else anyway).
        let proxy = format!("http://127.0.0.1:{port}");
        for name in super::PROXY_VARIABLES {
            command.env(name, &proxy);
        }
        command.env_remove("NO_PROXY").env_remove("no_proxy");
    }
    let error = command.exec();
    reporter.send(&Report::Error(format!("cannot run {}: {error}", plan.command.display())));
    std::process::exit(127)
}

/// Sleeps until a signal of `wake` comes or `wait` has passed (`None`: no limit); whether a
/// signal woke it.
fn wait_for_signal(wake: &SigSet, wait: Option<Duration>) -> bool {
    let Some(wait) = wait else {
        // SAFETY: a valid signal set; the siginfo is not wanted.
        return unsafe { nix::libc::sigwaitinfo(wake.as_ref(), std::ptr::null_mut()) > 0 };
    };
    let timeout =
        nix::libc::timespec { tv_sec: wait.as_secs() as nix::libc::time_t, tv_nsec: nix::libc::c_long::from(wait.subsec_nanos() as i32) };
    // SAFETY: a valid signal set and timeout; the siginfo is not wanted.
    unsafe { nix::libc::sigtimedwait(wake.as_ref(), std::ptr::null_mut(), &timeout) > 0 }
}

/// Reaps every exited process. `Some(code)`: the server itself exited, and the init should end
/// with this code (128 + signal for a killed server, as a shell reports it).
fn reap(server: Pid, reporter: &mut Reporter) -> Option<i32> {
    let mut ended = None;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == server => ended = Some(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                if signal == Signal::SIGXCPU {
                    reporter.send(&Report::Limit { kind: LimitKind::Cpu, detail: "a process used up its CPU time".to_owned() });
                    stop_all();
                    std::process::exit(STOPPED_AT_LIMIT);
                }
                if pid == server {
                    ended = Some(128 + signal as i32);
                }
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return ended,
            Ok(_) => {}
        }
    }
}

/// Kills every other process in the namespace and reaps them.
fn stop_all() {
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    while waitpid(Pid::from_raw(-1), None).is_ok() {}
}

/// Reads what the namespace's processes use (`/proc` shows only them) against the limits.
fn over_limit(limits: &Limits) -> Option<(LimitKind, String)> {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(4096) as u64;
    let (mut tasks, mut memory) = (0u64, 0u64);
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if pid == 1 {
            continue;
        }
        let dir = entry.path();
        tasks += std::fs::read_dir(dir.join("task")).map_or(1, |tasks| tasks.count() as u64);
        memory = memory.saturating_add(proportional_memory(&dir).unwrap_or_else(|| resident_memory(&dir, page)));
        let files = std::fs::read_dir(dir.join("fd")).map_or(0, |fds| fds.count() as u64);
        if files >= u64::from(limits.open_files) {
            return Some((LimitKind::OpenFiles, format!("a process held {files} open files of {}", limits.open_files)));
        }
    }
    if tasks >= u64::from(limits.processes) {
        return Some((LimitKind::Processes, format!("{tasks} processes and threads of {}", limits.processes)));
    }
    if memory > limits.memory_bytes {
        return Some((LimitKind::Memory, format!("{} MiB in use of {} MiB", memory >> 20, limits.memory_bytes >> 20)));
    }
    tmp_full(limits)
}

/// Whether the private `/tmp` (a tmpfs of `limits.tmp_bytes`) is full: no block or no inode
/// left, so that every write in it fails.
fn tmp_full(limits: &Limits) -> Option<(LimitKind, String)> {
    let tmp = nix::sys::statvfs::statvfs("/tmp").ok()?;
    (tmp.blocks_available() == 0 || tmp.files_available() == 0)
        .then(|| (LimitKind::Tmp, format!("its /tmp is full ({} MiB)", limits.tmp_bytes >> 20)))
}

/// A process's proportional share of the memory it has in RAM (`Pss`: pages it shares with
/// its forks count once across them, not once in each).
fn proportional_memory(dir: &std::path::Path) -> Option<u64> {
    let rollup = std::fs::read_to_string(dir.join("smaps_rollup")).ok()?;
    let kib: u64 = rollup.lines().find_map(|line| line.strip_prefix("Pss:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Its resident set, where the kernel has no `smaps_rollup`.
fn resident_memory(dir: &std::path::Path, page: u64) -> u64 {
    std::fs::read_to_string(dir.join("statm"))
        .ok()
        .and_then(|statm| statm.split(' ').nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages.saturating_mul(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STILL: Option<Activity> = Some(Activity { ticks: 7, processes: 1 });
    const BUSY: Option<Activity> = Some(Activity { ticks: 9, processes: 1 });

    /// From a look that found its processes still: what the next waits are.
    fn settled(watched: bool) -> (Pace, Instant) {
        let start = Instant::now();
        let mut pace = Pace::new(watched, start);
        let mut at = start + SAMPLE_EVERY;
        assert!(pace.look_now(false, at), "the first look, at the first timeout");
        assert!(pace.moved(STILL), "the first look checks the limits");
        at += SAMPLE_EVERY;
        assert!(pace.look_now(false, at));
        assert!(!pace.moved(STILL), "nothing moved, nothing to check");
        (pace, at)
    }

    #[test]
    fn a_watched_init_sleeps_until_a_signal_once_its_processes_are_still() {
        let (mut pace, at) = settled(true);
        assert_eq!(pace.wait, None);
        // The watch (or a child) wakes it: it checks even if the count has not moved yet, and
        // looks again soon.
        assert!(pace.look_now(true, at + Duration::from_secs(600)));
        assert!(pace.moved(STILL));
        assert_eq!(pace.wait, Some(SAMPLE_EVERY));
    }

    #[test]
    fn an_unwatched_init_backs_off_to_its_ceiling() {
        let (mut pace, mut at) = settled(false);
        let mut waits = vec![pace.wait];
        for _ in 0..8 {
            at += pace.wait.expect("always a timeout");
            assert!(pace.look_now(false, at));
            assert!(!pace.moved(STILL));
            waits.push(pace.wait);
        }
        let millis: Vec<u128> = waits.iter().map(|wait| wait.expect("a timeout").as_millis()).collect();
        assert_eq!(millis, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn busy_processes_are_looked_at_every_sample_and_signals_cannot_hurry_it() {
        let (mut pace, at) = settled(true);
        let woken = at + Duration::from_secs(1);
        assert!(pace.look_now(true, woken));
        assert!(pace.moved(BUSY));
        // A server signalling its init in a loop: no look until 50 ms after the last.
        for millis in [1, 10, 49] {
            assert!(!pace.look_now(true, woken + Duration::from_millis(millis)));
            assert_eq!(pace.wait, Some(SAMPLE_EVERY - Duration::from_millis(millis)));
        }
        // At the timeout the look it owes is made, and it checks (a signal asked) though the
        // count has not moved since.
        assert!(pace.look_now(false, woken + SAMPLE_EVERY));
        assert!(pace.moved(BUSY));
        assert!(pace.look_now(false, woken + SAMPLE_EVERY * 2));
        assert!(!pace.moved(BUSY));
        assert_eq!(pace.wait, None);
    }
}
