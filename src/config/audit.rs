//! `[audit]`: where the audit trail is sent as it is written, and how often its chain's head is
//! signed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{DAY, KeyProblem, ValueError, optional_duration, positive};

/// `[audit]`: where the audit trail is sent as it is written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAudit {
    #[serde(default)]
    pub(crate) export: Vec<RawExport>,
    /// Sign the chain's head after this many records…
    pub(crate) checkpoint_records: Option<u32>,
    /// …or this long after the last checkpoint when there are new ones.
    pub(crate) checkpoint_every: Option<String>,
    /// The signing key's file, instead of `audit.key` beside the store.
    pub(crate) key: Option<String>,
}

/// One `[audit] export` sink: `{ file = "/var/log/toolhost/audit.jsonl" }` or `{ unix = "/run/siem.sock" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExport {
    pub(crate) file: Option<String>,
    pub(crate) unix: Option<String>,
    /// `host:port` of a syslog receiver (RFC 5424 over TCP, RFC 6587 octet counting).
    pub(crate) syslog: Option<String>,
    /// Syslog over TLS (RFC 5425): `true`, checked against the usual roots or `ca`.
    pub(crate) tls: Option<bool>,
    /// A PEM file of the certificate authorities a TLS syslog receiver is checked against.
    pub(crate) ca: Option<String>,
    /// `http://host:port` of an OpenTelemetry collector's OTLP/gRPC endpoint: records as logs.
    pub(crate) otlp: Option<String>,
}

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

/// One audit export sink: JSON Lines appended to a file or written to a Unix stream socket,
/// syslog over TCP or TLS, or OpenTelemetry logs over OTLP/gRPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditExport {
    File(PathBuf),
    Unix(PathBuf),
    /// A syslog receiver: `host:port`, over TLS when `tls` is given.
    Syslog {
        addr: String,
        tls: Option<SyslogTls>,
    },
    /// An OTLP/gRPC logs endpoint, `http://host:port`.
    Otlp(String),
}

/// How a TLS syslog receiver is checked: its name (the address's host) against the usual roots,
/// or against the certificate authorities of `ca`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyslogTls {
    pub ca: Option<PathBuf>,
}

impl AuditExport {
    /// A name for its cursor and its log lines.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            AuditExport::File(path) => format!("file:{}", path.display()),
            AuditExport::Unix(path) => format!("unix:{}", path.display()),
            AuditExport::Syslog { addr, tls: None } => format!("syslog:{addr}"),
            AuditExport::Syslog { addr, tls: Some(_) } => format!("syslog-tls:{addr}"),
            AuditExport::Otlp(endpoint) => format!("otlp:{endpoint}"),
        }
    }
}

/// `[audit]`.
impl TryFrom<&RawAudit> for AuditConfig {
    type Error = KeyProblem;

    fn try_from(raw: &RawAudit) -> Result<AuditConfig, KeyProblem> {
        validate(raw)
    }
}

fn validate(raw: &RawAudit) -> Result<AuditConfig, KeyProblem> {
    let mut exports = Vec::with_capacity(raw.export.len());
    for (idx, export) in raw.export.iter().enumerate() {
        exports.push(AuditExport::try_from(export).map_err(|problem| (format!("export[{idx}]"), problem.to_string()))?);
    }
    Ok(AuditConfig {
        exports,
        checkpoint_records: positive(raw.checkpoint_records, 1000)
            .map_err(|problem| ("checkpoint_records".to_owned(), problem.to_string()))?,
        checkpoint_every: optional_duration(raw.checkpoint_every.as_deref(), Duration::from_secs(60), DAY)
            .map_err(|problem| ("checkpoint_every".to_owned(), problem.to_string()))?,
        key: match &raw.key {
            Some(path) if Path::new(path).is_absolute() => Some(PathBuf::from(path)),
            Some(_) => return Err(("key".to_owned(), "give an absolute path to the signing key's file".to_owned())),
            None => None,
        },
    })
}

/// One `export` sink.
impl TryFrom<&RawExport> for AuditExport {
    type Error = ValueError;

    fn try_from(export: &RawExport) -> Result<AuditExport, ValueError> {
        sink(export)
    }
}

fn sink(export: &RawExport) -> Result<AuditExport, ValueError> {
    let absolute = |path: &str| Path::new(path).is_absolute().then(|| PathBuf::from(path));
    if (export.tls.is_some() || export.ca.is_some()) && export.syslog.is_none() {
        return Err(ValueError::TlsWithoutSyslog);
    }
    match (&export.file, &export.unix, &export.syslog, &export.otlp) {
        (Some(path), None, None, None) => absolute(path).map(AuditExport::File).ok_or(ValueError::NoSink),
        (None, Some(path), None, None) => absolute(path).map(AuditExport::Unix).ok_or(ValueError::NoSink),
        (None, None, Some(addr), None) => {
            let valid = addr.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(ValueError::NotSyslogAddress { addr: addr.clone() });
            }
            let ca = match &export.ca {
                Some(path) => Some(absolute(path).ok_or_else(|| ValueError::CaNotAbsolute { path: path.clone() })?),
                None => None,
            };
            let tls = match (export.tls, ca) {
                (Some(true), ca) => Some(SyslogTls { ca }),
                (None | Some(false), Some(_)) => return Err(ValueError::CaWithoutTls),
                (None | Some(false), None) => None,
            };
            Ok(AuditExport::Syslog { addr: addr.clone(), tls })
        }
        (None, None, None, Some(endpoint)) => {
            let valid = endpoint
                .strip_prefix("http://")
                .and_then(|rest| rest.trim_end_matches('/').rsplit_once(':'))
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(ValueError::NotOtlpEndpoint { endpoint: endpoint.clone() });
            }
            Ok(AuditExport::Otlp(endpoint.trim_end_matches('/').to_owned()))
        }
        _ => Err(ValueError::NoSink),
    }
}
