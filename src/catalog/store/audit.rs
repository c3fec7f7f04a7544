//! The audit trail's table: batches in, retention, queries.

use sqlx::Row;

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

impl Store {
    /// Stores audit records, in one transaction.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure; none of the batch is stored then.
    pub async fn append_audit(&self, records: &[crate::catalog::record::AuditRecord]) -> Result<(), StoreError> {
        // The whole batch travels as one JSON array and is inserted by one statement: a row
        // costs SQLite's work, not a round trip to the database thread each.
        let rows: Vec<serde_json::Value> = records
            .iter()
            .map(|r| {
                serde_json::json!([
                    r.at_ms,
                    &*r.agent,
                    r.caller,
                    r.transport,
                    r.qualified_name,
                    r.server,
                    r.tool,
                    to_i64(r.generation),
                    r.definition_hash,
                    r.outcome,
                    to_i64(r.duration_us),
                    r.arguments
                ])
            })
            .collect();
        let batch = serde_json::Value::Array(rows).to_string();
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO audit (at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, arguments) \
             SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, value ->> 7, value ->> 8, \
                    value ->> 9, value ->> 10, value ->> 11 FROM json_each(?)",
        )
        .bind(batch)
        .execute(tx.conn())
        .await?;
        tx.commit().await
    }

    /// Drops audit records older than `oldest_ms`, and the oldest beyond `max_records`.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn prune_audit(&self, oldest_ms: i64, max_records: u64) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        // Records not yet shipped to the fleet store outlive their retention until they are
        // (the fleet's cursor, when audit is shared); the count bound still applies.
        sqlx::query(
            "DELETE FROM audit WHERE at_ms < ? AND id <= coalesce((SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = 'fleet.audit'), id)",
        )
        .bind(oldest_ms)
        .execute(tx.conn())
        .await?;
        sqlx::query("DELETE FROM audit WHERE id <= (SELECT id FROM audit ORDER BY id DESC LIMIT 1 OFFSET ?)")
            .bind(to_i64(max_records))
            .execute(tx.conn())
            .await?;
        tx.commit().await
    }

    /// Audit records at or after `since_ms`, of `agent` if given, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn query_audit(
        &self,
        since_ms: i64,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::catalog::record::AuditRecord>, StoreError> {
        let filter = AuditFilter { since_ms, agent: agent.map(str::to_owned), ..AuditFilter::default() };
        self.query_audit_filtered(&filter, limit).await
    }

    /// Audit records that pass `filter`, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn query_audit_filtered(
        &self,
        filter: &AuditFilter,
        limit: u32,
    ) -> Result<Vec<crate::catalog::record::AuditRecord>, StoreError> {
        let sql = concat!(
            "SELECT at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, arguments \
             FROM audit WHERE ",
            audit_filter!(),
            " ORDER BY id DESC LIMIT ?6"
        );
        let rows = filter.bind(sqlx::query(sql)).bind(i64::from(limit)).fetch_all(&self.pool()).await?;
        rows.iter().map(audit_record).collect()
    }

    /// How many records that pass `filter` each outcome has in each `bucket_ms` window (windows
    /// start at multiples of `bucket_ms` since the epoch), oldest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn audit_histogram(&self, filter: &AuditFilter, bucket_ms: i64) -> Result<Vec<(i64, String, u64)>, StoreError> {
        let sql = concat!("SELECT (at_ms / ?6) * ?6, outcome, COUNT(*) FROM audit WHERE ", audit_filter!(), " GROUP BY 1, 2 ORDER BY 1");
        let rows: Vec<(i64, String, i64)> = filter.bind_as(sqlx::query_as(sql)).bind(bucket_ms.max(1)).fetch_all(&self.pool()).await?;
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
