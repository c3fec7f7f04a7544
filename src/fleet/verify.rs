//! The audit chain against the fleet store's copy: this host's checkpoints as the fleet kept
//! them (which the host cannot rewrite), checked beside its own; and every host's shipped chain
//! checked in PostgreSQL itself, against the public key each host shipped first.

use sqlx::PgPool;

use super::FleetError;
use crate::store::audit_chain::{self, Chain, ChainRecord, CheckpointRecord, Verdict};

/// The checkpoints of `host_id` as the fleet store kept them.
///
/// # Errors
/// [`FleetError`] when PostgreSQL fails or gives no answer in time.
pub async fn checkpoints_of(pool: &PgPool, host_id: &str) -> Result<Vec<CheckpointRecord>, FleetError> {
    super::bounded(async {
        let mut checkpoints: Vec<CheckpointRecord> = sqlx::query_as(
            "SELECT local_id AS id, record_id, head_hash, records, signed_at_ms, signature, anchor FROM audit_checkpoints \
             WHERE host_id = $1 ORDER BY local_id",
        )
        .bind(host_id)
        .fetch_all(pool)
        .await?;
        for checkpoint in &mut checkpoints {
            checkpoint.kept_by_fleet = true;
        }
        Ok(checkpoints)
    })
    .await
}

/// Every host's chain as it shipped it, each with its verdict, by host id. A host's records in
/// the fleet start where it began to share them: the first one's link is taken as given.
///
/// # Errors
/// [`FleetError`] when PostgreSQL fails.
pub async fn every_host(pool: &PgPool) -> Result<Vec<(String, Verdict)>, FleetError> {
    let hosts: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT h.host_id, k.public_key FROM (SELECT DISTINCT host_id FROM audit) h LEFT JOIN audit_keys k USING (host_id) ORDER BY h.host_id",
    )
    .fetch_all(pool)
    .await?;
    let mut verdicts = Vec::with_capacity(hosts.len());
    for (host_id, key) in hosts {
        let records: Vec<ChainRecord> = sqlx::query_as(
            "SELECT local_id AS id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, \
             outcome, duration_us, arguments, prev_hash, hash FROM audit WHERE host_id = $1 ORDER BY local_id",
        )
        .bind(&host_id)
        .fetch_all(pool)
        .await?;
        let checkpoints = checkpoints_of(pool, &host_id).await?;
        let key = key.as_deref().and_then(audit_chain::parse_public_key);
        let verdict = audit_chain::check(Chain { anchor: None, records: &records, to_head: false }, &checkpoints, key.as_ref());
        verdicts.push((host_id, verdict));
    }
    Ok(verdicts)
}
