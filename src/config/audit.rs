//! `[audit]`: where the audit trail is sent as it is written, and how often its chain's head is
//! signed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::RawAudit;
use super::{DAY, KeyProblem, optional_duration, positive};

/// `[audit]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Where records are sent as they are written (`export`).
    pub exports: Vec<AuditExport>,
    /// The chain's head is signed after this many records (`checkpoint_records`)…
    pub checkpoint_records: u32,
    /// …or this long after the last checkpoint when there are new ones (`checkpoint_every`).
    pub checkpoint_every: Duration,
    /// The signing key's file (`key`), when the operator names one.
    pub key: Option<PathBuf>,
}

/// The systemd credential (`LoadCredential=toolhost-audit-key:…`) the signing key may come from.
const KEY_CREDENTIAL: &str = "toolhost-audit-key";

/// Where the audit signing key is, and whether toolhost makes it there when it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPlace {
    pub path: PathBuf,
    pub made_if_missing: bool,
}

impl AuditConfig {
    /// The signing key's place: `[audit] key`, else the service manager's credential, else
    /// `audit.key` beside the store (the only one toolhost makes, on first start).
    #[must_use]
    pub fn key_place(&self, store: &Path) -> KeyPlace {
        if let Some(path) = &self.key {
            return KeyPlace { path: path.clone(), made_if_missing: false };
        }
        if let Some(credential) = std::env::var_os("CREDENTIALS_DIRECTORY").map(|dir| PathBuf::from(dir).join(KEY_CREDENTIAL))
            && credential.exists()
        {
            return KeyPlace { path: credential, made_if_missing: false };
        }
        KeyPlace { path: store.parent().unwrap_or(Path::new(".")).join("audit.key"), made_if_missing: true }
    }
}

/// One audit export sink: JSON Lines appended to a file or written to a Unix stream socket, or
/// syslog over TCP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditExport {
    File(PathBuf),
    Unix(PathBuf),
    /// `host:port` of a syslog receiver over TCP.
    Syslog(String),
}

impl AuditExport {
    /// A name for its cursor and its log lines.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            AuditExport::File(path) => format!("file:{}", path.display()),
            AuditExport::Unix(path) => format!("unix:{}", path.display()),
            AuditExport::Syslog(addr) => format!("syslog:{addr}"),
        }
    }
}

pub(super) fn validate(raw: &RawAudit) -> Result<AuditConfig, KeyProblem> {
    let mut exports = Vec::with_capacity(raw.export.len());
    for (idx, export) in raw.export.iter().enumerate() {
        let sink = match (&export.file, &export.unix, &export.syslog) {
            (Some(path), None, None) if Path::new(path).is_absolute() => AuditExport::File(PathBuf::from(path)),
            (None, Some(path), None) if Path::new(path).is_absolute() => AuditExport::Unix(PathBuf::from(path)),
            (None, None, Some(addr))
                if addr.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok()) =>
            {
                AuditExport::Syslog(addr.clone())
            }
            _ => {
                return Err((
                    format!("export[{idx}]"),
                    "give one of file = \"/absolute/path\", unix = \"/absolute/path\" or syslog = \"host:port\"".to_owned(),
                ));
            }
        };
        exports.push(sink);
    }
    Ok(AuditConfig {
        exports,
        checkpoint_records: positive(raw.checkpoint_records, 1000).map_err(|problem| ("checkpoint_records".to_owned(), problem))?,
        checkpoint_every: optional_duration(raw.checkpoint_every.as_deref(), Duration::from_secs(60), DAY)
            .map_err(|problem| ("checkpoint_every".to_owned(), problem))?,
        key: match &raw.key {
            Some(path) if Path::new(path).is_absolute() => Some(PathBuf::from(path)),
            Some(_) => return Err(("key".to_owned(), "give an absolute path to the signing key's file".to_owned())),
            None => None,
        },
    })
}
