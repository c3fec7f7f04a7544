//! The host's side of the fleet store: its SQLite tables are the spool. Audit records and
//! operators' approvals are shipped in id order from a cursor kept in `store_meta`
//! (`fleet.audit`, `fleet.approvals`), advanced only after PostgreSQL committed a batch: a
//! batch shipped twice lands once there, and nothing is lost while PostgreSQL is away.

use super::{Store, StoreError};

/// The cursor of shipped audit records; while it exists, unshipped records outlive retention.
pub const AUDIT_CURSOR: &str = "fleet.audit";
/// The cursor of shipped approvals.
pub const APPROVALS_CURSOR: &str = "fleet.approvals";
/// `store_meta` key of the last audit checkpoint shipped.
pub const AUDIT_CHECKPOINTS_CURSOR: &str = "fleet.audit_checkpoints";
/// A signed checkpoint of the audit chain, as it is shipped.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ShippedCheckpoint {
    pub id: i64,
    pub record_id: i64,
    pub head_hash: String,
    pub records: i64,
    pub signed_at_ms: i64,
    pub public_key: String,
    pub signature: String,
    pub anchor: Option<String>,
}

/// `approved_by` of approvals that came from the fleet (never shipped back).
pub const FROM_FLEET: &str = "fleet: ";

/// An operator's approval recorded on this host, as shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalApproval {
    pub id: i64,
    pub server: String,
    pub tool: String,
    pub hash: String,
    pub approved_by: String,
    pub approved_at_ms: i64,
}

/// The fleet spool's cursors and reads, reached as [`Store::fleet`].
#[derive(Clone, Copy)]
pub struct Spool<'a> {
    pub(super) store: &'a Store,
}

impl Spool<'_> {
    /// A fleet cursor (0 when never set).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn cursor(self, key: &str) -> Result<i64, StoreError> {
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = ?").bind(key).fetch_optional(&self.store.pool()).await?;
        Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Sets a fleet cursor (durably: it is the spool's only bookkeeping).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn set_cursor(self, key: &str, value: i64) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("INSERT INTO store_meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
            .bind(key)
            .bind(value.to_string())
            .execute(tx.conn())
            .await?;
        tx.commit().await
    }

    /// Starts holding unshipped audit records (the cursor at 0 if it never existed), or stops
    /// (the cursor removed) when the audit trail is no longer shared.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn hold_unshipped_audit(self, hold: bool) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        let statement = match hold {
            true => "INSERT INTO store_meta (key, value) VALUES (?1, '0') ON CONFLICT (key) DO NOTHING",
            false => "DELETE FROM store_meta WHERE key = ?1",
        };
        sqlx::query(statement).bind(AUDIT_CURSOR).execute(tx.conn()).await?;
        tx.commit().await
    }

    /// Signed audit checkpoints after `after_id` of records up to `upto_record`, oldest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn audit_checkpoints_after(self, after_id: i64, upto_record: i64, limit: u32) -> Result<Vec<ShippedCheckpoint>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, record_id, head_hash, records, signed_at_ms, public_key, signature, anchor FROM audit_checkpoints \
             WHERE id > ?1 AND record_id <= ?2 ORDER BY id LIMIT ?3",
        )
        .bind(after_id)
        .bind(upto_record)
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?)
    }

    /// How many audit records after `after_id` wait to be shipped.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn audit_count_after(self, after_id: i64) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM audit WHERE id > ?").bind(after_id).fetch_one(&self.store.pool()).await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Operators' approvals after `after_id`, oldest first: not the policy's own baselines, and
    /// not those that came from the fleet.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn approvals_after(self, after_id: i64, limit: u32) -> Result<Vec<LocalApproval>, StoreError> {
        let rows: Vec<(i64, String, String, String, String, i64)> = sqlx::query_as(
            "SELECT id, server, name, hash, approved_by, approved_at_ms FROM approvals \
             WHERE id > ?1 AND approved_by <> ?2 AND substr(approved_by, 1, length(?3)) <> ?3 ORDER BY id LIMIT ?4",
        )
        .bind(after_id)
        .bind(super::approvals::ACCEPTED_BY_POLICY)
        .bind(FROM_FLEET)
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, server, tool, hash, approved_by, approved_at_ms)| LocalApproval {
                id,
                server,
                tool,
                hash,
                approved_by,
                approved_at_ms,
            })
            .collect())
    }

    /// The highest approval id (what a cursor would stand at once everything is shipped).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn last_approval_id(self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar::<_, Option<i64>>("SELECT max(id) FROM approvals").fetch_one(&self.store.pool()).await?.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::record::AuditRecord;

    fn record(at_ms: i64) -> AuditRecord {
        AuditRecord {
            at_ms,
            agent: "a".into(),
            caller: "uid 0".into(),
            transport: "unix",
            qualified_name: "s__t".into(),
            server: "s".into(),
            tool: "t".into(),
            generation: 1,
            definition_hash: "h".into(),
            outcome: "ok".into(),
            duration_us: 1,
            arguments: None,
        }
    }

    #[tokio::test]
    async fn unshipped_records_outlive_their_retention_and_the_cursor_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let store = Store::open(&path, 10).await.unwrap();
        store.audit().append(&[record(1), record(2), record(3)]).await.unwrap();
        store.fleet().hold_unshipped_audit(true).await.unwrap();
        store.fleet().set_cursor(AUDIT_CURSOR, 1).await.unwrap();
        // Everything is past its retention; only the shipped record may go.
        store.audit().prune(i64::MAX, 1_000, None).await.unwrap();
        let left: Vec<i64> = store.audit().chained_after(0, 10).await.unwrap().into_iter().map(|(id, ..)| id).collect();
        assert_eq!(left, [2, 3]);
        store.close().await;
        let store = Store::open(&path, 10).await.unwrap();
        assert_eq!(store.fleet().cursor(AUDIT_CURSOR).await.unwrap(), 1, "the cursor survives a restart");
        assert_eq!(store.fleet().audit_count_after(1).await.unwrap(), 2);
        // Not shared any more: retention applies to everything again.
        store.fleet().hold_unshipped_audit(false).await.unwrap();
        store.audit().prune(i64::MAX, 1_000, None).await.unwrap();
        assert_eq!(store.fleet().audit_count_after(0).await.unwrap(), 0);
        store.close().await;
    }

    #[tokio::test]
    async fn only_operators_approvals_are_shipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("catalog.db"), 10).await.unwrap();
        store.approvals().approve("s", &[("a".into(), "h1".into())], "operator (uid 0)").await.unwrap();
        store.approvals().approve("s", &[("b".into(), "h2".into())], super::super::approvals::ACCEPTED_BY_POLICY).await.unwrap();
        store.approvals().approve("s", &[("c".into(), "h3".into())], &format!("{FROM_FLEET}someone (on host-b)")).await.unwrap();
        let shipped = store.fleet().approvals_after(0, 10).await.unwrap();
        assert_eq!(shipped.iter().map(|a| a.tool.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(store.fleet().last_approval_id().await.unwrap(), 3);
        store.close().await;
    }
}
