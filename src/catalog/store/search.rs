//! The full-text index's tables: written with each commit, pruned with history, searched for
//! exactly the generations a caller names.

use sqlx::sqlite::SqliteConnection;

use super::{CANDIDATES_PER_RESULT, Store, StoreError};
use crate::catalog::model::ToolDef;
use crate::catalog::search::SearchDoc;

/// Adds one tool version to the full-text index.
pub(super) async fn index_version(
    tx: &mut SqliteConnection,
    server: &str,
    tool: &ToolDef,
    first_generation: i64,
    last_generation: Option<i64>,
) -> Result<(), StoreError> {
    let doc = SearchDoc::of(server, tool);
    let id: i64 =
        sqlx::query_scalar("INSERT INTO search_rows (server, name, first_generation, last_generation) VALUES (?, ?, ?, ?) RETURNING id")
            .bind(server)
            .bind(&tool.name)
            .bind(first_generation)
            .bind(last_generation)
            .fetch_one(&mut *tx)
            .await?;
    sqlx::query("INSERT INTO tool_search (rowid, names, title, body) VALUES (?, ?, ?, ?)")
        .bind(id)
        .bind(format!("{} {}", doc.qualified, doc.original))
        .bind(doc.title)
        .bind(format!("{} {}", doc.description, doc.properties))
        .execute(&mut *tx)
        .await?;
    Ok(())
}

impl Store {
    /// Tools matching `query` (an FTS5 query from [`crate::catalog::search::fts_query`]) in
    /// exactly the generation given for each server, best first: `(server, name, score)`, a
    /// higher score being a better match.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn search(&self, query: &str, generations: &[(&str, u64)], limit: u32) -> Result<Vec<(String, String, f64)>, StoreError> {
        let generations: serde_json::Map<String, serde_json::Value> =
            generations.iter().map(|(server, generation)| ((*server).to_owned(), serde_json::Value::from(*generation))).collect();
        // FTS5 ranks its matches itself (ORDER BY rank, BM25 with the weights the migration set)
        // and hands over the best few; only those are checked against the generations asked for.
        let rows: Vec<(String, String, f64)> = sqlx::query_as(
            "WITH best AS (SELECT rowid, rank FROM tool_search WHERE tool_search MATCH ?1 ORDER BY rank LIMIT ?4) \
             SELECT r.server, r.name, -best.rank AS score FROM best JOIN search_rows r ON r.id = best.rowid \
             JOIN json_each(?2) g ON g.key = r.server \
             WHERE r.first_generation <= g.value AND (r.last_generation IS NULL OR r.last_generation >= g.value) \
             ORDER BY best.rank LIMIT ?3",
        )
        .bind(query)
        .bind(serde_json::Value::Object(generations).to_string())
        .bind(i64::from(limit))
        .bind(i64::from(limit).saturating_mul(CANDIDATES_PER_RESULT))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// The names the search index holds for `server` at `generation` (for tests of the index).
    #[cfg(test)]
    pub(crate) async fn indexed_names(&self, server: &str, generation: u64) -> Result<Vec<String>, StoreError> {
        let generation = super::to_i64(generation);
        Ok(sqlx::query_scalar(
            "SELECT name FROM search_rows WHERE server = ?1 AND first_generation <= ?2 AND (last_generation IS NULL OR last_generation >= ?2) \
             ORDER BY name",
        )
        .bind(server)
        .bind(generation)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Builds the full-text index from the kept tool versions when it does not cover them (a
    /// store from before the index, or one an operator emptied). One transaction.
    pub(super) async fn backfill_search(&self) -> Result<(), StoreError> {
        let (indexed, versions): (i64, i64) =
            sqlx::query_as("SELECT (SELECT count(*) FROM search_rows), (SELECT count(*) FROM tool_versions)").fetch_one(&self.pool).await?;
        if indexed == versions {
            return Ok(());
        }
        let rows: Vec<(String, String, i64, Option<i64>, String, String)> = sqlx::query_as(
            "SELECT v.server, v.name, v.first_generation, v.last_generation, d.definition, v.hash \
             FROM tool_versions v JOIN definitions d ON d.hash = v.hash",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM tool_search").execute(tx.conn()).await?;
        sqlx::query("DELETE FROM search_rows").execute(tx.conn()).await?;
        for (server, name, first, last, definition, hash) in rows {
            let tool = ToolDef::from_stored(name, definition, hash);
            index_version(tx.conn(), &server, &tool, first, last).await?;
        }
        tx.commit().await?;
        tracing::info!(tool_versions = versions, "built the tool search index");
        Ok(())
    }
}
