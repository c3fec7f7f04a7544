//! The systemd notify protocol (sd_notify): readiness, status, watchdog, reloading, stopping.
//! A datagram to `$NOTIFY_SOCKET`; without that variable every call does nothing.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

/// Sends notifications to the service manager, if there is one.
pub struct Notifier {
    target: Option<Target>,
}

enum Target {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").map(|value| {
            let bytes = value.as_encoded_bytes();
            match bytes.strip_prefix(b"@") {
                Some(name) => Target::Abstract(name.to_vec()),
                None => Target::Path(PathBuf::from(value)),
            }
        });
        Notifier { target }
    }

    /// A notifier that never sends anything.
    pub fn disabled() -> Notifier {
        Notifier { target: None }
    }

    pub fn ready(&self) {
        self.send("READY=1");
    }

    pub fn status(&self, text: &str) {
        // A newline would start a new assignment.
        self.send(&format!("STATUS={}", text.replace('\n', " ")));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    /// `RELOADING=1` with the `MONOTONIC_USEC` that `Type=notify-reload` requires.
    pub fn reloading(&self) {
        let usec = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000)
            .unwrap_or(0);
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    }

    fn send(&self, message: &str) {
        let Some(target) = &self.target else { return };
        let sent = UnixDatagram::unbound().and_then(|socket| match target {
            Target::Path(path) => socket.send_to(message.as_bytes(), path),
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                socket.send_to_addr(message.as_bytes(), &addr)
            }
        });
        if let Err(error) = sent {
            tracing::warn!(%error, "cannot notify the service manager");
        }
    }
}

/// How often to send `WATCHDOG=1`: half of `$WATCHDOG_USEC`, if the watchdog is meant for this process.
pub fn watchdog_interval() -> Option<Duration> {
    if let Some(pid) = std::env::var_os("WATCHDOG_PID")
        && pid.to_str().and_then(|p| p.parse::<u32>().ok()) != Some(std::process::id())
    {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}
