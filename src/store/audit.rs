//! The audit trail's table: batches in, retention, queries.

use sqlx::Row;

use super::audit_chain::{ChainRecord, CheckpointRecord, Signer, Signing, Stored};
use super::{Store, StoreError, to_i64, to_u64};

/// The `WHERE` clause of [`AuditFilter`], its parameters `?1` to `?5` (a macro, so that the
/// queries stay literal SQL).
macro_rules! audit_filter {
    () => {
        "at_ms >= ?1 AND (?2 IS NULL OR at_ms < ?2) AND (?3 IS NULL OR agent = ?3) \
         AND (?4 IS NULL OR instr(qualified_name, ?4) > 0) \
         AND (?5 IS NULL OR outcome = ?5 OR substr(outcome, 1, length(?5) + 1) = ?5 || ':')"
    };
}

/// Audit rows per `INSERT`: 14 bound values each, far below SQLite's limit of bound parameters.
const ROWS_PER_INSERT: usize = 64;

/// `INSERT INTO audit … VALUES` with `rows` rows of parameters.
fn insert_rows(rows: usize) -> String {
    const ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let mut sql = String::from(
        "INSERT INTO audit (at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, \
         duration_us, arguments, prev_hash, hash) VALUES ",
    );
    sql.reserve(rows * (ROW.len() + 2));
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(ROW);
    }
    sql
}

/// The audit trail's repository (records and their signed chain), reached as [`Store::audit`].
#[derive(Clone, Copy)]
pub struct Audit<'a> {
    pub(super) store: &'a Store,
}

impl Audit<'_> {
    /// Stores audit records, in one transaction.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure; none of the batch is stored then.
    pub async fn append(self, records: &[crate::catalog::record::AuditRecord]) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        // Each record chains to the one before it (the last written, else where retention cut
        // the chain, else the start), in the transaction that writes it.
        let head: Option<String> =
            sqlx::query_scalar("SELECT hash FROM audit WHERE hash IS NOT NULL ORDER BY id DESC LIMIT 1").fetch_optional(tx.conn()).await?;
        let mut prev = match head {
            Some(hash) => hash,
            None => sqlx::query_scalar("SELECT value FROM store_meta WHERE key = ?")
                .bind(super::audit_chain::ANCHOR_KEY)
                .fetch_optional(tx.conn())
                .await?
                .unwrap_or_else(|| super::audit_chain::GENESIS.to_owned()),
        };
        let mut chain = Vec::with_capacity(records.len());
        for r in records {
            let hash = super::audit_chain::record_hash(&prev, &super::audit_chain::Fields::of(r));
            chain.push((std::mem::replace(&mut prev, hash.clone()), hash));
        }
        // Rows go in with plain bound values, many to a statement: a row costs SQLite's insert
        // alone (no JSON to write and parse back), and a chunk one round trip to the database
        // thread. The statement's shapes (1 to `ROWS_PER_INSERT` rows) stay cached.
        for (rows, links) in records.chunks(ROWS_PER_INSERT).zip(chain.chunks(ROWS_PER_INSERT)) {
            let mut insert = sqlx::query(sqlx::AssertSqlSafe(insert_rows(rows.len())));
            for (r, (prev_hash, hash)) in rows.iter().zip(links) {
                insert = insert
                    .bind(r.at_ms)
                    .bind(&*r.agent)
                    .bind(&r.caller)
                    .bind(r.transport)
                    .bind(&r.qualified_name)
                    .bind(&r.server)
                    .bind(&r.tool)
                    .bind(to_i64(r.generation))
                    .bind(&r.definition_hash)
                    .bind(&r.outcome)
                    .bind(to_i64(r.duration_us))
                    .bind(r.arguments.as_deref())
                    .bind(prev_hash)
                    .bind(hash);
            }
            insert.execute(tx.conn()).await?;
        }
        tx.commit().await
    }

    /// Signs the chain's head and start unless the newest checkpoint signed both, and only if
    /// the chain as stored continues that checkpoint and what the daemon saw (`signer.witness`):
    /// the daemon never signs over a rewrite.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn checkpoint(self, signer: Signer<'_>) -> Result<Signing, StoreError> {
        let mut tx = self.store.begin().await?;
        if let Err((record_id, problem)) = continues(tx.conn(), signer).await? {
            return Ok(Signing::Refused { record_id, problem });
        }
        let signed = sign_head(tx.conn(), signer, None).await?;
        tx.commit().await?;
        Ok(signed)
    }

    /// The audit chain in `span` checked with `key`, beside `more` checkpoints (the fleet's copy),
    /// on a read-only connection of its own: the writers go on meanwhile.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be read.
    pub async fn verify(
        self,
        key: &ed25519_dalek::VerifyingKey,
        span: super::audit_chain::Span,
        more: &[super::audit_chain::CheckpointRecord],
    ) -> Result<super::audit_chain::Verdict, StoreError> {
        Ok(super::audit_chain::verify(&self.store.path, key, span, more).await?)
    }

    /// Audit records after `after_id`, oldest first, with their ids and chain hashes: what an
    /// export sends.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn chained_after(
        self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<(i64, crate::catalog::record::AuditRecord, Option<String>, Option<String>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, arguments, \
             id, prev_hash, hash FROM audit WHERE id > ?1 ORDER BY id LIMIT ?2",
        )
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        rows.iter().map(|row| Ok((row.try_get(12)?, audit_record(row)?, row.try_get(13)?, row.try_get(14)?))).collect()
    }

    /// Drops the oldest audit records: those before the first one written at or after
    /// `oldest_ms`, and beyond the newest `max_records`. A cut is always a prefix of the chain
    /// (a long call's record, older than one written before it, waits for the cut to reach
    /// it). With `signer`, the chain is first checked as [`Audit::checkpoint`] does (a
    /// chain that does not continue its newest checkpoint is neither cut nor signed: the
    /// evidence stays) and the new start is signed in the same transaction, so that no cut goes
    /// unsigned; what the signing did then.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn prune(self, oldest_ms: i64, max_records: u64, signer: Option<Signer<'_>>) -> Result<Option<Signing>, StoreError> {
        let mut tx = self.store.begin().await?;
        if let Some(signer) = signer
            && let Err((record_id, problem)) = continues(tx.conn(), signer).await?
        {
            return Ok(Some(Signing::Refused { record_id, problem }));
        }
        let head: Option<(i64, String)> =
            sqlx::query_as("SELECT id, hash FROM audit WHERE hash IS NOT NULL ORDER BY id DESC LIMIT 1").fetch_optional(tx.conn()).await?;
        // Records not yet shipped to the fleet store outlive their retention until they are
        // (the fleet's cursor, when audit is shared); the count bound still applies.
        sqlx::query(
            "DELETE FROM audit WHERE id < coalesce((SELECT min(id) FROM audit WHERE at_ms >= ?1), (SELECT max(id) + 1 FROM audit)) \
             AND id <= coalesce((SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = 'fleet.audit'), id)",
        )
        .bind(oldest_ms)
        .execute(tx.conn())
        .await?;
        sqlx::query("DELETE FROM audit WHERE id <= (SELECT id FROM audit ORDER BY id DESC LIMIT 1 OFFSET ?)")
            .bind(to_i64(max_records))
            .execute(tx.conn())
            .await?;
        // The chain is cut where the oldest record left now starts, and the cut is kept: a
        // verification starts there, and a record removed from the start later is seen.
        sqlx::query(
            "INSERT INTO store_meta (key, value) SELECT ?1, coalesce((SELECT prev_hash FROM audit WHERE hash IS NOT NULL ORDER BY id LIMIT 1), ?2) \
             WHERE ?2 IS NOT NULL ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(super::audit_chain::ANCHOR_KEY)
        .bind(head.as_ref().map(|(_, hash)| hash))
        .execute(tx.conn())
        .await?;
        let signed = match signer {
            Some(signer) => Some(sign_head(tx.conn(), signer, head).await?),
            None => None,
        };
        tx.commit().await?;
        Ok(signed)
    }

    /// Audit records at or after `since_ms`, of `agent` if given, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn query(
        self,
        since_ms: i64,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::catalog::record::AuditRecord>, StoreError> {
        let filter = AuditFilter { since_ms, agent: agent.map(str::to_owned), ..AuditFilter::default() };
        self.query_filtered(&filter, limit).await
    }

    /// Audit records that pass `filter`, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn query_filtered(self, filter: &AuditFilter, limit: u32) -> Result<Vec<crate::catalog::record::AuditRecord>, StoreError> {
        let sql = concat!(
            "SELECT at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, arguments \
             FROM audit WHERE ",
            audit_filter!(),
            " ORDER BY id DESC LIMIT ?6"
        );
        let rows = filter.bind(sqlx::query(sql)).bind(i64::from(limit)).fetch_all(&self.store.pool()).await?;
        rows.iter().map(audit_record).collect()
    }

    /// How many records that pass `filter` each outcome has in each `bucket_ms` window (windows
    /// start at multiples of `bucket_ms` since the epoch), oldest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn histogram(self, filter: &AuditFilter, bucket_ms: i64) -> Result<Vec<(i64, String, u64)>, StoreError> {
        let sql = concat!("SELECT (at_ms / ?6) * ?6, outcome, COUNT(*) FROM audit WHERE ", audit_filter!(), " GROUP BY 1, 2 ORDER BY 1");
        let rows: Vec<(i64, String, i64)> =
            filter.bind_as(sqlx::query_as(sql)).bind(bucket_ms.max(1)).fetch_all(&self.store.pool()).await?;
        Ok(rows.into_iter().map(|(start, outcome, count)| (start, outcome, u64::try_from(count).unwrap_or(0))).collect())
    }
}

/// What an audit query keeps: records in `[since_ms, until_ms)`, of the agent, whose qualified
/// name contains `tool`, whose outcome is `outcome` (or starts with it and a colon:
/// `stale_tool` keeps `stale_tool:removed`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub since_ms: i64,
    pub until_ms: Option<i64>,
    pub agent: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
}

impl AuditFilter {
    fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
        query.bind(self.since_ms).bind(self.until_ms).bind(self.agent.as_deref()).bind(self.tool.as_deref()).bind(self.outcome.as_deref())
    }

    fn bind_as<'q, O>(
        &'q self,
        query: sqlx::query::QueryAs<'q, sqlx::Sqlite, O, sqlx::sqlite::SqliteArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Sqlite, O, sqlx::sqlite::SqliteArguments> {
        query.bind(self.since_ms).bind(self.until_ms).bind(self.agent.as_deref()).bind(self.tool.as_deref()).bind(self.outcome.as_deref())
    }
}

/// Whether the chain as stored continues its newest checkpoint and what `signer` saw
/// ([`super::audit_chain::continues`]), read in the caller's transaction: the newest
/// checkpoint, the chain's start, and the records from the checkpoint's on.
async fn continues(conn: &mut sqlx::SqliteConnection, signer: Signer<'_>) -> Result<Result<(), (Option<i64>, String)>, StoreError> {
    let newest: Option<CheckpointRecord> = sqlx::query_as(
        "SELECT id, record_id, head_hash, records, signed_at_ms, signature, anchor FROM audit_checkpoints \
         ORDER BY record_id DESC, records ASC, id DESC LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await?;
    // Counted only when no checkpoint is: a count reads the whole table.
    let records: i64 = match &newest {
        Some(_) => 0,
        None => sqlx::query_scalar("SELECT COUNT(*) FROM audit").fetch_one(&mut *conn).await?,
    };
    let start: Option<(i64, String)> =
        sqlx::query_as("SELECT id, prev_hash FROM audit WHERE hash IS NOT NULL AND prev_hash IS NOT NULL ORDER BY id LIMIT 1")
            .fetch_optional(&mut *conn)
            .await?;
    let tail: Vec<ChainRecord> = match &newest {
        Some(newest) => {
            sqlx::query_as(
                "SELECT id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, \
                 duration_us, arguments, prev_hash, hash FROM audit WHERE id >= ? ORDER BY id",
            )
            .bind(newest.record_id)
            .fetch_all(&mut *conn)
            .await?
        }
        None => Vec::new(),
    };
    let stored = Stored { newest: newest.as_ref(), records, start: start.as_ref().map(|(id, prev)| (*id, prev.as_str())), tail: &tail };
    Ok(super::audit_chain::continues(&stored, signer.witness, &signer.key.verifying_key()))
}

/// Signs the chain's head and where it starts, in the caller's transaction, unless the newest
/// checkpoint signed both already. `cut`: the head before retention cut in this transaction,
/// signed with no record left (`records` 0) when the cut took every record.
async fn sign_head(conn: &mut sqlx::SqliteConnection, signer: Signer<'_>, cut: Option<(i64, String)>) -> Result<Signing, StoreError> {
    let last: Option<(i64, i64, Option<String>)> =
        sqlx::query_as("SELECT record_id, records, anchor FROM audit_checkpoints ORDER BY record_id DESC, records ASC, id DESC LIMIT 1")
            .fetch_optional(&mut *conn)
            .await?;
    let head: Option<(i64, String)> =
        sqlx::query_as("SELECT id, hash FROM audit WHERE hash IS NOT NULL ORDER BY id DESC LIMIT 1").fetch_optional(&mut *conn).await?;
    let Some((record_id, head_hash)) = head.or(cut) else {
        return Ok(Signing::Unchanged(last.map_or(0, |(record_id, ..)| record_id)));
    };
    let anchor: String = sqlx::query_scalar("SELECT value FROM store_meta WHERE key = ?")
        .bind(super::audit_chain::ANCHOR_KEY)
        .fetch_optional(&mut *conn)
        .await?
        .unwrap_or_else(|| super::audit_chain::GENESIS.to_owned());
    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit WHERE hash IS NOT NULL").fetch_one(&mut *conn).await?;
    if last == Some((record_id, records, Some(anchor.clone()))) {
        return Ok(Signing::Unchanged(record_id));
    }
    let (public_key, signature) = super::audit_chain::sign(signer.key, record_id, &head_hash, records, signer.now_ms, &anchor);
    sqlx::query(
        "INSERT INTO audit_checkpoints (record_id, head_hash, records, signed_at_ms, public_key, signature, anchor) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .bind(record_id)
    .bind(&head_hash)
    .bind(records)
    .bind(signer.now_ms)
    .bind(public_key)
    .bind(signature)
    .bind(anchor)
    .execute(&mut *conn)
    .await?;
    Ok(Signing::Signed(record_id))
}

/// An audit row, its columns in the order `query_audit` selects them.
pub(super) fn audit_record(row: &sqlx::sqlite::SqliteRow) -> Result<crate::catalog::record::AuditRecord, StoreError> {
    let transport: String = row.try_get(3)?;
    Ok(crate::catalog::record::AuditRecord {
        at_ms: row.try_get(0)?,
        agent: row.try_get::<String, _>(1)?.into(),
        caller: row.try_get(2)?,
        transport: if transport == "unix" { "unix" } else { "tcp" },
        qualified_name: row.try_get(4)?,
        server: row.try_get(5)?,
        tool: row.try_get(6)?,
        generation: to_u64(row.try_get(7)?)?,
        definition_hash: row.try_get(8)?,
        outcome: row.try_get(9)?,
        duration_us: to_u64(row.try_get(10)?)?,
        arguments: row.try_get(11)?,
    })
}
