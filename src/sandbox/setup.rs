//! Why the sandbox could not be built: the step that failed and what the kernel said.
//!
//! The init reports it to the daemon as one line (`Report::Error`); typed here so that every
//! step names itself the same way and the cause keeps its kind until then.

use std::borrow::Cow;

/// A step of building the sandbox that failed.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {cause}")]
pub(super) struct SetupError {
    step: Cow<'static, str>,
    cause: Cause,
}

/// What refused the step.
#[derive(Debug, thiserror::Error)]
pub(super) enum Cause {
    #[error("{}", .0.desc())]
    Errno(#[from] nix::errno::Errno),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Landlock(#[from] landlock::RulesetError),
    #[error(transparent)]
    Seccomp(#[from] seccompiler::Error),
    #[error(transparent)]
    SeccompProgram(#[from] seccompiler::BackendError),
}

impl SetupError {
    /// The last OS error, for the raw `libc` calls.
    pub(super) fn last_os(step: impl Into<Cow<'static, str>>) -> SetupError {
        SetupError { step: step.into(), cause: Cause::Io(std::io::Error::last_os_error()) }
    }

    pub(super) fn new(step: impl Into<Cow<'static, str>>, cause: impl Into<Cause>) -> SetupError {
        SetupError { step: step.into(), cause: cause.into() }
    }
}

/// Names the step a fallible call was part of.
pub(super) trait During<T> {
    fn during(self, step: impl Into<Cow<'static, str>>) -> Result<T, SetupError>;
}

impl<T, E: Into<Cause>> During<T> for Result<T, E> {
    fn during(self, step: impl Into<Cow<'static, str>>) -> Result<T, SetupError> {
        self.map_err(|cause| SetupError::new(step, cause))
    }
}

/// What this kernel lacks to build a sandbox, in words an operator can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KernelGap {
    #[error("user namespaces are disabled (/proc/sys/user/max_user_namespaces is 0)")]
    UserNamespaces,
    #[error("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)")]
    UnprivilegedUserNamespaces,
    #[error("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)")]
    AppArmor,
    /// The fault-injection switch `sandbox.kernel`.
    #[error("user namespaces are disabled (simulated)")]
    Simulated,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_names_itself_before_the_kernels_words() {
        let error: Result<(), _> = Err(nix::errno::Errno::EPERM);
        assert_eq!(error.during("mount /proc").unwrap_err().to_string(), "mount /proc: Operation not permitted");
        let error: Result<(), _> = Err(std::io::Error::from_raw_os_error(nix::libc::ENOENT));
        assert_eq!(error.during(format!("create {}", "/x")).unwrap_err().to_string(), "create /x: No such file or directory (os error 2)");
    }
}
