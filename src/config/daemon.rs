//! The daemon's own sections, as written and as validated: `[store]` (its SQLite file),
//! `[grpc]` (the API's listeners), `[daemon]` (its shutdown) and `[telemetry]` (OpenTelemetry).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::listeners::{Listener, OneOrMany};
use super::{HOUR, KeyProblem, MINUTE, default_socket, optional_duration, places, positive};

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub(crate) path: Option<String>,
    pub(crate) history_generations: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// The SQLite file (absolute).
    pub path: PathBuf,
    /// How many generations of history to keep per server.
    pub history_generations: u32,
}

/// `[store]`; a relative path is taken against the configuration file's directory.
impl TryFrom<(&Path, &RawStore)> for StoreConfig {
    type Error = KeyProblem;

    fn try_from((base, raw): (&Path, &RawStore)) -> Result<StoreConfig, KeyProblem> {
        let path = match &raw.path {
            Some(path) if path.trim().is_empty() => return Err(("path".into(), "must not be empty".into())),
            Some(path) => base.join(path),
            // Not beside the file: a desktop client's folder is not toolhost's.
            None => places::state_dir().join("toolhost.db"),
        };
        let history_generations = raw.history_generations.unwrap_or(50);
        if history_generations == 0 {
            return Err(("history_generations".into(), "must be at least 1".into()));
        }
        Ok(StoreConfig { path, history_generations })
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrpc {
    pub(crate) listen: Option<OneOrMany>,
    pub(crate) watch_backlog: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GrpcConfig {
    pub listen: Vec<Listener>,
    /// Catalog events kept for watchers that fall behind; older ones get a resync.
    pub watch_backlog: usize,
}

/// `[grpc]`; without `listen`, the default socket.
impl TryFrom<(&Path, RawGrpc)> for GrpcConfig {
    type Error = KeyProblem;

    fn try_from((base, raw): (&Path, RawGrpc)) -> Result<GrpcConfig, KeyProblem> {
        let entries = match raw.listen {
            None => vec![default_socket(places::GRPC_SOCKET)],
            listen => OneOrMany::into_vec(listen),
        };
        let mut listen = Vec::new();
        for (idx, entry) in entries.iter().enumerate() {
            listen.push(Listener::try_from((base, entry)).map_err(|problem| (format!("listen[{idx}]"), problem.to_string()))?);
        }
        if listen.is_empty() {
            return Err(("listen".into(), "needs at least one address".into()));
        }
        let watch_backlog = positive(raw.watch_backlog, 4096).map_err(|problem| ("watch_backlog".to_owned(), problem.to_string()))?;
        Ok(GrpcConfig { listen, watch_backlog: usize::try_from(watch_backlog).unwrap_or(usize::MAX) })
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDaemon {
    pub(crate) shutdown_timeout: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// How long a graceful stop may take before toolhost stops waiting.
    pub shutdown_timeout: Duration,
}

/// `[daemon]`.
impl TryFrom<&RawDaemon> for DaemonConfig {
    type Error = KeyProblem;

    fn try_from(raw: &RawDaemon) -> Result<DaemonConfig, KeyProblem> {
        let shutdown_timeout = optional_duration(raw.shutdown_timeout.as_deref(), Duration::from_secs(20), HOUR)
            .map_err(|p| ("shutdown_timeout".to_owned(), p.to_string()))?;
        Ok(DaemonConfig { shutdown_timeout })
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetry {
    pub(crate) otlp_endpoint: Option<String>,
    pub(crate) service_name: Option<String>,
    pub(crate) traces: Option<bool>,
    pub(crate) metrics: Option<bool>,
    pub(crate) metrics_interval: Option<String>,
    pub(crate) export_timeout: Option<String>,
}

/// OpenTelemetry export. Off unless an endpoint is set here or in `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's OTLP/gRPC endpoint, e.g. `http://127.0.0.1:4317`.
    pub otlp_endpoint: Option<String>,
    /// `service.name`; else `OTEL_SERVICE_NAME`, else "toolhost".
    pub service_name: Option<String>,
    pub traces: bool,
    pub metrics: bool,
    pub metrics_interval: Duration,
    pub export_timeout: Duration,
}

/// `[telemetry]`.
impl TryFrom<RawTelemetry> for TelemetryConfig {
    type Error = KeyProblem;

    fn try_from(raw: RawTelemetry) -> Result<TelemetryConfig, KeyProblem> {
        Ok(TelemetryConfig {
            otlp_endpoint: match raw.otlp_endpoint {
                Some(endpoint) if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) => {
                    return Err(("otlp_endpoint".into(), format!("{endpoint:?} is not an http:// or https:// URL")));
                }
                endpoint => endpoint,
            },
            service_name: raw.service_name,
            traces: raw.traces.unwrap_or(true),
            metrics: raw.metrics.unwrap_or(true),
            metrics_interval: optional_duration(raw.metrics_interval.as_deref(), Duration::from_secs(15), HOUR)
                .map_err(|p| ("metrics_interval".to_owned(), p.to_string()))?,
            export_timeout: optional_duration(raw.export_timeout.as_deref(), Duration::from_secs(3), 10 * MINUTE)
                .map_err(|p| ("export_timeout".to_owned(), p.to_string()))?,
        })
    }
}
