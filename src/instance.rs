//! One daemon per store. Two daemons on one store would both write it and both run every stdio
//! server; the second one to start must be refused before it binds a socket or spawns anything.
//!
//! The daemon holds an exclusive `flock` on the database file itself for as long as it runs.
//! SQLite locks with `fcntl`, which is independent of `flock` on Linux, so the two never meet.
//! Locking the database (not a lock file beside it) needs no write: it works on a full disk,
//! leaves nothing behind, and the kernel drops the lock when the process dies, kill -9 included.
//! The holder's pid is read back from `/proc/locks`, so nothing has to be written for it either.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Held while the daemon runs; dropping it releases the store.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    #[error(
        "another toolhost ({holder}) is serving the store {}: stop it first, or give this configuration a [store] path of its own",
        store.display()
    )]
    Held { store: PathBuf, holder: String },
    #[error("cannot lock the store {}: {source}", store.display())]
    Io { store: PathBuf, source: std::io::Error },
}

impl InstanceLock {
    /// Takes the store at `store` for this process, creating the file (and its directory) if
    /// needed, without waiting.
    ///
    /// # Errors
    /// [`InstanceError::Held`] naming the holder's pid when another process holds it.
    pub fn acquire(store: &Path) -> Result<InstanceLock, InstanceError> {
        let io = |source| InstanceError::Io { store: store.to_path_buf(), source };
        if let Some(parent) = store.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        // The store holds approvals and the audit trail: nobody else's to read.
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(store).map_err(io)?;
        let mut passing_holds = 0;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(InstanceLock { _file: file }),
                Err(TryLockError::WouldBlock) => {
                    let holder = file.metadata().ok().and_then(|meta| holder_pid(meta.ino()));
                    // A lock no process is seen holding was let go between the two looks: its
                    // holder was a process forked (with a copy of the descriptor) just before it
                    // exec'd, or a daemon of this process that just stopped. Such a hold passes
                    // in moments; another daemon's does not, and is named.
                    if holder.is_none() && passing_holds < PASSING_HOLDS {
                        passing_holds += 1;
                        std::thread::sleep(PASSING_HOLD_WAIT);
                        continue;
                    }
                    let holder = holder.map_or_else(|| "its pid is not visible from here".to_owned(), |pid| format!("pid {pid}"));
                    return Err(InstanceError::Held { store: store.to_path_buf(), holder });
                }
                Err(TryLockError::Error(source)) => return Err(io(source)),
            }
        }
    }
}

/// How often, and how far apart, a lock whose holder cannot be seen is tried again (1 s in all).
const PASSING_HOLDS: u32 = 20;
const PASSING_HOLD_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The pid that holds a `flock` on the file with inode `inode`, from `/proc/locks`.
fn holder_pid(inode: u64) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| flock_holder(line, inode))
}

/// One `/proc/locks` line, `1: FLOCK  ADVISORY  WRITE 2183 fd:01:1181990 0 EOF`: its pid when it
/// is a granted flock on `inode` (a waiter's line has `->` after the number).
fn flock_holder(line: &str, inode: u64) -> Option<u32> {
    let mut fields = line.split_whitespace().skip(1);
    if fields.next()? != "FLOCK" {
        return None;
    }
    let mut fields = fields.skip(2);
    let pid = fields.next()?.parse().ok()?;
    let file_inode: u64 = fields.next()?.rsplit(':').next()?.parse().ok()?;
    (file_inode == inode).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_the_flock_holder_of_one_inode() {
        assert_eq!(flock_holder("1: FLOCK  ADVISORY  WRITE 2183 fd:01:1181990 0 EOF", 1_181_990), Some(2183));
        assert_eq!(flock_holder("1: FLOCK  ADVISORY  WRITE 2183 fd:01:1181990 0 EOF", 7), None);
        assert_eq!(flock_holder("2: POSIX  ADVISORY  WRITE 2183 fd:01:1181990 0 EOF", 1_181_990), None);
        // A process waiting for the lock is not its holder.
        assert_eq!(flock_holder("1: -> FLOCK  ADVISORY  WRITE 99 fd:01:1181990 0 EOF", 1_181_990), None);
        assert_eq!(flock_holder("garbage", 1), None);
    }

    #[test]
    fn a_second_lock_on_one_store_is_refused_with_this_process_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("state").join("catalog.db");
        let held = InstanceLock::acquire(&store).expect("the first lock");
        let error = InstanceLock::acquire(&store).expect_err("a second lock on the same store");
        let message = error.to_string();
        assert!(message.contains(&store.display().to_string()), "{message}");
        assert!(message.contains(&format!("pid {}", std::process::id())), "{message}");
        drop(held);
        InstanceLock::acquire(&store).expect("the store is free once the holder let go");
    }
}
