//! `toolhost check-config --probe`: each server started once, as the daemon would start it (in
//! its sandbox, with its home, its grants and its timeouts), through the handshake and one
//! complete listing, then stopped. What an operator learns before the daemon runs: that it
//! works, or why not, in the words a failing server gets in `toolhost servers`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::ServerSpec;
use crate::upstream::oauth::authorizer::Interaction;
use crate::upstream::reaper::Reaper;
use crate::upstream::{self, SessionSettings};

/// How one server's probe went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// It answered and listed its tools (their names, as the server gives them).
    Works { tools: Vec<String>, protocol: String, took: Duration },
    /// It did not; why, as the daemon would say it.
    Fails(String),
    /// Not started: why (disabled, or an OAuth server with nobody signed in).
    Skipped(String),
}

/// Starts `spec` once, lists its tools, stops it.
pub async fn probe(name: &str, spec: &ServerSpec, reaper: Arc<Reaper>) -> Probed {
    if !spec.enabled {
        return Probed::Skipped("disabled".to_owned());
    }
    let server: Arc<str> = Arc::from(name);
    let authorizer = match upstream::authorizer_for(&server, spec, Interaction::None, None) {
        Ok(authorizer) => authorizer,
        Err(error) => return Probed::Skipped(format!("cannot sign in without the daemon: {error}")),
    };
    let settings = SessionSettings {
        request_timeout: spec.request_timeout,
        max_message_bytes: spec.max_message_bytes,
        shutdown_grace: spec.shutdown_grace,
        reaper,
        authorizer,
        operations: crate::telemetry::metrics::Metrics::global().client_operation_duration,
        egress: Arc::default(),
    };
    let started = Instant::now();
    let connection = match upstream::connect(&server, spec, &settings, None).await {
        Ok(connection) => connection,
        Err(error) => return Probed::Fails(crate::secrets::redact_owned(error.to_string())),
    };
    let protocol = connection.hello().protocol_version.clone();
    let pass = super::enumerate::PassSettings {
        limits: &spec.limits,
        request_timeout: spec.request_timeout,
        enumeration_timeout: spec.enumeration_timeout,
    };
    // Nothing else lists this session: no list_changed can supersede the pass.
    let (_changes_tx, mut changes) = tokio::sync::watch::channel(0u64);
    let mut stats = super::enumerate::PassStats::default();
    let listed = super::enumerate::enumerate(connection.handle(), &pass, &mut changes, &mut stats).await;
    let took = started.elapsed();
    let ended = connection.shutdown().await;
    match listed {
        Ok(listing) => Probed::Works { tools: listing.tools.into_iter().map(|tool| tool.name).collect(), protocol, took },
        Err(super::enumerate::PassEnd::Failed(error)) => {
            // A server that exited on its own says why; one the probe stopped has nothing to add.
            let exited = ended.status.is_some_and(|status| status.code().is_some_and(|code| code != 0));
            let said = if exited { format!("{error}; it {}", ended.explain()) } else { error };
            Probed::Fails(crate::secrets::redact_owned(said))
        }
        Err(super::enumerate::PassEnd::Superseded) => Probed::Fails("the listing was superseded".to_owned()),
    }
}
