//! `[console]` validation: where the operator console listens, which other origins may reach it,
//! how long a browser session lasts.

use std::path::Path;
use std::time::Duration;

use super::raw::{OneOrMany, RawConsole};
use super::{ConsoleConfig, HOUR, KeyProblem, Listener, parse_listener};

const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

pub(super) fn validate(base: &Path, raw: RawConsole) -> Result<ConsoleConfig, KeyProblem> {
    let entries = match raw.listen {
        None => Vec::new(),
        Some(OneOrMany::One(entry)) => vec![entry],
        Some(OneOrMany::Many(entries)) => entries,
    };
    let mut listen: Vec<Listener> = Vec::with_capacity(entries.len());
    for (idx, entry) in entries.iter().enumerate() {
        let listener = parse_listener(base, entry).map_err(|problem| (format!("listen[{idx}]"), problem))?;
        if listener.tls.is_some() {
            return Err((
                format!("listen[{idx}]"),
                "the console does not serve TLS yet: use a loopback address or a unix: socket (and a TLS proxy in front)".into(),
            ));
        }
        if listen.iter().any(|other| other.addr == listener.addr) {
            return Err((format!("listen[{idx}]"), "names the same address twice".into()));
        }
        listen.push(listener);
    }
    let allowed_origins = super::mcp::origins(&raw.allowed_origins)?;
    let session_ttl = super::optional_duration(raw.session_ttl.as_deref(), DEFAULT_SESSION_TTL, HOUR.saturating_mul(7 * 24))
        .map_err(|problem| ("session_ttl".to_owned(), problem))?;
    Ok(ConsoleConfig { listen, allowed_origins, session_ttl })
}
