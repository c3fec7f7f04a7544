//! The full-text index's tables: written with each commit, pruned with history, searched for
//! exactly the generations a caller names.

use sqlx::sqlite::SqliteConnection;

use super::{Generations, StoreError};

/// Best full-text matches considered per result wanted: the rest of them may be versions that
/// are not in the generations asked for (kept history, or not yet published).
const CANDIDATES_PER_RESULT: i64 = 8;
use crate::catalog::model::ToolDef;
use crate::catalog::search::{SearchDoc, fts_queries};

/// Adds tool versions of one server, current from `first_generation` (to `last_generation`, if
/// no longer current), to the full-text index: two statements, whatever the number of tools.
pub(super) async fn index_versions(
    tx: &mut SqliteConnection,
    server: &str,
    first_generation: i64,
    last_generation: Option<i64>,
    tools: &[&ToolDef],
) -> Result<(), StoreError> {
    let docs: Vec<serde_json::Value> = tools
        .iter()
        .map(|tool| {
            let doc = SearchDoc::of(server, tool);
            serde_json::json!([
                tool.name,
                format!("{} {}", doc.qualified, doc.original),
                doc.title,
                format!("{} {}", doc.description, doc.properties)
            ])
        })
        .collect();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    let names = serde_json::to_string(&names).map_err(|err| StoreError::Corrupt(err.to_string()))?;
    let ids: Vec<(i64, String)> = sqlx::query_as(
        "INSERT INTO search_rows (server, name, first_generation, last_generation) \
         SELECT ?1, value, ?2, ?3 FROM json_each(?4) WHERE true RETURNING id, name",
    )
    .bind(server)
    .bind(first_generation)
    .bind(last_generation)
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?;
    // Each document under its row's id (RETURNING gives no order, so they meet by name).
    let ids: std::collections::HashMap<String, i64> = ids.into_iter().map(|(id, name)| (name, id)).collect();
    let docs: Vec<serde_json::Value> = tools
        .iter()
        .zip(docs)
        .filter_map(|(tool, doc)| ids.get(&tool.name).map(|id| serde_json::json!([id, doc[1], doc[2], doc[3]])))
        .collect();
    sqlx::query(
        "INSERT INTO tool_search (rowid, names, title, body) SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?)",
    )
    .bind(serde_json::Value::Array(docs).to_string())
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Marks the current versions of the named tools (a JSON array) as ended at `generation`.
pub(super) async fn end_versions(tx: &mut SqliteConnection, server: &str, generation: i64, names: &str) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE search_rows SET last_generation = ?1 WHERE server = ?2 AND last_generation IS NULL \
         AND name IN (SELECT value FROM json_each(?3))",
    )
    .bind(generation)
    .bind(server)
    .bind(names)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

impl Generations<'_> {
    /// Tools matching what a searcher typed, best first, at most `limit` per query: the queries
    /// of [`fts_queries`] round by round, the first round that matches anything answering, its
    /// matches merged (each tool once, at its best score).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn search_words(self, text: &str, generations: &[(&str, u64)], limit: u32) -> Result<Vec<(String, String, f64)>, StoreError> {
        let mut hits: Vec<(String, String, f64)> = Vec::new();
        for round in fts_queries(text) {
            for query in round {
                hits.extend(self.search(&query, generations, limit).await?);
            }
            if !hits.is_empty() {
                break;
            }
        }
        hits.sort_by(|a, b| b.2.total_cmp(&a.2));
        let mut seen = std::collections::HashSet::new();
        hits.retain(|(server, name, _)| seen.insert((server.clone(), name.clone())));
        Ok(hits)
    }

    /// Tools matching `query` (an FTS5 query from [`crate::catalog::search::fts_query`]) in
    /// exactly the generation given for each server, best first: `(server, name, score)`, a
    /// higher score being a better match.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn search(self, query: &str, generations: &[(&str, u64)], limit: u32) -> Result<Vec<(String, String, f64)>, StoreError> {
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
        .fetch_all(&self.store.pool())
        .await?;
        Ok(rows)
    }

    /// The names the search index holds for `server` at `generation` (for tests of the index).
    #[cfg(test)]
    pub(crate) async fn indexed_names(self, server: &str, generation: u64) -> Result<Vec<String>, StoreError> {
        let generation = super::to_i64(generation);
        Ok(sqlx::query_scalar(
            "SELECT name FROM search_rows WHERE server = ?1 AND first_generation <= ?2 AND (last_generation IS NULL OR last_generation >= ?2) \
             ORDER BY name",
        )
        .bind(server)
        .bind(generation)
        .fetch_all(&self.store.pool())
        .await?)
    }

    /// Builds the full-text index from the kept tool versions once, for a store that predates
    /// it; from then on every commit keeps it. One transaction, marked done in `store_meta` (a
    /// single-row lookup at every later start).
    pub(super) async fn backfill_search(self) -> Result<(), StoreError> {
        let built: Option<String> =
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = 'search_index'").fetch_optional(&self.store.pool()).await?;
        if built.is_some() {
            return Ok(());
        }
        let rows: Vec<(String, String, i64, Option<i64>, String, String)> = sqlx::query_as(
            "SELECT v.server, v.name, v.first_generation, v.last_generation, d.definition, v.hash \
             FROM tool_versions v JOIN definitions d ON d.hash = v.hash",
        )
        .fetch_all(&self.store.pool())
        .await?;
        let versions = rows.len();
        // Versions grouped as one commit would write them: by server and generation interval.
        let mut groups: std::collections::BTreeMap<(String, i64, Option<i64>), Vec<ToolDef>> = std::collections::BTreeMap::new();
        for (server, name, first, last, definition, hash) in rows {
            groups.entry((server, first, last)).or_default().push(ToolDef::from_stored(name, definition, hash));
        }
        let mut tx = self.store.begin().await?;
        sqlx::query("DELETE FROM tool_search").execute(tx.conn()).await?;
        sqlx::query("DELETE FROM search_rows").execute(tx.conn()).await?;
        for ((server, first, last), tools) in &groups {
            let tools: Vec<&ToolDef> = tools.iter().collect();
            index_versions(tx.conn(), server, *first, *last, &tools).await?;
        }
        sqlx::query("INSERT INTO store_meta (key, value) VALUES ('search_index', 'built')").execute(tx.conn()).await?;
        tx.commit().await?;
        if versions > 0 {
            tracing::info!(tool_versions = versions, "built the tool search index");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::catalog::model::Listing;
    use crate::catalog::record::{EnumerationReason, EnumerationRecord};
    use crate::store::Store;

    #[tokio::test]
    async fn a_store_from_before_the_index_gets_it_built_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let store = Store::open(&path, 10).await.unwrap();
        let record = EnumerationRecord::unmeasured(EnumerationReason::Initial);
        let listing = Listing::from_raw(vec![json!({"name": "read_file", "description": "Reads a file."}), json!({"name": "other"})]);
        store.generations().commit("files", listing, record, None).await.unwrap();
        // What a store of the previous schema looks like: versions, and no index.
        for statement in ["DELETE FROM tool_search", "DELETE FROM search_rows", "DELETE FROM store_meta"] {
            sqlx::query(statement).execute(&store.pool()).await.unwrap();
        }
        store.close().await;
        let store = Store::open(&path, 10).await.unwrap();
        assert_eq!(store.generations().indexed_names("files", 1).await.unwrap(), ["other", "read_file"]);
        let hits = store.generations().search("\"read\"", &[("files", 1)], 5).await.unwrap();
        assert_eq!(hits.first().map(|h| h.1.as_str()), Some("read_file"));
        store.close().await;
    }
}
