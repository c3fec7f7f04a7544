//! The store's side of definition integrity: approvals (with their history) and the one-time
//! rehash of stored definitions into RFC 8785 (JCS) form.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::SqliteConnection;

use super::{Store, StoreError};
use crate::catalog::integrity::Approval;
use crate::catalog::model::{canonical_json, sha256_hex};
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

impl Store {
    /// The current approval of every tool that has one (of one server, or of all), by server
    /// then tool name.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn approvals(&self, server: Option<&str>) -> Result<HashMap<String, HashMap<String, Approval>>, StoreError> {
        let rows: Vec<(String, String, String, String, i64)> = sqlx::query_as(
            "SELECT server, name, hash, approved_by, approved_at_ms FROM approvals \
             WHERE id IN (SELECT max(id) FROM approvals WHERE ?1 IS NULL OR server = ?1 GROUP BY server, name)",
        )
        .bind(server)
        .fetch_all(&self.pool())
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
    pub async fn approve(
        &self,
        server: &str,
        tools: &[(String, String)],
        approved_by: &str,
    ) -> Result<Vec<(String, Approval)>, StoreError> {
        if tools.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin().await?;
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
    pub async fn recent_approvals(&self, limit: u32) -> Result<Vec<(String, String, Approval)>, StoreError> {
        let rows: Vec<(String, String, String, String, i64)> =
            sqlx::query_as("SELECT server, name, hash, approved_by, approved_at_ms FROM approvals ORDER BY id DESC LIMIT ?")
                .bind(i64::from(limit))
                .fetch_all(&self.pool())
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
    pub async fn approval_history(&self, server: &str, limit: u32) -> Result<Vec<(String, Approval)>, StoreError> {
        let rows: Vec<(String, String, String, i64)> =
            sqlx::query_as("SELECT name, hash, approved_by, approved_at_ms FROM approvals WHERE server = ? ORDER BY id DESC LIMIT ?")
                .bind(server)
                .bind(i64::from(limit))
                .fetch_all(&self.pool())
                .await?;
        Ok(rows
            .into_iter()
            .map(|(name, hash, approved_by, approved_at_ms)| (name, Approval { hash, approved_by, approved_at_ms }))
            .collect())
    }

    /// A stored definition by its hash.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn definition(&self, hash: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT definition FROM definitions WHERE hash = ?").bind(hash).fetch_optional(&self.pool()).await?)
    }

    /// The definition each current tool had just before its current one (when its previous
    /// version ended right where the current one began), by server then tool; one server's
    /// only, or every server's.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn previous_definitions(&self, server: Option<&str>) -> Result<HashMap<String, HashMap<String, String>>, StoreError> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT c.server, c.name, d.definition FROM tool_versions c \
             JOIN tool_versions p ON p.server = c.server AND p.name = c.name AND p.last_generation = c.first_generation - 1 \
             JOIN definitions d ON d.hash = p.hash \
             WHERE c.last_generation IS NULL AND c.first_generation > 1 AND (?1 IS NULL OR c.server = ?1)",
        )
        .bind(server)
        .fetch_all(&self.pool())
        .await?;
        let mut by_server: HashMap<String, HashMap<String, String>> = HashMap::new();
        for (server, name, definition) in rows {
            by_server.entry(server).or_default().insert(name, definition);
        }
        Ok(by_server)
    }

    /// Once per store: rewrites every stored definition into its JCS form and re-keys it by the
    /// SHA-256 of that form, so that hashes can be recomputed by anyone (earlier versions used
    /// their own canonical form).
    pub(super) async fn rehash_definitions(&self) -> Result<(), StoreError> {
        let done: Option<String> =
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = 'definition_hash'").fetch_optional(&self.pool()).await?;
        if done.is_some() {
            return Ok(());
        }
        let rows: Vec<(String, String)> = sqlx::query_as("SELECT hash, definition FROM definitions").fetch_all(&self.pool()).await?;
        let rehash = move || -> Result<Vec<(String, String, String)>, StoreError> {
            let mut moved = Vec::new();
            for (old, definition) in rows {
                let value: Value =
                    serde_json::from_str(&definition).map_err(|err| StoreError::Corrupt(format!("definition {old}: {err}")))?;
                let canonical = canonical_json(&value);
                let hash = sha256_hex(canonical.as_bytes());
                if hash != old {
                    moved.push((old, hash, canonical));
                }
            }
            Ok(moved)
        };
        let moved = tokio::task::spawn_blocking(rehash).await.map_err(|err| StoreError::Corrupt(err.to_string()))??;
        let count = moved.len();
        let moved = serde_json::to_string(&moved).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let mut tx = self.begin().await?;
        sqlx::query("CREATE TEMP TABLE rehash (old TEXT PRIMARY KEY, new TEXT NOT NULL, definition TEXT NOT NULL)")
            .execute(tx.conn())
            .await?;
        sqlx::query("INSERT INTO rehash SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?)")
            .bind(&moved)
            .execute(tx.conn())
            .await?;
        sqlx::query("INSERT OR IGNORE INTO definitions (hash, definition) SELECT new, definition FROM rehash").execute(tx.conn()).await?;
        sqlx::query("UPDATE tool_versions SET hash = (SELECT new FROM rehash WHERE old = tool_versions.hash) WHERE hash IN (SELECT old FROM rehash)")
            .execute(tx.conn())
            .await?;
        // The packed snapshots hold the old hashes: drop them, the next commits write new ones.
        sqlx::query("DELETE FROM current_snapshots").execute(tx.conn()).await?;
        sqlx::query("DELETE FROM definitions WHERE hash IN (SELECT old FROM rehash) AND hash NOT IN (SELECT new FROM rehash)")
            .execute(tx.conn())
            .await?;
        sqlx::query("DROP TABLE rehash").execute(tx.conn()).await?;
        sqlx::query("INSERT INTO store_meta (key, value) VALUES ('definition_hash', 'jcs-sha256')").execute(tx.conn()).await?;
        tx.commit().await?;
        if count > 0 {
            tracing::info!(definitions = count, "stored definitions rehashed into RFC 8785 (JCS) form");
        }
        Ok(())
    }
}
