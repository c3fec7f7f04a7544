//! The store's side of definition integrity: approvals, with their history (the stored
//! definitions they name, and their one-time rehash, are the generations', `definitions.rs`).

use std::collections::HashMap;

use sqlx::SqliteConnection;

use super::{Store, StoreError};
use crate::catalog::integrity::Approval;
use crate::catalog::record::now_ms;

/// Approval rows kept per tool: the current one and its recent history.
const APPROVALS_KEPT: i64 = 20;
/// Who approved a definition that the server's policy accepted on its own.
pub const ACCEPTED_BY_POLICY: &str = "policy (accept)";

/// Inserts approvals of `(tool, hash)` in a write transaction, keeping each tool's history bounded.
pub(super) async fn insert(
    conn: &mut SqliteConnection,
    server: &str,
    tools: &[(String, String)],
    approved_by: &str,
) -> Result<i64, StoreError> {
    let at = now_ms();
    if tools.is_empty() {
        return Ok(at);
    }
    let entries = serde_json::to_string(tools).map_err(|err| StoreError::Corrupt(err.to_string()))?;
    sqlx::query(
        "INSERT INTO approvals (server, name, hash, approved_by, approved_at_ms) \
         SELECT ?1, value ->> 0, value ->> 1, ?2, ?3 FROM json_each(?4)",
    )
    .bind(server)
    .bind(approved_by)
    .bind(at)
    .bind(&entries)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "DELETE FROM approvals WHERE server = ?1 AND name IN (SELECT value ->> 0 FROM json_each(?2)) AND id NOT IN \
         (SELECT id FROM approvals a WHERE a.server = approvals.server AND a.name = approvals.name ORDER BY id DESC LIMIT ?3)",
    )
    .bind(server)
    .bind(&entries)
    .bind(APPROVALS_KEPT)
    .execute(&mut *conn)
    .await?;
    Ok(at)
}

/// The definition approvals' repository (the integrity baselines and operators' approvals),
/// reached as [`Store::approvals`].
#[derive(Clone, Copy)]
pub struct Approvals<'a> {
    pub(super) store: &'a Store,
}

impl Approvals<'_> {
    /// The current approval of every tool that has one (of one server, or of all), by server
    /// then tool name.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn current(self, server: Option<&str>) -> Result<HashMap<String, HashMap<String, Approval>>, StoreError> {
        let rows: Vec<(String, String, String, String, i64)> = sqlx::query_as(
            "SELECT server, name, hash, approved_by, approved_at_ms FROM approvals \
             WHERE id IN (SELECT max(id) FROM approvals WHERE ?1 IS NULL OR server = ?1 GROUP BY server, name)",
        )
        .bind(server)
        .fetch_all(&self.store.pool())
        .await?;
        let mut by_server: HashMap<String, HashMap<String, Approval>> = HashMap::new();
        for (server, name, hash, approved_by, approved_at_ms) in rows {
            by_server.entry(server).or_default().insert(name, Approval { hash, approved_by, approved_at_ms });
        }
        Ok(by_server)
    }

    /// Records approvals of `(tool, hash)` for `server`, durably, and returns them as stored.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn approve(self, server: &str, tools: &[(String, String)], approved_by: &str) -> Result<Vec<(String, Approval)>, StoreError> {
        if tools.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.store.begin().await?;
        let at = insert(tx.conn(), server, tools, approved_by).await?;
        tx.commit().await?;
        Ok(tools
            .iter()
            .map(|(name, hash)| (name.clone(), Approval { hash: hash.clone(), approved_by: approved_by.to_owned(), approved_at_ms: at }))
            .collect())
    }

    /// The newest approvals of every server: `(server, tool, approval)`, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn recent(self, limit: u32) -> Result<Vec<(String, String, Approval)>, StoreError> {
        let rows: Vec<(String, String, String, String, i64)> =
            sqlx::query_as("SELECT server, name, hash, approved_by, approved_at_ms FROM approvals ORDER BY id DESC LIMIT ?")
                .bind(i64::from(limit))
                .fetch_all(&self.store.pool())
                .await?;
        Ok(rows
            .into_iter()
            .map(|(server, name, hash, approved_by, approved_at_ms)| (server, name, Approval { hash, approved_by, approved_at_ms }))
            .collect())
    }

    /// The approval history of `server`'s tools, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn history(self, server: &str, limit: u32) -> Result<Vec<(String, Approval)>, StoreError> {
        let rows: Vec<(String, String, String, i64)> =
            sqlx::query_as("SELECT name, hash, approved_by, approved_at_ms FROM approvals WHERE server = ? ORDER BY id DESC LIMIT ?")
                .bind(server)
                .bind(i64::from(limit))
                .fetch_all(&self.store.pool())
                .await?;
        Ok(rows
            .into_iter()
            .map(|(name, hash, approved_by, approved_at_ms)| (name, Approval { hash, approved_by, approved_at_ms }))
            .collect())
    }
}
