//! What this host offers, published for the fleet: its servers' states and current generations,
//! and each tool's definition hash, under the server's fleet identity. Only servers whose
//! state or generation changed since the last publication are written again. Drift is a tool
//! of one identity whose hash differs between hosts: it is counted, logged and recorded as an
//! OpenTelemetry event when it appears.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use opentelemetry::KeyValue;
use sqlx::PgPool;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::FleetError;
use crate::registry::CatalogSnapshot;

/// What was last published, per server, and the drift last seen.
#[derive(Default)]
pub(super) struct Published {
    servers: HashMap<String, (String, &'static str, u64)>,
    drifted: BTreeSet<(String, String)>,
    /// The first publication of a link cleared what this host published before (a server
    /// removed while the link was down, or before a restart).
    synced: bool,
}

/// Says this host is alive (and which toolhost it runs).
pub(super) async fn announce_host(pool: &PgPool, host_id: &str) -> Result<(), FleetError> {
    sqlx::query(
        "INSERT INTO hosts (host_id, version, started_at, last_seen) VALUES ($1, $2, now(), now()) \
         ON CONFLICT (host_id) DO UPDATE SET version = excluded.version, last_seen = now()",
    )
    .bind(host_id)
    .bind(env!("CARGO_PKG_VERSION"))
    .execute(pool)
    .await?;
    Ok(())
}

impl Published {
    /// Publishes the servers of `snapshot` that changed since the last call, and forgets
    /// servers this host no longer has.
    pub(super) async fn publish(
        &mut self,
        pool: &PgPool,
        host_id: &str,
        snapshot: &CatalogSnapshot,
        identities: &BTreeMap<String, String>,
    ) -> Result<(), FleetError> {
        if !self.synced {
            let current: Vec<&str> = snapshot.servers.keys().map(|name| &**name).collect();
            sqlx::query("DELETE FROM host_servers WHERE host_id = $1 AND NOT (server = ANY($2))")
                .bind(host_id)
                .bind(&current)
                .execute(pool)
                .await?;
            self.synced = true;
        }
        for view in snapshot.servers.values() {
            let Some(identity) = identities.get(&**view.name()) else { continue };
            let current = (identity.clone(), view.state().name(), view.generation_number());
            if self.servers.get(&**view.name()) == Some(&current) {
                continue;
            }
            let (names, hashes): (Vec<&str>, Vec<&str>) =
                view.generation().iter().flat_map(|g| g.tools.iter()).map(|tool| (tool.name.as_str(), tool.hash.as_str())).unzip();
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO host_servers (host_id, server, identity, state, generation, updated_at) VALUES ($1, $2, $3, $4, $5, now()) \
                 ON CONFLICT (host_id, server) DO UPDATE SET identity = excluded.identity, state = excluded.state, \
                 generation = excluded.generation, updated_at = now()",
            )
            .bind(host_id)
            .bind(&**view.name())
            .bind(identity)
            .bind(current.1)
            .bind(i64::try_from(current.2).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM host_tools WHERE host_id = $1 AND server = $2")
                .bind(host_id)
                .bind(&**view.name())
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO host_tools (host_id, server, identity, tool, definition_hash) \
                 SELECT $1, $2, $3, * FROM UNNEST($4::text[], $5::text[])",
            )
            .bind(host_id)
            .bind(&**view.name())
            .bind(identity)
            .bind(&names)
            .bind(&hashes)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            self.servers.insert(view.name().to_string(), current);
        }
        let gone: Vec<String> = self.servers.keys().filter(|name| !snapshot.servers.contains_key(name.as_str())).cloned().collect();
        for name in gone {
            sqlx::query("DELETE FROM host_servers WHERE host_id = $1 AND server = $2").bind(host_id).bind(&name).execute(pool).await?;
            self.servers.remove(&name);
        }
        Ok(())
    }
}

/// Counts this host's tools that another host sees with a different definition, and reports
/// each one that was not drifting at the last look.
pub(super) async fn check_drift(pool: &PgPool, host_id: &str, published: &mut Published) -> Result<u64, FleetError> {
    let rows: Vec<(String, String, String, String, String)> = sqlx::query_as(
        "SELECT DISTINCT mine.server, mine.tool, mine.definition_hash, theirs.host_id, theirs.definition_hash \
         FROM host_tools mine JOIN host_tools theirs ON theirs.identity = mine.identity AND theirs.tool = mine.tool \
         AND theirs.host_id <> mine.host_id AND theirs.definition_hash <> mine.definition_hash WHERE mine.host_id = $1 \
         ORDER BY 1, 2, 4",
    )
    .bind(host_id)
    .fetch_all(pool)
    .await?;
    let drifted: BTreeSet<(String, String)> = rows.iter().map(|(server, tool, ..)| (server.clone(), tool.clone())).collect();
    for (server, tool, mine, other_host, theirs) in &rows {
        if published.drifted.contains(&(server.clone(), tool.clone())) {
            continue;
        }
        let span = tracing::info_span!("fleet drift", otel.name = "toolhost.fleet.drift", toolhost.server = %server);
        span.add_event(
            "toolhost.fleet.drift",
            vec![
                KeyValue::new("toolhost.server", server.clone()),
                KeyValue::new("gen_ai.tool.name", tool.clone()),
                KeyValue::new("toolhost.definition_hash", mine.clone()),
                KeyValue::new("toolhost.fleet.other_host", other_host.clone()),
                KeyValue::new("toolhost.fleet.other_hash", theirs.clone()),
            ],
        );
        span.in_scope(|| {
            tracing::warn!(server, tool, hash = %mine, other_host, other_hash = %theirs, "definition drift: another host sees this tool differently");
        });
        crate::telemetry::metrics::Metrics::global().record_fleet_drift(server);
        published.drifted.insert((server.clone(), tool.clone()));
    }
    published.drifted.retain(|key| drifted.contains(key));
    Ok(u64::try_from(drifted.len()).unwrap_or(u64::MAX))
}
