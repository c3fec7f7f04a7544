//! Shipping the spool: this host's audit records and its operators' approvals go to the fleet
//! store in id order, in batches, at least once. Each batch is one PostgreSQL transaction that
//! ignores rows it already has (their `(host_id, local_id)`), and the SQLite cursor moves only
//! after it committed: a batch shipped twice (PostgreSQL killed after the commit, before the
//! answer) lands once, and nothing is skipped.

use std::collections::BTreeMap;

use sqlx::PgPool;

use super::FleetError;
use crate::store::Store;
use crate::store::fleet::{APPROVALS_CURSOR, AUDIT_CHECKPOINTS_CURSOR, AUDIT_CURSOR};

/// Records per batch, and batches per tick (the rest waits for the next tick).
const BATCH: u32 = 500;
const BATCHES_PER_TICK: usize = 8;

/// Ships audit records; returns how many still wait.
///
/// # Errors
/// [`FleetError`] when PostgreSQL or the store fails, or an exchange takes longer than its
/// bound; the cursor then stays after the last batch that committed.
pub(super) async fn audit(pool: &PgPool, store: &Store, host_id: &str) -> Result<u64, FleetError> {
    let mut cursor = store.fleet().cursor(AUDIT_CURSOR).await?;
    for _ in 0..BATCHES_PER_TICK {
        let batch = store.audit().chained_after(cursor, BATCH).await?;
        let Some(last) = batch.last().map(|(id, ..)| *id) else { break };
        let mut columns = AuditColumns::default();
        for (id, record, prev_hash, hash) in &batch {
            columns.push(*id, record);
            columns.prev_hash.push(prev_hash.clone());
            columns.hash.push(hash.clone());
        }
        let insert = sqlx::query(
            "INSERT INTO audit (host_id, local_id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, \
             definition_hash, outcome, duration_us, arguments, prev_hash, hash) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], \
             $9::text[], $10::bigint[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::text[], $16::text[]) \
             ON CONFLICT (host_id, local_id) DO NOTHING",
        )
        .bind(host_id)
        .bind(&columns.local_id)
        .bind(&columns.at_ms)
        .bind(&columns.agent)
        .bind(&columns.caller)
        .bind(&columns.transport)
        .bind(&columns.qualified_name)
        .bind(&columns.server)
        .bind(&columns.tool)
        .bind(&columns.generation)
        .bind(&columns.definition_hash)
        .bind(&columns.outcome)
        .bind(&columns.duration_us)
        .bind(&columns.arguments)
        .bind(&columns.prev_hash)
        .bind(&columns.hash)
        .execute(pool);
        // Each batch is bounded on its own: a slow machine still moves one batch at a time.
        super::bounded(async { Ok(insert.await?) }).await?;
        store.fleet().set_cursor(AUDIT_CURSOR, last).await?;
        cursor = last;
        if batch.len() < BATCH as usize {
            break;
        }
    }
    super::bounded(checkpoints(pool, store, host_id, cursor)).await?;
    Ok(store.fleet().audit_count_after(cursor).await?)
}

/// Ships the audit chain's signed checkpoints of records already shipped (`shipped`, the audit
/// cursor), pinning the host's first public key.
async fn checkpoints(pool: &PgPool, store: &Store, host_id: &str, shipped: i64) -> Result<(), FleetError> {
    let cursor = store.fleet().cursor(AUDIT_CHECKPOINTS_CURSOR).await?;
    let batch = store.fleet().audit_checkpoints_after(cursor, shipped, BATCH).await?;
    let Some(last) = batch.last().map(|checkpoint| checkpoint.id) else { return Ok(()) };
    let mut tx = pool.begin().await?;
    for checkpoint in &batch {
        sqlx::query("INSERT INTO audit_keys (host_id, public_key, first_seen_ms) VALUES ($1, $2, $3) ON CONFLICT (host_id) DO NOTHING")
            .bind(host_id)
            .bind(&checkpoint.public_key)
            .bind(checkpoint.signed_at_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO audit_checkpoints (host_id, local_id, record_id, head_hash, records, signed_at_ms, public_key, signature, anchor) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (host_id, local_id) DO NOTHING",
        )
        .bind(host_id)
        .bind(checkpoint.id)
        .bind(checkpoint.record_id)
        .bind(&checkpoint.head_hash)
        .bind(checkpoint.records)
        .bind(checkpoint.signed_at_ms)
        .bind(&checkpoint.public_key)
        .bind(&checkpoint.signature)
        .bind(&checkpoint.anchor)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    store.fleet().set_cursor(AUDIT_CHECKPOINTS_CURSOR, last).await?;
    Ok(())
}

/// Ships operators' approvals of servers this host still has (under their fleet identity).
///
/// # Errors
/// [`FleetError`]; the cursor then stays where it was.
pub(super) async fn approvals(
    pool: &PgPool,
    store: &Store,
    host_id: &str,
    identities: &BTreeMap<String, String>,
) -> Result<(), FleetError> {
    let cursor = store.fleet().cursor(APPROVALS_CURSOR).await?;
    let batch = store.fleet().approvals_after(cursor, BATCH).await?;
    let Some(last) = batch.last().map(|approval| approval.id) else { return Ok(()) };
    let mut tx = pool.begin().await?;
    for approval in &batch {
        let Some(identity) = identities.get(&approval.server) else { continue };
        sqlx::query(
            "INSERT INTO approvals (identity, tool, definition_hash, approved_by, approved_at_ms, host_id, local_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (host_id, local_id) DO NOTHING",
        )
        .bind(identity)
        .bind(&approval.tool)
        .bind(&approval.hash)
        .bind(&approval.approved_by)
        .bind(approval.approved_at_ms)
        .bind(host_id)
        .bind(approval.id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    store.fleet().set_cursor(APPROVALS_CURSOR, last).await?;
    Ok(())
}

/// A batch of audit records as PostgreSQL arrays, one per column.
#[derive(Default)]
struct AuditColumns {
    local_id: Vec<i64>,
    at_ms: Vec<i64>,
    agent: Vec<String>,
    caller: Vec<String>,
    transport: Vec<String>,
    qualified_name: Vec<String>,
    server: Vec<String>,
    tool: Vec<String>,
    generation: Vec<i64>,
    definition_hash: Vec<String>,
    outcome: Vec<String>,
    duration_us: Vec<i64>,
    arguments: Vec<Option<String>>,
    prev_hash: Vec<Option<String>>,
    hash: Vec<Option<String>>,
}

impl AuditColumns {
    fn push(&mut self, id: i64, record: &crate::audit::AuditRecord) {
        self.local_id.push(id);
        self.at_ms.push(record.at_ms);
        self.agent.push(record.agent.to_string());
        self.caller.push(record.caller.clone());
        self.transport.push(record.transport.to_owned());
        self.qualified_name.push(record.qualified_name.clone());
        self.server.push(record.server.clone());
        self.tool.push(record.tool.clone());
        self.generation.push(i64::try_from(record.generation).unwrap_or(i64::MAX));
        self.definition_hash.push(record.definition_hash.clone());
        self.outcome.push(record.outcome.clone());
        self.duration_us.push(i64::try_from(record.duration_us).unwrap_or(i64::MAX));
        self.arguments.push(record.arguments.clone());
    }
}
