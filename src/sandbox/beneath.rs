//! The one way the daemon touches a place a server can write (its home, its write grants):
//! from a directory handle, one component at a time, never through a symbolic link
//! (`O_NOFOLLOW` on every component), and ownership and mode set on what was opened
//! (`fchown`, `fchmod`), never on a path a server could have replaced meanwhile.
//!
//! A server that plants a link (`.cache` → `/etc`) gets nothing from it: the daemon stops at
//! the link and says so. `.ci/server-paths` refuses path-based `std::fs` calls on such places
//! anywhere else in `src/`.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, fchmod, fstat, mkdirat};
use nix::unistd::{Gid, Uid, fchown};

/// Why a place beneath a server-writable directory could not be opened or made.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// A component is a symbolic link (or not a directory): what a server plants to redirect
    /// the daemon. It is left as it is and never followed.
    #[error("{} is a symbolic link or not a directory; toolhost never follows a link a server may have planted", .0.display())]
    Planted(PathBuf),
    #[error("{}: {source}", .path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is not a plain relative path beneath its directory", .0.display())]
    Outside(PathBuf),
}

/// An open directory: the handle every operation beneath it starts from.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens (making it first if missing, with `mode`) a directory of the daemon's own that no
    /// server can write, such as the homes' directory: the path is trusted, only its last
    /// component must not be a link.
    ///
    /// # Errors
    /// [`BeneathError`] naming the path.
    pub(crate) fn make_trusted(path: &Path, mode: u32) -> Result<Dir, BeneathError> {
        use std::os::unix::fs::DirBuilderExt;
        let io = |source| BeneathError::Io { path: path.to_path_buf(), source };
        std::fs::DirBuilder::new().recursive(true).mode(mode).create(path).map_err(io)?;
        let fd = nix::fcntl::open(path, flags(), Mode::empty()).map_err(|errno| refusal(path, errno))?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    /// Another handle on the same directory, to walk down from.
    fn duplicate(&self) -> Result<Dir, BeneathError> {
        let fd = self.fd.try_clone().map_err(|source| BeneathError::Io { path: self.path.clone(), source })?;
        Ok(Dir { fd, path: self.path.clone() })
    }

    /// The directory `relative` beneath this one (plain names separated by `/`, no `..`),
    /// each missing component made with `mode`, each component (made or found) owned by
    /// `owner` when given. A link anywhere on the way stops it: [`BeneathError::Planted`].
    ///
    /// # Errors
    /// [`BeneathError`] naming the component.
    pub(crate) fn make_beneath(&self, relative: &str, mode: u32, owner: Option<(Uid, Gid)>) -> Result<Dir, BeneathError> {
        let mut here = self.duplicate()?;
        for name in relative.split('/') {
            if name.is_empty() || name == "." || name == ".." {
                return Err(BeneathError::Outside(PathBuf::from(relative)));
            }
            here = here.make_child(name, mode)?;
            if let Some((uid, gid)) = owner {
                here.own(uid, gid)?;
            }
        }
        Ok(here)
    }

    /// One component: opened without following a link, made first if missing.
    fn make_child(&self, name: &str, mode: u32) -> Result<Dir, BeneathError> {
        self.make_child_made(name, mode).map(|(dir, _)| dir)
    }

    /// The directory `name` in this one (one plain name), opened without following a link and
    /// made first with `mode` if missing; with whether it was made now (else it was there).
    ///
    /// # Errors
    /// [`BeneathError`] naming it.
    pub(crate) fn make_child_made(&self, name: &str, mode: u32) -> Result<(Dir, bool), BeneathError> {
        let path = self.path.join(name);
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(BeneathError::Outside(path));
        }
        let made = match mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
            Ok(()) => true,
            Err(Errno::EEXIST) => false,
            Err(errno) => return Err(BeneathError::Io { path, source: errno.into() }),
        };
        let fd = openat(&self.fd, name, flags(), Mode::empty()).map_err(|errno| refusal(&path, errno))?;
        Ok((Dir { fd, path }, made))
    }

    /// Opens a directory of the daemon's own as [`Dir::make_trusted`] does, making nothing:
    /// `None` when it is missing.
    ///
    /// # Errors
    /// [`BeneathError`] naming the path.
    pub(crate) fn find_trusted(path: &Path) -> Result<Option<Dir>, BeneathError> {
        match nix::fcntl::open(path, flags(), Mode::empty()) {
            Ok(fd) => Ok(Some(Dir { fd, path: path.to_path_buf() })),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(refusal(path, errno)),
        }
    }

    /// The directory `relative` beneath this one as [`Dir::make_beneath`] finds it, making and
    /// giving away nothing: `None` when a component is missing.
    ///
    /// # Errors
    /// [`BeneathError`]: a link on the way ([`BeneathError::Planted`]).
    pub(crate) fn find_beneath(&self, relative: &str) -> Result<Option<Dir>, BeneathError> {
        let mut here = self.duplicate()?;
        for name in relative.split('/') {
            if name.is_empty() || name == "." || name == ".." {
                return Err(BeneathError::Outside(PathBuf::from(relative)));
            }
            let path = here.path.join(name);
            match openat(&here.fd, name, flags(), Mode::empty()) {
                Ok(fd) => here = Dir { fd, path },
                Err(Errno::ENOENT) => return Ok(None),
                Err(errno) => return Err(refusal(&path, errno)),
            }
        }
        Ok(Some(here))
    }

    /// The uid that owns what was opened.
    ///
    /// # Errors
    /// [`BeneathError::Io`].
    pub(crate) fn owner(&self) -> Result<u32, BeneathError> {
        fstat(&self.fd).map(|stat| stat.st_uid).map_err(|errno| BeneathError::Io { path: self.path.clone(), source: errno.into() })
    }

    /// Whether the directory opened holds nothing (read from its handle, never its path).
    ///
    /// # Errors
    /// [`BeneathError::Io`].
    pub(crate) fn is_empty(&self) -> Result<bool, BeneathError> {
        use std::os::fd::AsRawFd;
        let io = |source| BeneathError::Io { path: self.path.clone(), source };
        // The handle's own entry in /proc is the directory it opened, whatever its path is now.
        let mut entries = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).map_err(io)?;
        entries.next().transpose().map(|first| first.is_none()).map_err(io)
    }

    /// Gives what was opened to `uid`:`gid`, unless it already is theirs.
    ///
    /// # Errors
    /// [`BeneathError::Io`]: the daemon may not (an unprivileged daemon giving it away).
    pub(crate) fn own(&self, uid: Uid, gid: Gid) -> Result<(), BeneathError> {
        let io = |errno: Errno| BeneathError::Io { path: self.path.clone(), source: errno.into() };
        let stat = fstat(&self.fd).map_err(io)?;
        if stat.st_uid == uid.as_raw() && stat.st_gid == gid.as_raw() {
            return Ok(());
        }
        fchown(&self.fd, Some(uid), Some(gid)).map_err(io)
    }

    /// Sets the mode of what was opened.
    ///
    /// # Errors
    /// [`BeneathError::Io`].
    pub(crate) fn chmod(&self, mode: u32) -> Result<(), BeneathError> {
        fchmod(&self.fd, Mode::from_bits_truncate(mode)).map_err(|errno| BeneathError::Io { path: self.path.clone(), source: errno.into() })
    }
}

/// A directory, never through a link, kept from any child the daemon starts.
fn flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// `O_NOFOLLOW` on a link fails with `ELOOP`; `O_DIRECTORY` on anything else with `ENOTDIR`.
fn refusal(path: &Path, errno: Errno) -> BeneathError {
    match errno {
        Errno::ELOOP | Errno::ENOTDIR => BeneathError::Planted(path.to_path_buf()),
        other => BeneathError::Io { path: path.to_path_buf(), source: other.into() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_made_beneath_and_a_planted_link_is_never_followed() {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let home = Dir::make_trusted(&scratch.path().join("home"), 0o700).unwrap();
        home.make_beneath(".local/share", 0o700, None).unwrap();
        assert!(scratch.path().join("home/.local/share").is_dir());

        std::os::unix::fs::symlink(&target, scratch.path().join("home/.cache")).unwrap();
        let planted = home.make_beneath(".cache/sub", 0o700, None).unwrap_err();
        assert!(matches!(planted, BeneathError::Planted(ref path) if path.ends_with(".cache")), "{planted}");
        assert!(!target.join("sub").exists(), "nothing was made through the link");

        std::fs::write(scratch.path().join("home/.config"), b"a file").unwrap();
        assert!(matches!(home.make_beneath(".config", 0o700, None), Err(BeneathError::Planted(_))));
        assert!(matches!(home.make_beneath("../escape", 0o700, None), Err(BeneathError::Outside(_))));
        assert!(matches!(home.make_beneath("/etc", 0o700, None), Err(BeneathError::Outside(_))));
    }

    #[test]
    fn a_link_in_the_middle_of_the_way_stops_it_too() {
        let scratch = tempfile::tempdir().unwrap();
        let elsewhere = scratch.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("state")).unwrap();
        let home = Dir::make_trusted(&scratch.path().join("home"), 0o700).unwrap();
        std::os::unix::fs::symlink(&elsewhere, scratch.path().join("home/.local")).unwrap();
        assert!(matches!(home.make_beneath(".local/state/new", 0o700, None), Err(BeneathError::Planted(_))));
        assert!(!elsewhere.join("state/new").exists(), "nothing was made through the link");
    }
}
