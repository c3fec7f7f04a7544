//! `[fleet]`: the PostgreSQL store several hosts share (approvals, the audit trail, what each
//! host's servers offer). Optional; SQLite stays each host's own catalog.

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::{KeyProblem, MINUTE, optional_duration};
use crate::secrets::Resolved;

/// Longest host id (it names the host in every shared row).
const MAX_HOST_ID_LEN: usize = 64;

/// `[fleet]`: a PostgreSQL store shared by several hosts.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFleet {
    pub(crate) url: String,
    pub(crate) host_id: Option<String>,
    /// What to share: "approvals", "audit", "drift" (all by default).
    pub(crate) share: Option<Vec<String>>,
    pub(crate) connect_timeout: Option<String>,
}

/// `[fleet]`: the PostgreSQL store shared by several hosts (see `fleet`).
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// `postgres://…`; may hold a password (resolved from a `${…}` reference, and never printed).
    pub url: Resolved,
    /// This host's name in the fleet (default: the machine id).
    pub host_id: String,
    pub share_approvals: bool,
    pub share_audit: bool,
    pub share_drift: bool,
    pub connect_timeout: Duration,
}

/// `[fleet]`; its URL is never echoed in a problem (it may carry a password).
impl TryFrom<RawFleet> for FleetConfig {
    type Error = KeyProblem;

    fn try_from(raw: RawFleet) -> Result<FleetConfig, KeyProblem> {
        validate(raw)
    }
}

fn validate(raw: RawFleet) -> Result<FleetConfig, KeyProblem> {
    let url = crate::secrets::resolve(&raw.url).map_err(|problem| ("url".to_owned(), problem.to_string()))?;
    if !(url.expose().starts_with("postgres://") || url.expose().starts_with("postgresql://")) {
        return Err(("url".into(), "must be a postgres:// or postgresql:// URL".into()));
    }
    // Never echo the URL: it may carry a password.
    let options = sqlx::postgres::PgConnectOptions::from_str(url.expose())
        .map_err(|err| ("url".to_owned(), format!("not a usable PostgreSQL URL ({})", crate::secrets::redact(&err.to_string()))))?;
    let url = match password_of(url.expose()) {
        Some(password) => {
            crate::secrets::register(&password);
            url.marked_secret()
        }
        None => url,
    };
    drop(options);
    let host_id = match raw.host_id {
        Some(id) => id,
        None => machine_id().ok_or_else(|| ("host_id".to_owned(), "no /etc/machine-id here: set host_id".to_owned()))?,
    };
    if host_id.is_empty() || host_id.len() > MAX_HOST_ID_LEN || !host_id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(("host_id".into(), format!("must be 1 to {MAX_HOST_ID_LEN} visible ASCII characters")));
    }
    let share = raw.share.unwrap_or_else(|| vec!["approvals".into(), "audit".into(), "drift".into()]);
    for item in &share {
        if !["approvals", "audit", "drift"].contains(&item.as_str()) {
            return Err(("share".into(), format!("{item:?} is not one of \"approvals\", \"audit\", \"drift\"")));
        }
    }
    let connect_timeout = optional_duration(raw.connect_timeout.as_deref(), Duration::from_secs(5), MINUTE)
        .map_err(|problem| ("connect_timeout".to_owned(), problem.to_string()))?;
    Ok(FleetConfig {
        url,
        host_id,
        share_approvals: share.iter().any(|s| s == "approvals"),
        share_audit: share.iter().any(|s| s == "audit"),
        share_drift: share.iter().any(|s| s == "drift"),
        connect_timeout,
    })
}

/// The password part of a URL's user information, percent-decoded as PostgreSQL reads it.
fn password_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    let mut decoded = Vec::with_capacity(password.len());
    let bytes = password.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) if u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).is_ok() => {
                decoded.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(decoded).ok().filter(|p| !p.is_empty())
}

/// systemd's machine id: stable for the life of the installation, unique per host.
fn machine_id() -> Option<String> {
    let text = std::fs::read_to_string("/etc/machine-id").ok()?;
    let id = text.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_found_and_decoded() {
        assert_eq!(password_of("postgres://u:p%40ss@h/db").as_deref(), Some("p@ss"));
        assert_eq!(password_of("postgres://u@h/db"), None);
        assert_eq!(password_of("postgres://h/db?host=/tmp"), None);
        assert_eq!(password_of("postgresql://a:b:c@/db?host=/run").as_deref(), Some("b:c"));
    }
}
