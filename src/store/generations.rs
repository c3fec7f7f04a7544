//! The catalog's own repository in the store: each server's committed generations (tool
//! versions as intervals, a packed snapshot of the current one), their history and pruning,
//! the enumeration records, and the protocol era each server last spoke.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use sqlx::{Row, SqliteConnection};

use super::search::index_versions;
use super::{CommitOutcome, Store, StoreError, StoredServer, approvals, search, snapshot, to_i64, to_u64};
use crate::catalog::model::{Diff, Generation, Listing, ToolDef};
use crate::catalog::record::{EnumerationOutcome, EnumerationReason, EnumerationRecord, GenerationSummary, now_ms};

/// Enumeration records kept per server.
const ENUMERATIONS_KEPT: i64 = 200;

/// The catalog's generations repository, reached as [`Store::generations`]: commits, history,
/// enumerations, eras, and (in `definitions.rs`, `search.rs`) stored definitions and search.
#[derive(Clone, Copy)]
pub struct Generations<'a> {
    pub(super) store: &'a Store,
}

impl Generations<'_> {
    /// The current generation of `server`, if one was ever committed.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn load_current(self, server: &str) -> Result<Option<StoredServer>, StoreError> {
        let row = sqlx::query("SELECT current_generation, last_verified_at_ms, private_to FROM servers WHERE name = ?")
            .bind(server)
            .fetch_optional(&self.store.pool())
            .await?;
        let Some(row) = row else { return Ok(None) };
        let number: i64 = row.try_get(0)?;
        if number == 0 {
            return Ok(None);
        }
        let committed_at_ms: i64 = sqlx::query_scalar("SELECT committed_at_ms FROM generations WHERE server = ? AND generation = ?")
            .bind(server)
            .bind(number)
            .fetch_optional(&self.store.pool())
            .await?
            .unwrap_or(0);
        let tools = self.tools_at(server, to_u64(number)?).await?;
        Ok(Some(StoredServer {
            generation: Arc::new(Generation { number: to_u64(number)?, committed_at_ms, tools }),
            last_verified_at_ms: row.try_get(1)?,
            private_to: row.try_get(2)?,
        }))
    }

    /// The current generation of every server that has one, in three queries whatever the
    /// number of servers: what a restart serves before any session is up.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn load_all_current(self) -> Result<HashMap<String, StoredServer>, StoreError> {
        // name, current generation, last verified, committed at, private to.
        type Head = (String, i64, Option<i64>, Option<i64>, Option<String>);
        let heads: Vec<Head> = sqlx::query_as(
            "SELECT s.name, s.current_generation, s.last_verified_at_ms, g.committed_at_ms, s.private_to FROM servers s \
             LEFT JOIN generations g ON g.server = s.name AND g.generation = s.current_generation WHERE s.current_generation > 0",
        )
        .fetch_all(&self.store.pool())
        .await?;
        // The snapshots written with each generation: one sequential read, decoded in two
        // halves on the blocking pool so that both cores work at boot.
        let current: HashMap<&str, i64> = heads.iter().map(|(name, number, ..)| (name.as_str(), *number)).collect();
        let mut tools = self.load_snapshots(&current).await?;
        // A server without a usable snapshot (none yet, another generation, damaged) is read
        // from its tool versions: one row per server, its tools packed by SQLite into one JSON
        // array of [name, hash, definition], the two halves on two connections.
        if current.keys().any(|name| !tools.contains_key(*name)) {
            let mut names: Vec<&str> = heads.iter().map(|(name, ..)| name.as_str()).collect();
            names.sort_unstable();
            let pivot = names.get(names.len() / 2).map(|name| (*name).to_owned()).unwrap_or_default();
            let (low, high) = tokio::join!(self.load_packed(None, Some(&pivot)), self.load_packed(Some(&pivot), None));
            for (server, defs) in low?.into_iter().chain(high?) {
                tools.entry(server).or_insert(defs);
            }
        }
        let mut servers = HashMap::with_capacity(heads.len());
        for (name, number, last_verified_at_ms, committed_at_ms, private_to) in heads {
            let generation = Generation {
                number: to_u64(number)?,
                committed_at_ms: committed_at_ms.unwrap_or(0),
                tools: tools.remove(&name).unwrap_or_default(),
            };
            servers.insert(name, StoredServer { generation: Arc::new(generation), last_verified_at_ms, private_to });
        }
        Ok(servers)
    }

    /// The servers' snapshots that match their current generation and decode, by server: two
    /// halves, each read on its own connection and decoded on the blocking pool as soon as it
    /// arrives, so that both cores work at boot.
    async fn load_snapshots(self, current: &HashMap<&str, i64>) -> Result<HashMap<String, Vec<ToolDef>>, StoreError> {
        let mut names: Vec<&str> = current.keys().copied().collect();
        names.sort_unstable();
        let pivot = names.get(names.len() / 2).map(|name| (*name).to_owned()).unwrap_or_default();
        let (low, high) =
            tokio::join!(self.load_snapshot_range(current, None, Some(&pivot)), self.load_snapshot_range(current, Some(&pivot), None));
        let mut tools = low?;
        tools.extend(high?);
        Ok(tools)
    }

    async fn load_snapshot_range(
        self,
        current: &HashMap<&str, i64>,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<HashMap<String, Vec<ToolDef>>, StoreError> {
        let rows: Vec<(String, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT server, generation, tools FROM current_snapshots WHERE (?1 IS NULL OR server >= ?1) AND (?2 IS NULL OR server < ?2)",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.store.pool())
        .await?;
        // Only a snapshot of the server's current generation counts: any other is stale.
        let rows: Vec<(String, Vec<u8>)> = rows
            .into_iter()
            .filter(|(server, generation, _)| current.get(server.as_str()) == Some(generation))
            .map(|(s, _, t)| (s, t))
            .collect();
        let decode = move || {
            rows.into_iter()
                .filter_map(|(server, packed)| match snapshot::decode(&packed) {
                    Some(mut tools) => {
                        if !tools.is_sorted_by(|a, b| a.name < b.name) {
                            tools.sort_unstable_by(|a, b| a.name.cmp(&b.name));
                        }
                        Some((server, tools))
                    }
                    None => {
                        tracing::warn!(server, "the stored snapshot of this server is damaged; reading its tool versions instead");
                        None
                    }
                })
                .collect::<HashMap<_, _>>()
        };
        tokio::task::spawn_blocking(decode).await.map_err(|err| StoreError::Corrupt(err.to_string()))
    }

    /// The current tools of the servers whose names lie in `[from, to)`, decoded off the runtime.
    async fn load_packed(self, from: Option<&str>, to: Option<&str>) -> Result<HashMap<String, Vec<ToolDef>>, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT v.server, '[' || group_concat('[' || json_quote(v.name) || ',' || json_quote(v.hash) || ',' || d.definition || ']', ',') || ']' \
             FROM tool_versions v JOIN definitions d ON d.hash = v.hash \
             WHERE v.last_generation IS NULL AND (?1 IS NULL OR v.server >= ?1) AND (?2 IS NULL OR v.server < ?2) GROUP BY v.server",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.store.pool())
        .await?;
        let decode = move || {
            let mut tools: HashMap<String, Vec<ToolDef>> = HashMap::with_capacity(rows.len());
            for (server, packed) in rows {
                let entries: Vec<(String, String, Box<serde_json::value::RawValue>)> =
                    serde_json::from_str(&packed).map_err(|err| StoreError::Corrupt(format!("tools of {server}: {err}")))?;
                let mut defs: Vec<ToolDef> = entries
                    .into_iter()
                    .map(|(name, hash, definition)| ToolDef::from_stored(name, definition.get().to_owned(), hash))
                    .collect();
                defs.sort_unstable_by(|a, b| a.name.cmp(&b.name));
                tools.insert(server, defs);
            }
            Ok(tools)
        };
        tokio::task::spawn_blocking(decode).await.map_err(|err| StoreError::Corrupt(err.to_string()))?
    }

    /// The versions of one tool, newest first: the generations each definition was current
    /// for (`None` as the last: current still, or when the tool was last seen) and its hash.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn tool_history(self, server: &str, name: &str, limit: u32) -> Result<Vec<(u64, Option<u64>, String)>, StoreError> {
        let rows: Vec<(i64, Option<i64>, String)> = sqlx::query_as(
            "SELECT first_generation, last_generation, hash FROM tool_versions WHERE server = ? AND name = ? \
             ORDER BY first_generation DESC LIMIT ?",
        )
        .bind(server)
        .bind(name)
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        rows.into_iter().map(|(first, last, hash)| Ok((to_u64(first)?, last.map(to_u64).transpose()?, hash))).collect()
    }

    /// The tools of `server` at `generation` (empty if that generation was pruned or never existed).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn tools_at(self, server: &str, generation: u64) -> Result<Vec<ToolDef>, StoreError> {
        let generation = to_i64(generation);
        let rows = sqlx::query(
            "SELECT v.name, d.definition, v.hash FROM tool_versions v JOIN definitions d ON d.hash = v.hash \
             WHERE v.server = ? AND v.first_generation <= ? AND (v.last_generation IS NULL OR v.last_generation >= ?) \
             ORDER BY v.name",
        )
        .bind(server)
        .bind(generation)
        .bind(generation)
        .fetch_all(&self.store.pool())
        .await?;
        let mut tools = Vec::with_capacity(rows.len());
        for row in rows {
            tools.push(ToolDef::from_stored(row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
        }
        Ok(tools)
    }

    /// The protocol era last found for each server that has one.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn eras(self) -> Result<HashMap<String, String>, StoreError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT name, era FROM servers WHERE era IS NOT NULL").fetch_all(&self.store.pool()).await?;
        Ok(rows.into_iter().collect())
    }

    /// Remembers the era and version a server was found to speak.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn remember_era(self, server: &str, era: &str, version: &str) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query(
            "INSERT INTO servers (name, era, protocol_version_seen) VALUES (?1, ?2, ?3) \
             ON CONFLICT(name) DO UPDATE SET era = ?2, protocol_version_seen = ?3",
        )
        .bind(server)
        .bind(era)
        .bind(version)
        .execute(tx.conn())
        .await?;
        tx.commit().await
    }

    /// The generation that removed tool `name` from `server`, if history still shows one and
    /// the tool has not come back since.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn removed_in(self, server: &str, name: &str) -> Result<Option<u64>, StoreError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT last_generation FROM tool_versions WHERE server = ? AND name = ? ORDER BY first_generation DESC LIMIT 1",
        )
        .bind(server)
        .bind(name)
        .fetch_optional(&self.store.pool())
        .await?;
        match row {
            Some((Some(last),)) => Ok(Some(to_u64(last)? + 1)),
            _ => Ok(None),
        }
    }

    /// What a degraded store can say of a listing without writing: that it is the stored
    /// generation, unchanged (so its server may serve it). Anything that would need a write (a
    /// new generation, a baseline to record, another credential) is refused as degraded.
    async fn confirm_unchanged(
        self,
        server: &str,
        listing: &Listing,
        accepted: &[(String, String)],
        private_to: Option<&str>,
        why: String,
    ) -> Result<CommitOutcome, StoreError> {
        let head: Option<(i64, Option<String>)> = sqlx::query_as("SELECT current_generation, private_to FROM servers WHERE name = ?")
            .bind(server)
            .fetch_optional(&self.store.pool())
            .await?;
        let Some((current, stored_private_to)) = head.filter(|(current, _)| *current > 0) else { return Err(StoreError::Degraded(why)) };
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT name, hash FROM tool_versions WHERE server = ? AND last_generation IS NULL ORDER BY name")
                .bind(server)
                .fetch_all(&self.store.pool())
                .await?;
        let diff = Diff::between_sorted(rows.iter().map(|(name, hash)| (name.as_str(), hash.as_str())), &listing.tools);
        if !diff.is_empty() || !accepted.is_empty() || stored_private_to.as_deref() != private_to {
            return Err(StoreError::Degraded(why));
        }
        Ok(CommitOutcome::Unchanged { generation: to_u64(current)? })
    }

    /// Every tool name `server` had in the kept history, current or not.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn names_in_history(self, server: &str) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT DISTINCT name FROM tool_versions WHERE server = ? ORDER BY name")
            .bind(server)
            .fetch_all(&self.store.pool())
            .await?)
    }

    /// Commits a complete listing as the server's new generation if it differs from the
    /// current one, and records the enumeration either way. One transaction. `previous` is the
    /// caller's copy of the current generation, if it has one.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure; nothing is committed then.
    pub async fn commit(
        self,
        server: &str,
        listing: Listing,
        record: EnumerationRecord,
        previous: Option<&Generation>,
    ) -> Result<CommitOutcome, StoreError> {
        self.commit_accepting(server, listing, record, previous, &[], None).await
    }

    /// [`Generations::commit`] that also records, in the same transaction, the definitions the
    /// server's integrity policy accepted (`(tool, hash)`): the baseline later changes are
    /// compared with is durable exactly when the generation is.
    ///
    /// # Errors
    /// As [`Generations::commit`].
    pub async fn commit_accepting(
        self,
        server: &str,
        listing: Listing,
        mut record: EnumerationRecord,
        previous: Option<&Generation>,
        accepted: &[(String, String)],
        private_to: Option<&str>,
    ) -> Result<CommitOutcome, StoreError> {
        let mut tx = match self.store.begin().await {
            Ok(tx) => tx,
            Err(StoreError::Degraded(why)) => return self.confirm_unchanged(server, &listing, accepted, private_to, why).await,
            Err(error) => return Err(error),
        };
        sqlx::query("INSERT INTO servers (name) VALUES (?) ON CONFLICT(name) DO NOTHING").bind(server).execute(tx.conn()).await?;
        let current: i64 =
            sqlx::query_scalar("SELECT current_generation FROM servers WHERE name = ?").bind(server).fetch_one(tx.conn()).await?;
        let diff = diff_with_current(tx.conn(), server, current, previous, &listing).await?;
        let now = now_ms();
        sqlx::query("UPDATE servers SET private_to = ? WHERE name = ?").bind(private_to).bind(server).execute(tx.conn()).await?;
        if diff.is_empty() && current > 0 {
            record.outcome = EnumerationOutcome::Unchanged;
            record.generation = to_u64(current)?;
            verify_unchanged(tx.conn(), server, current, &listing, &record, now).await?;
            tx.commit().await?;
            return Ok(CommitOutcome::Unchanged { generation: to_u64(current)? });
        }

        let next = current.checked_add(1).ok_or_else(|| StoreError::Corrupt(format!("generation counter of {server} is exhausted")))?;
        self.write_versions(tx.conn(), server, current, next, &diff, &listing).await?;
        sqlx::query(
            "INSERT INTO generations (server, generation, committed_at_ms, reason, tool_count, added, removed, changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(server)
        .bind(next)
        .bind(now)
        .bind(record.reason.as_str())
        .bind(i64::try_from(listing.tools.len()).unwrap_or(i64::MAX))
        .bind(json_names(&diff.added))
        .bind(json_names(&diff.removed))
        .bind(json_names(&diff.changed))
        .execute(tx.conn())
        .await?;
        sqlx::query("UPDATE servers SET current_generation = ?, last_verified_at_ms = ? WHERE name = ?")
            .bind(next)
            .bind(now)
            .bind(server)
            .execute(tx.conn())
            .await?;
        // The packed copy a restart reads, durable exactly when the generation is.
        write_snapshot(tx.conn(), server, next, &listing.tools).await?;
        record.outcome = EnumerationOutcome::Committed;
        record.generation = to_u64(next)?;
        insert_enumeration(tx.conn(), server, &record).await?;
        self.prune_history(tx.conn(), server, next).await?;
        approvals::insert(tx.conn(), server, accepted, approvals::ACCEPTED_BY_POLICY).await?;
        tx.commit().await?;
        let generation = Arc::new(Generation { number: to_u64(next)?, committed_at_ms: now, tools: listing.tools });
        Ok(CommitOutcome::Committed { generation, diff })
    }

    /// The tool versions of a new generation `next`: the ended and changed ones closed at
    /// `current`, the added and changed ones opened at `next` (with their definitions and
    /// search rows). A handful of statements whatever the commit's size: each takes its rows as
    /// one JSON array (a statement is a round trip to the database thread; a row is SQLite's work).
    async fn write_versions(
        self,
        conn: &mut SqliteConnection,
        server: &str,
        current: i64,
        next: i64,
        diff: &Diff,
        listing: &Listing,
    ) -> Result<(), StoreError> {
        let by_name: BTreeMap<&str, &ToolDef> = listing.tools.iter().map(|tool| (tool.name.as_str(), tool)).collect();
        let ended: Vec<&String> = diff.removed.iter().chain(&diff.changed).collect();
        if !ended.is_empty() {
            let ended = serde_json::to_string(&ended).map_err(|err| StoreError::Corrupt(err.to_string()))?;
            sqlx::query(
                "UPDATE tool_versions SET last_generation = ?1 WHERE server = ?2 AND last_generation IS NULL \
                 AND name IN (SELECT value FROM json_each(?3))",
            )
            .bind(current)
            .bind(server)
            .bind(&ended)
            .execute(&mut *conn)
            .await?;
            if self.store.search_index {
                search::end_versions(conn, server, current, &ended).await?;
            }
        }
        let new_tools: Vec<&ToolDef> = diff.added.iter().chain(&diff.changed).map(|name| by_name[name.as_str()]).collect();
        if new_tools.is_empty() {
            return Ok(());
        }
        let rows: Vec<serde_json::Value> =
            new_tools.iter().map(|tool| serde_json::json!([tool.name, tool.hash, &*tool.definition])).collect();
        let rows = serde_json::Value::Array(rows).to_string();
        sqlx::query(
            "INSERT INTO definitions (hash, definition) SELECT value ->> 1, value ->> 2 FROM json_each(?1) WHERE true \
             ON CONFLICT(hash) DO NOTHING",
        )
        .bind(&rows)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "INSERT INTO tool_versions (server, name, first_generation, hash) SELECT ?1, value ->> 0, ?2, value ->> 1 FROM json_each(?3)",
        )
        .bind(server)
        .bind(next)
        .bind(&rows)
        .execute(&mut *conn)
        .await?;
        if self.store.search_index {
            index_versions(conn, server, next, None, &new_tools).await?;
        }
        Ok(())
    }

    /// Records an enumeration that committed nothing (failed or superseded).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn record_enumeration(self, server: &str, mut record: EnumerationRecord) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("INSERT INTO servers (name) VALUES (?) ON CONFLICT(name) DO NOTHING").bind(server).execute(tx.conn()).await?;
        let current: i64 =
            sqlx::query_scalar("SELECT current_generation FROM servers WHERE name = ?").bind(server).fetch_one(tx.conn()).await?;
        record.generation = to_u64(current)?;
        insert_enumeration(tx.conn(), server, &record).await?;
        tx.commit().await
    }

    /// The most recent enumerations of `server`, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure or an unreadable row.
    pub async fn enumerations(self, server: &str, limit: u32) -> Result<Vec<EnumerationRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT started_at_ms, duration_ms, reason, outcome, pages, tools, bytes, generation, error, diagnostics \
             FROM enumerations WHERE server = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            let reason: String = row.try_get(2)?;
            let outcome: String = row.try_get(3)?;
            let diagnostics: String = row.try_get(9)?;
            records.push(EnumerationRecord {
                started_at_ms: row.try_get(0)?,
                duration_ms: row.try_get(1)?,
                reason: EnumerationReason::parse(&reason).ok_or_else(|| StoreError::Corrupt(format!("reason {reason:?}")))?,
                outcome: EnumerationOutcome::parse(&outcome).ok_or_else(|| StoreError::Corrupt(format!("outcome {outcome:?}")))?,
                pages: u32::try_from(row.try_get::<i64, _>(4)?).unwrap_or(u32::MAX),
                tools: u32::try_from(row.try_get::<i64, _>(5)?).unwrap_or(u32::MAX),
                bytes: to_u64(row.try_get(6)?)?,
                generation: to_u64(row.try_get(7)?)?,
                error: row.try_get(8)?,
                diagnostics: serde_json::from_str(&diagnostics).map_err(|err| StoreError::Corrupt(err.to_string()))?,
            });
        }
        Ok(records)
    }

    /// The kept generations of `server`, newest first.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure or an unreadable row.
    pub async fn history(self, server: &str, limit: u32) -> Result<Vec<GenerationSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT generation, committed_at_ms, reason, tool_count, added, removed, changed FROM generations \
             WHERE server = ? ORDER BY generation DESC LIMIT ?",
        )
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        let names = |text: String| serde_json::from_str::<Vec<String>>(&text).map_err(|err| StoreError::Corrupt(err.to_string()));
        let mut summaries = Vec::with_capacity(rows.len());
        for row in rows {
            let reason: String = row.try_get(2)?;
            summaries.push(GenerationSummary {
                generation: to_u64(row.try_get(0)?)?,
                committed_at_ms: row.try_get(1)?,
                reason: EnumerationReason::parse(&reason).ok_or_else(|| StoreError::Corrupt(format!("reason {reason:?}")))?,
                tool_count: u32::try_from(row.try_get::<i64, _>(3)?).unwrap_or(u32::MAX),
                added: names(row.try_get(4)?)?,
                removed: names(row.try_get(5)?)?,
                changed: names(row.try_get(6)?)?,
            });
        }
        Ok(summaries)
    }

    /// Drops generations older than the history bound, and definitions nothing refers to.
    async fn prune_history(self, tx: &mut SqliteConnection, server: &str, newest: i64) -> Result<(), StoreError> {
        let oldest_kept = newest - i64::from(self.store.history_generations) + 1;
        if oldest_kept <= 1 {
            return Ok(());
        }
        sqlx::query("DELETE FROM generations WHERE server = ? AND generation < ?").bind(server).bind(oldest_kept).execute(&mut *tx).await?;
        let pruned = sqlx::query("DELETE FROM tool_versions WHERE server = ? AND last_generation IS NOT NULL AND last_generation < ?")
            .bind(server)
            .bind(oldest_kept)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM tool_search WHERE rowid IN \
             (SELECT id FROM search_rows WHERE server = ?1 AND last_generation IS NOT NULL AND last_generation < ?2)",
        )
        .bind(server)
        .bind(oldest_kept)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM search_rows WHERE server = ? AND last_generation IS NOT NULL AND last_generation < ?")
            .bind(server)
            .bind(oldest_kept)
            .execute(&mut *tx)
            .await?;
        if pruned.rows_affected() > 0 {
            sqlx::query("DELETE FROM definitions WHERE hash NOT IN (SELECT hash FROM tool_versions)").execute(&mut *tx).await?;
        }
        Ok(())
    }
}

/// How `listing` differs from `server`'s current generation (`current`): from the caller's copy
/// of it (`previous`), which saves reading every row back, as long as it is the one the
/// database holds; else from the stored versions.
async fn diff_with_current(
    conn: &mut SqliteConnection,
    server: &str,
    current: i64,
    previous: Option<&Generation>,
    listing: &Listing,
) -> Result<Diff, StoreError> {
    if let Some(previous) = previous.filter(|previous| to_i64(previous.number) == current) {
        return Ok(Diff::between_sorted(previous.tools.iter().map(|t| (t.name.as_str(), t.hash.as_str())), &listing.tools));
    }
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT name, hash FROM tool_versions WHERE server = ? AND last_generation IS NULL ORDER BY name")
            .bind(server)
            .fetch_all(&mut *conn)
            .await?;
    Ok(Diff::between_sorted(rows.iter().map(|(name, hash)| (name.as_str(), hash.as_str())), &listing.tools))
}

/// An unchanged listing: the current generation verified now, its snapshot written if missing,
/// the enumeration (`record`, already marked unchanged) recorded.
async fn verify_unchanged(
    conn: &mut SqliteConnection,
    server: &str,
    current: i64,
    listing: &Listing,
    record: &EnumerationRecord,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE servers SET last_verified_at_ms = ? WHERE name = ?").bind(now).bind(server).execute(&mut *conn).await?;
    // A store from before snapshots (or after the rehash) gets its snapshot here.
    let packed: Option<i64> =
        sqlx::query_scalar("SELECT generation FROM current_snapshots WHERE server = ?").bind(server).fetch_optional(&mut *conn).await?;
    if packed != Some(current) {
        write_snapshot(conn, server, current, &listing.tools).await?;
    }
    insert_enumeration(conn, server, record).await
}

async fn insert_enumeration(tx: &mut SqliteConnection, server: &str, record: &EnumerationRecord) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO enumerations (server, started_at_ms, duration_ms, reason, outcome, pages, tools, bytes, generation, error, diagnostics) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(server)
    .bind(record.started_at_ms)
    .bind(record.duration_ms)
    .bind(record.reason.as_str())
    .bind(record.outcome.as_str())
    .bind(i64::from(record.pages))
    .bind(i64::from(record.tools))
    .bind(to_i64(record.bytes))
    .bind(to_i64(record.generation))
    .bind(record.error.as_deref())
    .bind(json_names(&record.diagnostics))
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM enumerations WHERE server = ? AND id <= (SELECT id FROM enumerations WHERE server = ? ORDER BY id DESC LIMIT 1 OFFSET ?)")
        .bind(server)
        .bind(server)
        .bind(ENUMERATIONS_KEPT)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn write_snapshot(tx: &mut SqliteConnection, server: &str, generation: i64, tools: &[ToolDef]) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO current_snapshots (server, generation, tools) VALUES (?1, ?2, ?3) \
         ON CONFLICT(server) DO UPDATE SET generation = excluded.generation, tools = excluded.tools",
    )
    .bind(server)
    .bind(generation)
    .bind(snapshot::encode(tools))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

fn json_names(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned())
}
