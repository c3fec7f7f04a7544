//! `[console]` validation: where the operator console listens, which other origins may reach it,
//! how long a browser session lasts.

use std::path::Path;
use std::time::Duration;

use super::raw::RawConsole;
use super::{ConsoleConfig, HOUR, KeyProblem};

const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

pub(super) fn validate(base: &Path, raw: RawConsole) -> Result<ConsoleConfig, KeyProblem> {
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
