//! Reading the fleet store for operators: every host with its servers, every tool whose
//! definition differs between hosts, and the audit trail of all hosts.

use std::collections::BTreeMap;

use sqlx::PgPool;

use super::FleetError;
use crate::audit::AuditRecord;

/// A host as the fleet store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub host_id: String,
    pub version: String,
    pub last_seen_ms: i64,
    pub servers: Vec<HostServer>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostServer {
    pub server: String,
    pub identity: String,
    pub state: String,
    pub generation: u64,
    pub tools: u32,
}

/// One tool of one identity that hosts see differently: each hash, and who sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub identity: String,
    pub tool: String,
    pub variants: Vec<(String, Vec<String>)>,
}

/// An audit record of some host.
#[derive(Debug, Clone)]
pub struct FleetAuditRecord {
    pub host_id: String,
    pub record: AuditRecord,
}

/// Every host and its servers, by host id.
///
/// # Errors
/// [`FleetError`] when PostgreSQL fails or gives no answer in time.
pub async fn hosts(pool: &PgPool) -> Result<Vec<Host>, FleetError> {
    super::bounded(async {
        let hosts: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT host_id, version, (extract(epoch FROM last_seen) * 1000)::bigint FROM hosts ORDER BY host_id")
                .fetch_all(pool)
                .await?;
        let servers: Vec<(String, String, String, String, i64, i64)> = sqlx::query_as(
            "SELECT s.host_id, s.server, s.identity, s.state, s.generation, \
             (SELECT count(*) FROM host_tools t WHERE t.host_id = s.host_id AND t.server = s.server) \
             FROM host_servers s ORDER BY s.host_id, s.server",
        )
        .fetch_all(pool)
        .await?;
        let mut by_host: BTreeMap<String, Vec<HostServer>> = BTreeMap::new();
        for (host, server, identity, state, generation, tools) in servers {
            by_host.entry(host).or_default().push(HostServer {
                server,
                identity,
                state,
                generation: u64::try_from(generation).unwrap_or(0),
                tools: u32::try_from(tools).unwrap_or(u32::MAX),
            });
        }
        Ok(hosts
            .into_iter()
            .map(|(host_id, version, last_seen_ms)| {
                let servers = by_host.remove(&host_id).unwrap_or_default();
                Host { host_id, version, last_seen_ms, servers }
            })
            .collect())
    })
    .await
}

/// Every tool whose definition differs between hosts, with each variant's hosts.
///
/// # Errors
/// [`FleetError`] when PostgreSQL fails or gives no answer in time.
pub async fn drift(pool: &PgPool) -> Result<Vec<Drift>, FleetError> {
    super::bounded(async {
        let rows: Vec<(String, String, String, Vec<String>)> = sqlx::query_as(
            "SELECT identity, tool, definition_hash, array_agg(DISTINCT host_id ORDER BY host_id) FROM host_tools \
             WHERE (identity, tool) IN (SELECT identity, tool FROM host_tools GROUP BY identity, tool HAVING count(DISTINCT definition_hash) > 1) \
             GROUP BY identity, tool, definition_hash ORDER BY identity, tool, definition_hash",
        )
        .fetch_all(pool)
        .await?;
        let mut drift: Vec<Drift> = Vec::new();
        for (identity, tool, hash, hosts) in rows {
            match drift.last_mut() {
                Some(last) if last.identity == identity && last.tool == tool => last.variants.push((hash, hosts)),
                _ => drift.push(Drift { identity, tool, variants: vec![(hash, hosts)] }),
            }
        }
        Ok(drift)
    })
    .await
}

/// Audit records of every host at or after `since_ms`, of `agent` if given, newest first.
///
/// # Errors
/// [`FleetError`] when PostgreSQL fails or gives no answer in time.
pub async fn audit(pool: &PgPool, since_ms: i64, agent: Option<&str>, limit: u32) -> Result<Vec<FleetAuditRecord>, FleetError> {
    super::bounded(async {
        type Row = (String, i64, String, String, String, String, String, String, i64, String, String, i64, Option<String>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT host_id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, \
             duration_us, arguments FROM audit WHERE at_ms >= $1 AND ($2::text IS NULL OR agent = $2) \
             ORDER BY at_ms DESC, host_id, local_id DESC LIMIT $3",
        )
        .bind(since_ms)
        .bind(agent)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    host_id,
                    at_ms,
                    agent,
                    caller,
                    transport,
                    qualified_name,
                    server,
                    tool,
                    generation,
                    definition_hash,
                    outcome,
                    duration_us,
                    arguments,
                )| {
                    FleetAuditRecord {
                        host_id,
                        record: AuditRecord {
                            at_ms,
                            agent: agent.into(),
                            caller,
                            transport: if transport == "unix" { "unix" } else { "tcp" },
                            qualified_name,
                            server,
                            tool,
                            generation: u64::try_from(generation).unwrap_or(0),
                            definition_hash,
                            outcome,
                            duration_us: u64::try_from(duration_us).unwrap_or(0),
                            arguments,
                        },
                    }
                },
            )
            .collect())
    })
    .await
}
