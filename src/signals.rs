//! The signals the daemon acts on: SIGTERM and SIGINT stop it, SIGHUP reloads its configuration.

use tokio::signal::unix::{Signal, SignalKind, signal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Stop,
    Reload,
}

pub struct Signals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl Signals {
    /// Installs the handlers. From now on these signals no longer kill the process.
    ///
    /// # Errors
    /// The error from registering a handler.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    pub async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.terminate.recv() => {
                tracing::info!("received SIGTERM");
                Event::Stop
            }
            _ = self.interrupt.recv() => {
                tracing::info!("received SIGINT");
                Event::Stop
            }
            _ = self.hangup.recv() => {
                tracing::info!("received SIGHUP");
                Event::Reload
            }
        }
    }
}
