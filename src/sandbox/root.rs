//! The server's filesystem: a new root built from nothing, holding only what the plan grants.
//!
//! The host's root is first moved aside (`pivot_root` onto a scratch tmpfs, the host's at
//! `/oldroot`), so that every grant is bound from its real path, `/tmp` included; the view is
//! assembled at `/newroot` and becomes `/` at the end, the host's root detached for good.

use std::borrow::Cow;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Component, Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::unistd::{chdir, pivot_root};

use super::setup::{During, SetupError};
use super::{Plan, SYSTEM_PATHS};

const OLD: &str = "/oldroot";
const NEW: &str = "/newroot";
/// Devices a server may open (bound from the host's `/dev`).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Builds the view and makes it the root.
pub(super) fn build(plan: &Plan) -> Result<(), SetupError> {
    // Nothing mounted here propagates back to the host.
    mount_ctx(None, "/", None, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None, "make the mount namespace private")?;
    mount_tmpfs("/tmp", MsFlags::MS_NOSUID | MsFlags::MS_NODEV, "mode=0755,size=1m", "mount the scratch root")?;
    for dir in ["/tmp/oldroot", "/tmp/newroot"] {
        std::fs::create_dir(dir).during(format!("create {dir}"))?;
    }
    pivot_root("/tmp", "/tmp/oldroot").during("pivot_root to the scratch root")?;
    chdir("/").during("chdir /")?;
    mount_tmpfs(NEW, MsFlags::MS_NOSUID | MsFlags::MS_NODEV, "mode=0755,size=1m", "mount the new root")?;

    // The private places first: a grant below /tmp is bound on top of the private /tmp.
    private_tmp(plan)?;
    private_dev()?;
    let mut binds: Vec<(PathBuf, bool)> = SYSTEM_PATHS.iter().map(|path| (PathBuf::from(path), false)).collect();
    binds.extend(plan.read.iter().map(|path| (path.clone(), false)));
    binds.extend(plan.cwd.iter().map(|path| (path.clone(), false)));
    binds.extend(plan.write.iter().map(|path| (path.clone(), true)));
    // The server's own places (its home, its data directory beside the homes), writable; one
    // inside a private place is shown through its mask.
    let (masked, plain): (Vec<&PathBuf>, Vec<&PathBuf>) =
        plan.home.iter().chain(&plan.data).partition(|own| plan.hidden.iter().any(|place| own.starts_with(place)));
    binds.extend(plain.into_iter().map(|own| (own.clone(), true)));
    // What lies inside a write grant is shown by it, writable: bound again read-only on top (a
    // file named in the arguments, the cwd), it would turn a writable file read-only.
    binds.retain(|(path, is_writable)| *is_writable || !plan.write.iter().any(|grant| path.starts_with(grant)));
    // Shallow before deep (a grant inside another lands on top of it); a path granted both
    // ways is bound writable, once.
    binds.sort_by(|(a, a_writable), (b, b_writable)| depth(a).cmp(&depth(b)).then(a.cmp(b)).then(b_writable.cmp(a_writable)));
    binds.dedup_by(|later, earlier| later.0 == earlier.0);
    for (path, writable) in &binds {
        bind(path, *writable)?;
    }
    let shown = hide(&plan.hidden, &masked)?;
    // An own place in a private place the view does not show at all (below the private /tmp,
    // say) is bound at its path all the same.
    for own in masked.into_iter().filter(|own| !shown.contains(own)) {
        bind(own, true)?;
    }
    let proc_dir = inside(Path::new("/proc"));
    mkdir_all(&proc_dir)?;
    mount_ctx(
        Some(Path::new("proc")),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
        "mount /proc",
    )?;
    // The skeleton itself is read-only: a server writes only where it was granted.
    mount_ctx(
        None,
        NEW,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None,
        "seal the new root",
    )?;
    chdir(NEW).during(format!("chdir {NEW}"))?;
    pivot_root(".", ".").during("pivot_root to the new root")?;
    umount2(".", MntFlags::MNT_DETACH).during("detach the host's root")?;
    let cwd = plan.cwd.as_deref().unwrap_or(Path::new("/tmp"));
    chdir(cwd).during(format!("chdir {}", cwd.display()))?;
    Ok(())
}

fn private_tmp(plan: &Plan) -> Result<(), SetupError> {
    let tmp = inside(Path::new("/tmp"));
    mkdir_all(&tmp)?;
    let options = format!("mode=1777,size={}", plan.limits.tmp_bytes);
    mount_tmpfs(&tmp, MsFlags::MS_NOSUID | MsFlags::MS_NODEV, &options, "mount the private /tmp")
}

fn private_dev() -> Result<(), SetupError> {
    let dev = inside(Path::new("/dev"));
    mkdir_all(&dev)?;
    mount_tmpfs(&dev, MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, "mode=0755,size=64k", "mount /dev")?;
    for device in DEVICES {
        let host = Path::new(OLD).join("dev").join(device);
        if !host.exists() {
            continue;
        }
        let node = dev.join(device);
        std::fs::File::create(&node).during(format!("create {}", node.display()))?;
        mount_ctx(Some(host.as_path()), &node, None, MsFlags::MS_BIND, None, "bind a device")?;
    }
    for (link, target) in
        [("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")]
    {
        symlink(target, dev.join(link)).during(format!("link /dev/{link}"))?;
    }
    let shm = dev.join("shm");
    mkdir_all(&shm)?;
    mount_tmpfs(&shm, MsFlags::MS_NOSUID | MsFlags::MS_NODEV, "mode=1777,size=64m", "mount /dev/shm")?;
    mount_ctx(
        None,
        &dev,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        None,
        "seal /dev",
    )
}

/// Shows `path` (as the host has it) at the same place in the view.
fn bind(path: &Path, writable: bool) -> Result<(), SetupError> {
    let host = outside(path);
    let Ok(meta) = std::fs::symlink_metadata(&host) else { return Ok(()) };
    let view = inside(path);
    if meta.file_type().is_symlink() {
        // A merged /usr's /lib -> usr/lib: the same link, pointing into the view.
        let target = std::fs::read_link(&host).during(format!("read the link {}", path.display()))?;
        if std::fs::symlink_metadata(&view).is_err() {
            if let Some(parent) = view.parent() {
                mkdir_all(parent)?;
            }
            symlink(&target, &view).during(format!("link {}", path.display()))?;
        }
        return Ok(());
    }
    if std::fs::symlink_metadata(&view).is_err() {
        if let Some(parent) = view.parent() {
            mkdir_all(parent)?;
        }
        if meta.is_dir() {
            mkdir_all(&view)?;
        } else {
            std::fs::File::create(&view).during(format!("create the mount point {}", path.display()))?;
        }
    }
    mount_ctx(Some(host.as_path()), &view, None, MsFlags::MS_BIND | MsFlags::MS_REC, None, format!("bind {}", path.display()))?;
    if !writable {
        read_only(&view, path)?;
    }
    Ok(())
}

/// Remounts a bind read-only, keeping the flags the kernel locks for an unprivileged mount.
fn read_only(view: &Path, path: &Path) -> Result<(), SetupError> {
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    if let Ok(stat) = statvfs(view) {
        let kept = stat.flags();
        for (fs_flag, ms_flag) in [
            (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
            (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
            (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
            (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
            (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
            (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
        ] {
            if kept.contains(fs_flag) {
                flags |= ms_flag;
            }
        }
    }
    mount_ctx(None, view, None, flags, None, format!("make {} read-only", path.display()))
}

/// Hides the private places of the daemon's that a grant would show. A directory gets an empty
/// read-only tmpfs on it. A file in a read-only directory of the view is hidden by its
/// directory, not by a mount on the file itself: the kernel detaches a mount whose file is
/// replaced by rename on the host (as rotation tools, editors and toolhost's own token writes
/// replace files), which would show the new content; the directory becomes a read-only
/// snapshot of its other entries ([`snapshot_without`]). In a writable directory the server
/// must still be able to add files, so the file is masked by a mount (`check-config` warns
/// that replacing it by rename shows it to a running server). The server's own places (its
/// home, its data directory) inside one of the directories are shown through its mask: those
/// are returned.
fn hide<'a>(hidden: &[PathBuf], own: &[&'a PathBuf]) -> Result<Vec<&'a PathBuf>, SetupError> {
    let mut files_by_dir: std::collections::BTreeMap<&Path, Vec<&std::ffi::OsStr>> = std::collections::BTreeMap::new();
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for path in hidden {
        let Ok(meta) = std::fs::symlink_metadata(inside(path)) else { continue };
        match (meta.is_dir(), path.parent(), path.file_name()) {
            (true, ..) => dirs.push(path),
            (false, Some(dir), Some(name)) if !writable(&inside(dir)) => files_by_dir.entry(dir).or_default().push(name),
            (false, ..) => files.push(path),
        }
    }
    // Shallow directories first: a deeper one is then found inside the snapshot of its parent.
    for (dir, names) in &files_by_dir {
        snapshot_without(dir, names)?;
    }
    for file in files {
        mask_file(file)?;
    }
    // A private directory inside another (the homes inside the state directory) is hidden
    // with it.
    let outer: Vec<&PathBuf> =
        dirs.iter().copied().filter(|dir| !dirs.iter().any(|other| other != dir && dir.starts_with(other))).collect();
    let mut shown = Vec::new();
    for dir in outer {
        let inside: Vec<&PathBuf> = own.iter().copied().filter(|place| place.starts_with(dir)).collect();
        if inside.is_empty() {
            mask_dir(dir)?;
        } else {
            mask_dir_around(dir, &inside)?;
            shown.extend(inside);
        }
    }
    Ok(shown)
}

/// A private directory that holds the server's home or data directory (the state directory
/// does): an empty tmpfs on it that can be walked through but not listed, each bound writable
/// at its own path inside, then the tmpfs sealed read-only. Nothing else of the directory is there.
fn mask_dir_around(dir: &Path, own: &[&PathBuf]) -> Result<(), SetupError> {
    let view = inside(dir);
    mount_tmpfs(
        &view,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "mode=0711,size=4k",
        format!("hide {}", dir.display()),
    )?;
    for place in own {
        let view = inside(place);
        // server-paths: the way to the place in the view's own tmpfs, made before the server runs.
        std::fs::DirBuilder::new().recursive(true).mode(0o711).create(&view).during(format!("create {}", place.display()))?;
        mount_ctx(Some(outside(place).as_path()), &view, None, MsFlags::MS_BIND, None, format!("bind {}", place.display()))?;
    }
    mount_ctx(
        None,
        &view,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0711,size=4k"),
        format!("seal {}", dir.display()),
    )
}

/// Whether the view's mount at `path` takes writes.
fn writable(path: &Path) -> bool {
    statvfs(path).is_ok_and(|stats| !stats.flags().contains(FsFlags::ST_RDONLY))
}

/// An empty read-only file bound on a private file: reads find nothing and writes fail (the
/// null device would take writes and say they worked).
fn mask_file(path: &Path) -> Result<(), SetupError> {
    let view = inside(path);
    let empty = Path::new("/masked");
    if !empty.exists() {
        std::fs::File::create(empty).during("create the mask file")?;
    }
    mount_ctx(Some(empty), &view, None, MsFlags::MS_BIND, None, format!("hide {}", path.display()))?;
    mount_ctx(
        None,
        &view,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        None,
        format!("seal {}", path.display()),
    )
}

/// An empty, read-only tmpfs on a private directory.
fn mask_dir(path: &Path) -> Result<(), SetupError> {
    mount_tmpfs(
        inside(path),
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "mode=0000,size=4k",
        format!("hide {}", path.display()),
    )
}

/// Most entries a directory holding a private file may have to be shown as a snapshot; a
/// larger one is hidden whole (each entry costs a mount).
const MAX_SNAPSHOT_ENTRIES: usize = 512;

/// Replaces the view of `dir` with a read-only tmpfs holding its entries but `names`: each a
/// bind of the entry as the grant shows it (so with the grant's read-only or writable mount),
/// each symbolic link recreated. Private files are then simply not there, whatever the host
/// renames onto their names; an entry the host replaces by rename disappears from the view
/// (its bind is detached), and one the host adds later does not appear: the directory's names
/// are fixed at the server's start, their contents are live.
fn snapshot_without(dir: &Path, names: &[&std::ffi::OsStr]) -> Result<(), SetupError> {
    let view = inside(dir);
    let listed: Option<Vec<std::fs::DirEntry>> = std::fs::read_dir(&view).ok().map(|entries| entries.flatten().collect());
    let Some(entries) = listed.filter(|entries| entries.len() <= MAX_SNAPSHOT_ENTRIES) else { return mask_dir(dir) };
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&view).during(format!("stat {}", dir.display()))?.permissions());
    // Staged outside the view first, since the view's own entries are about to be covered.
    let stage = Path::new("/stage");
    mkdir_all(stage)?;
    mount_tmpfs(stage, MsFlags::MS_NOSUID | MsFlags::MS_NODEV, "mode=0700,size=64k", "mount the staging area")?;
    let mut links = Vec::new();
    let mut staged = Vec::new();
    for entry in entries.iter().filter(|entry| !names.contains(&entry.file_name().as_os_str())) {
        let (name, from) = (entry.file_name(), entry.path());
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_symlink() {
            links.push((name, std::fs::read_link(&from).during(format!("read the link {}", from.display()))?));
            continue;
        }
        let to = stage.join(&name);
        place_mount_point(&to, kind.is_dir())?;
        mount_ctx(Some(from.as_path()), &to, None, MsFlags::MS_BIND | MsFlags::MS_REC, None, format!("stage {}", from.display()))?;
        staged.push((name, kind.is_dir()));
    }
    mount_tmpfs(
        &view,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode={:o},size=64k", mode & 0o7777),
        format!("snapshot {}", dir.display()),
    )?;
    for (name, is_dir) in staged {
        let to = view.join(&name);
        place_mount_point(&to, is_dir)?;
        mount_ctx(Some(stage.join(&name).as_path()), &to, None, MsFlags::MS_MOVE, None, format!("show {}", to.display()))?;
    }
    for (name, target) in links {
        symlink(&target, view.join(&name)).during(format!("link {}", view.join(&name).display()))?;
    }
    umount2(stage, MntFlags::MNT_DETACH).during("unmount the staging area")?;
    mount_ctx(
        None,
        &view,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None,
        format!("seal the snapshot of {}", dir.display()),
    )
}

/// An empty directory or file to mount on.
fn place_mount_point(path: &Path, is_dir: bool) -> Result<(), SetupError> {
    if is_dir {
        mkdir_all(path)
    } else {
        std::fs::File::create(path).map(drop).during(format!("create the mount point {}", path.display()))
    }
}

fn outside(path: &Path) -> PathBuf {
    Path::new(OLD).join(path.strip_prefix("/").unwrap_or(path))
}

fn inside(path: &Path) -> PathBuf {
    Path::new(NEW).join(path.strip_prefix("/").unwrap_or(path))
}

fn depth(path: &Path) -> usize {
    path.components().filter(|component| matches!(component, Component::Normal(_))).count()
}

fn mkdir_all(dir: &Path) -> Result<(), SetupError> {
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).during(format!("create {}", dir.display()))
}

fn mount_ctx(
    source: Option<&Path>,
    target: impl AsRef<Path>,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    what: impl Into<Cow<'static, str>>,
) -> Result<(), SetupError> {
    mount(source, target.as_ref(), fstype, flags, data).during(what)
}

/// A fresh tmpfs on `target`, with `options` (mode, size).
fn mount_tmpfs(target: impl AsRef<Path>, flags: MsFlags, options: &str, what: impl Into<Cow<'static, str>>) -> Result<(), SetupError> {
    mount_ctx(Some(Path::new("tmpfs")), target, Some("tmpfs"), flags, Some(options), what)
}
