//! What the init does to itself, and so to the server it forks, once the view is built:
//! limits, the network, no capabilities, Landlock, and the syscall filter (last: it forbids
//! what the steps before it need).

use std::collections::BTreeMap;

use landlock::{ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, path_beneath_rules};
use nix::libc;
use nix::sys::resource::{Resource, setrlimit};
use seccompiler::{BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch};

use super::setup::{During, SetupError};
use super::{Limits, Network, Plan};

/// How much lower than the daemon a server's processes are scheduled.
const NICE: libc::c_int = 10;

/// What needs the namespace's capabilities: limits, the loopback interface, and emptying the
/// bounding and inheritable sets (with `SECBIT_NOROOT`, uid 0 gains nothing at exec).
pub(super) fn privileged(plan: &Plan) -> Result<(), SetupError> {
    limits(&plan.limits)?;
    if matches!(plan.network, Network::Loopback | Network::Proxied) {
        loopback_up()?;
    }
    drop_capabilities()
}

/// With [`Network::Proxied`]: a listener on the sandbox's own loopback, handed to the daemon
/// (which serves the proxy on it) over [`super::EGRESS_FD`]; its port, for the proxy variables.
pub(super) fn proxy_listener(plan: &Plan) -> Result<Option<u16>, SetupError> {
    use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
    use std::io::IoSlice;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    if plan.network != Network::Proxied {
        return Ok(None);
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).during("listen for the proxy on the sandbox's loopback")?;
    let port = listener.local_addr().during("read the proxy listener's port")?.port();
    // SAFETY: the daemon made EGRESS_FD this process's for Proxied (the helper kept it open),
    // and nothing else here owns it; it is closed when `channel` drops, below.
    let channel = unsafe { OwnedFd::from_raw_fd(super::EGRESS_FD) };
    let fds = [listener.as_raw_fd()];
    sendmsg::<UnixAddr>(channel.as_raw_fd(), &[IoSlice::new(b"L")], &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
        .during("hand the proxy listener to the daemon")?;
    Ok(Some(port))
}

/// What the sandbox's user does to itself last: Landlock, no new privileges, the filter.
pub(super) fn seal(plan: &Plan) -> Result<(), SetupError> {
    landlock(plan)?;
    // SAFETY: prctl with integer arguments. Required for the filter; also keeps setuid
    // programs from granting anything.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(SetupError::last_os("set no_new_privs"));
    }
    seccomp()
}

fn limits(limits: &Limits) -> Result<(), SetupError> {
    let set = |resource, soft: u64, hard: u64, name: &str| setrlimit(resource, soft, hard).during(format!("set the {name} limit"));
    set(Resource::RLIMIT_NOFILE, u64::from(limits.open_files), u64::from(limits.open_files), "open files")?;
    // The init counts as one of the namespace's processes.
    let processes = u64::from(limits.processes).saturating_add(1);
    set(Resource::RLIMIT_NPROC, processes, processes, "process")?;
    // The kernel's per-process bound; the init watches the sum of all processes.
    let data = limits.memory_bytes.saturating_mul(2);
    set(Resource::RLIMIT_DATA, data, data, "data")?;
    set(Resource::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds.saturating_add(5), "CPU time")?;
    // A core dump would hold whatever secrets the server had in memory.
    set(Resource::RLIMIT_CORE, 0, 0, "core size")?;
    // SAFETY: setpriority with integer arguments, on this process.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) } != 0 {
        return Err(SetupError::last_os("lower the priority"));
    }
    Ok(())
}

/// Brings up the sandbox's own loopback interface (its network namespace starts with it down).
fn loopback_up() -> Result<(), SetupError> {
    // SAFETY: plain socket and ioctl calls on a zeroed, correctly sized ifreq; the socket is closed.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if socket < 0 {
            return Err(SetupError::last_os("open a socket for lo"));
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        let mut result = libc::ioctl(socket, libc::SIOCGIFFLAGS, &mut request);
        if result == 0 {
            request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            result = libc::ioctl(socket, libc::SIOCSIFFLAGS, &request);
        }
        let error = std::io::Error::last_os_error();
        libc::close(socket);
        if result != 0 {
            return Err(SetupError::new("bring up lo", error));
        }
    }
    Ok(())
}

/// Leaves the server no capability, even as uid 0: `SECBIT_NOROOT`, an empty bounding set and
/// an empty inheritable set (the ambient set follows). The fix-up that clears the capabilities
/// when root of the namespace becomes another user stays on (and locked).
fn drop_capabilities() -> Result<(), SetupError> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    // Not SECBIT_NO_SETUID_FIXUP: leaving root of the namespace must clear the capabilities.
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl with integer arguments throughout.
    unsafe {
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) != 0 {
            return Err(SetupError::last_os("set the secure bits"));
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    }
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse::<libc::c_ulong>().ok())
        .unwrap_or(63);
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EINVAL) {
                return Err(SetupError::new(format!("drop capability {cap} from the bounding set"), error));
            }
        }
    }
    clear_inheritable()
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn clear_inheritable() -> Result<(), SetupError> {
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = CapHeader { version: VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget/capset with a version-3 header and the two data words version 3 expects.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return Err(SetupError::last_os("read the capabilities"));
        }
        for word in &mut data {
            word.inheritable = 0;
        }
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
            return Err(SetupError::last_os("clear the inheritable capabilities"));
        }
    }
    Ok(())
}

/// Reads and runs everything it can see, writes only in `/tmp`, `/dev/shm`, its write grants
/// and the devices; signals and abstract Unix sockets stay inside the sandbox. Best effort: a
/// kernel without Landlock still has the read-only mounts.
fn landlock(plan: &Plan) -> Result<(), SetupError> {
    let abi = ABI::V6;
    let writable: Vec<&std::path::Path> = ["/tmp", "/dev/shm"]
        .iter()
        .map(std::path::Path::new)
        .chain(plan.write.iter().map(std::path::PathBuf::as_path))
        .chain(plan.home.as_deref())
        .chain(plan.data.as_deref())
        .collect();
    let devices = AccessFs::from_read(abi) | AccessFs::WriteFile | AccessFs::IoctlDev;
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .and_then(|ruleset| ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .and_then(|ruleset| ruleset.create())
        .and_then(|ruleset| ruleset.add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi))))
        .and_then(|ruleset| ruleset.add_rules(path_beneath_rules(writable, AccessFs::from_all(abi))))
        .and_then(|ruleset| ruleset.add_rules(path_beneath_rules(["/dev"], devices)))
        .during("Landlock")?;
    created.restrict_self().during("Landlock")?;
    Ok(())
}

/// System calls a tool server never needs: they fail with EPERM. `clone3` fails with ENOSYS,
/// so that the C library falls back to `clone`, whose flags the filter can read.
fn seccomp() -> Result<(), SetupError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).during("seccomp")?;
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let namespaces = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    let clone_rules = namespaces
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(flag), flag).and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()
        .during("seccomp")?;
    denied.insert(libc::SYS_clone, clone_rules);
    let filter = SeccompFilter::new(denied, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch).during("seccomp")?;
    let mut program: BpfProgram = filter.try_into().during("seccomp")?;
    #[cfg(target_arch = "x86_64")]
    refuse_x32(&mut program);
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .during("seccomp")?;
    let clone3: BpfProgram = clone3.try_into().during("seccomp")?;
    seccompiler::apply_filter(&program).during("seccomp")?;
    seccompiler::apply_filter(&clone3).during("seccomp")?;
    Ok(())
}

/// The x32 ABI reaches the same kernel with other numbers (bit 30 set): refused outright,
/// right after the architecture check the program starts with.
#[cfg(target_arch = "x86_64")]
fn refuse_x32(program: &mut BpfProgram) {
    const X32_BIT: u32 = 0x4000_0000;
    let load_nr = seccompiler::sock_filter { code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, jt: 0, jf: 0, k: 0 };
    let is_x32 = seccompiler::sock_filter { code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16, jt: 0, jf: 1, k: X32_BIT };
    let refuse = seccompiler::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    };
    let at = 3.min(program.len());
    program.splice(at..at, [load_nr, is_x32, refuse]);
}

const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_fanotify_init,
    libc::SYS_lookup_dcookie,
];
