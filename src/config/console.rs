//! `[console]`: where the operator console listens, which other origins may reach it,
//! how long a browser session lasts.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::listeners::{Listener, OneOrMany};
use super::{HOUR, KeyProblem};

const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// `[console]`: the operator console in the browser.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConsole {
    pub(crate) listen: Option<OneOrMany>,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) session_ttl: Option<String>,
}

/// `[console]`: the operator console in the browser (off when it listens nowhere).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsoleConfig {
    /// Loopback TCP addresses or Unix sockets; pages at `/`.
    pub listen: Vec<Listener>,
    /// Browser origins allowed besides loopback ones (a TLS proxy's), lower case, no trailing slash.
    pub allowed_origins: Vec<String>,
    /// How long a browser session lasts from its sign-in.
    pub session_ttl: Duration,
}

/// `[console]`, its listeners taken against `base`.
impl TryFrom<(&Path, RawConsole)> for ConsoleConfig {
    type Error = KeyProblem;

    fn try_from((base, raw): (&Path, RawConsole)) -> Result<ConsoleConfig, KeyProblem> {
        let listen = super::listeners::http_listeners(
            base,
            raw.listen,
            "the console does not serve TLS yet: use a loopback address or a unix: socket (and a TLS proxy in front)",
        )?;
        let allowed_origins = super::listeners::origins(&raw.allowed_origins)?;
        let session_ttl = super::optional_duration(raw.session_ttl.as_deref(), DEFAULT_SESSION_TTL, HOUR.saturating_mul(7 * 24))
            .map_err(|problem| ("session_ttl".to_owned(), problem.to_string()))?;
        Ok(ConsoleConfig { listen, allowed_origins, session_ttl })
    }
}
