//! The catalog's stored definitions, by hash: read for integrity's diffs, and rewritten once
//! into RFC 8785 (JCS) form. Part of the catalog's generations repository ([`Generations`]).

use std::collections::HashMap;

use serde_json::Value;

use super::{Generations, StoreError};
use crate::catalog::model::{canonical_json, sha256_hex};

impl Generations<'_> {
    /// A stored definition by its hash.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn definition(self, hash: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT definition FROM definitions WHERE hash = ?").bind(hash).fetch_optional(&self.store.pool()).await?)
    }

    /// The definition each current tool had just before its current one (when its previous
    /// version ended right where the current one began), by server then tool; one server's
    /// only, or every server's.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn previous_definitions(self, server: Option<&str>) -> Result<HashMap<String, HashMap<String, String>>, StoreError> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT c.server, c.name, d.definition FROM tool_versions c \
             JOIN tool_versions p ON p.server = c.server AND p.name = c.name AND p.last_generation = c.first_generation - 1 \
             JOIN definitions d ON d.hash = p.hash \
             WHERE c.last_generation IS NULL AND c.first_generation > 1 AND (?1 IS NULL OR c.server = ?1)",
        )
        .bind(server)
        .fetch_all(&self.store.pool())
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
    pub(super) async fn rehash_definitions(self) -> Result<(), StoreError> {
        let done: Option<String> =
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = 'definition_hash'").fetch_optional(&self.store.pool()).await?;
        if done.is_some() {
            return Ok(());
        }
        let rows: Vec<(String, String)> = sqlx::query_as("SELECT hash, definition FROM definitions").fetch_all(&self.store.pool()).await?;
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
        let mut tx = self.store.begin().await?;
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
