//! The SQLite catalog: committed generations, their history, and enumeration outcomes.
//!
//! Reads run in parallel on a small pool under WAL. Every write goes through one dedicated
//! connection behind an in-process lock, in `BEGIN IMMEDIATE` transactions with
//! `synchronous = FULL`: when a commit returns, the generation is on disk. A transaction that
//! fails for any reason (a full disk, an I/O error) closes that connection, which rolls the
//! transaction back; the next write opens a fresh one. No connection is ever left inside a
//! transaction, and the store recovers by itself once the fault clears. A store whose
//! filesystem is full at start opens degraded (see [`degraded`]): it serves what it holds and
//! refuses writes until there is room.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Row, SqlitePool};
use tokio::sync::{Mutex, MutexGuard};

use crate::catalog::model::{Diff, Generation, Listing, ToolDef};
use crate::catalog::record::{EnumerationOutcome, EnumerationReason, EnumerationRecord, GenerationSummary, now_ms};

pub mod approvals;
pub mod audit;
pub mod audit_chain;
pub mod call_approvals;
mod degraded;
pub mod fleet;
mod quotas;
mod search;
mod snapshot;
pub mod tasks;
mod writer;

use search::index_versions;
use writer::check_ownership;

/// Best full-text matches considered per result wanted: the rest of them may be versions that
/// are not in the generations asked for (kept history, or not yet published).
const CANDIDATES_PER_RESULT: i64 = 8;
/// Enumeration records kept per server.
const ENUMERATIONS_KEPT: i64 = 200;
/// `PRAGMA application_id` of a toolhost store ("THOS"): another application's database is
/// never mistaken for one.
const APPLICATION_ID: i64 = 0x5448_4F53;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the catalog database {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot migrate the catalog database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("catalog database error: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("catalog database holds an unreadable value: {0}")]
    Corrupt(String),
    #[error("{path} is not a toolhost catalog: {reason}; refusing to add toolhost's tables to it")]
    Foreign { path: String, reason: String },
    /// Degraded (its filesystem is full): nothing can be written until there is room.
    #[error("the store is degraded, nothing is written: {0}")]
    Degraded(String),
}

/// The readers' pool of a store opened as usual: checked to be toolhost's, migrated, marked.
async fn open_healthy(path: &Path, options: &SqliteConnectOptions) -> Result<SqlitePool, StoreError> {
    check_ownership(path).await?;
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options.clone())
        .await
        .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
    let prepared = async {
        // What an earlier run left in the WAL goes into the database first, and the WAL's space
        // back to the filesystem (a WAL that took the last free bytes would block every commit).
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&pool).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("PRAGMA application_id = {APPLICATION_ID}"))).execute(&pool).await?;
        Ok::<(), StoreError>(())
    };
    match prepared.await {
        Ok(()) => Ok(pool),
        Err(error) => {
            // Its connections must be gone before anything else opens the file.
            pool.close().await;
            Err(error)
        }
    }
}

/// The result of offering a complete listing to the store.
#[derive(Debug, Clone)]
pub enum CommitOutcome {
    /// The tool set changed: this generation is now current.
    Committed { generation: Arc<Generation>, diff: Diff },
    /// Identical to the current generation, which stays.
    Unchanged { generation: u64 },
}

/// What the store knows about a server at boot.
#[derive(Debug, Clone)]
pub struct StoredServer {
    pub generation: Arc<Generation>,
    pub last_verified_at_ms: Option<i64>,
    /// The credential fingerprint a private listing belongs to (`None`: not private).
    pub private_to: Option<String>,
}

/// Most a WAL file keeps after a checkpoint resets it.
const JOURNAL_SIZE_LIMIT: &str = "1048576";

#[derive(Clone)]
pub struct Store {
    /// Readers: a small pool, or a degraded store's one exclusive connection. Swapped whole
    /// when a degraded store recovers.
    pool: Arc<ArcSwap<SqlitePool>>,
    reader_options: Arc<SqliteConnectOptions>,
    path: Arc<Path>,
    /// `Some(why)` while the store is degraded (its filesystem full): writes are refused.
    degraded: Arc<tokio::sync::watch::Sender<Option<Arc<str>>>>,
    writer: Arc<Mutex<Writer>>,
    history_generations: u32,
    /// Maintain the full-text index (always, but in the benchmark that measures its cost).
    search_index: bool,
}

/// The one connection that writes, opened on first use and again after any failed transaction.
struct Writer {
    options: SqliteConnectOptions,
    connection: Option<SqliteConnection>,
    /// The database's WAL file, whose size each commit looks at ([`writer::WAL_BOUND`]).
    wal: PathBuf,
}

/// An open `BEGIN IMMEDIATE` transaction on the writer. Dropped without [`WriteTx::commit`], it
/// closes the connection, and SQLite rolls the transaction back.
struct WriteTx<'a> {
    writer: MutexGuard<'a, Writer>,
    committed: bool,
}

// === impl Store ===

impl Store {
    /// Opens (creating if needed) and migrates the database at `path`. On a full filesystem,
    /// a store that can be read as it is opens degraded instead of not at all.
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be opened or migrated.
    pub async fn open(path: &Path, history_generations: u32) -> Result<Store, StoreError> {
        let open_error = |source| StoreError::Open { path: path.display().to_string(), source };
        // A fresh machine has no state directory yet (systemd's StateDirectory makes one; a
        // hand-run daemon may not have it).
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|err| open_error(sqlx::Error::Io(err)))?;
        }
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(open_error)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .pragma("journal_size_limit", JOURNAL_SIZE_LIMIT)
            .busy_timeout(Duration::from_secs(5));
        let (pool, degraded) = match open_healthy(path, &options).await {
            Ok(pool) => (pool, None),
            Err(error) if !degraded::has_room(path) => match degraded::open(path).await {
                Ok(pool) => {
                    tracing::warn!(store = %path.display(), %error, "the store's filesystem is full: serving the stored catalog, writing nothing until there is room");
                    (pool, Some(Arc::from(format!("its filesystem is full ({error})"))))
                }
                // Why it cannot be read as it is says more than the full disk's I/O error.
                Err(why @ StoreError::Degraded(_)) => return Err(why),
                Err(_) => return Err(error),
            },
            Err(error) => return Err(error),
        };
        // A commit that returned is on disk, even across a power loss: a published generation
        // number is never handed out twice.
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let writer = Writer { options: options.clone().synchronous(SqliteSynchronous::Full), connection: None, wal: PathBuf::from(wal) };
        let healthy = degraded.is_none();
        let store = Store {
            pool: Arc::new(ArcSwap::from_pointee(pool)),
            reader_options: Arc::new(options),
            path: Arc::from(path),
            degraded: Arc::new(tokio::sync::watch::Sender::new(degraded)),
            writer: Arc::new(Mutex::new(writer)),
            history_generations,
            search_index: true,
        };
        if healthy {
            store.rehash_definitions().await?;
            store.backfill_search().await?;
        }
        Ok(store)
    }

    /// The readers' pool as it is now.
    fn pool(&self) -> SqlitePool {
        SqlitePool::clone(&self.pool.load())
    }

    /// Why the store is degraded, if it is.
    pub fn degraded(&self) -> Option<Arc<str>> {
        self.degraded.borrow().clone()
    }

    /// Follows [`Store::degraded`].
    pub fn watch_degraded(&self) -> tokio::sync::watch::Receiver<Option<Arc<str>>> {
        self.degraded.subscribe()
    }

    /// A store that does not maintain the search index: only for the benchmark that measures
    /// what the index costs a commit.
    #[doc(hidden)]
    pub async fn open_without_search_index(path: &Path, history_generations: u32) -> Result<Store, StoreError> {
        let mut store = Store::open(path, history_generations).await?;
        store.search_index = false;
        Ok(store)
    }

    /// Starts a write transaction on the writer connection (opening it if needed).
    async fn begin(&self) -> Result<WriteTx<'_>, StoreError> {
        let mut writer = self.writer.lock().await;
        if self.degraded().is_some() {
            self.recover().await?;
        }
        if writer.connection.is_none() {
            writer.connection = Some(SqliteConnection::connect_with(&writer.options).await?);
        }
        let mut tx = WriteTx { writer, committed: false };
        sqlx::query("BEGIN IMMEDIATE").execute(tx.conn()).await?;
        Ok(tx)
    }

    /// Checkpoints the WAL into the database (a clean stop leaves no WAL to replay) and closes
    /// every connection.
    pub async fn close(&self) {
        let mut writer = self.writer.lock().await;
        if self.degraded().is_none() {
            if writer.connection.is_none() {
                writer.connection = SqliteConnection::connect_with(&writer.options).await.ok();
            }
            if let Some(connection) = writer.connection.as_mut()
                && let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(connection).await
            {
                tracing::warn!(%error, "cannot checkpoint the store's WAL at shutdown; it is replayed at the next start");
            }
        }
        if let Some(connection) = writer.connection.take() {
            let _ = connection.close().await;
        }
        self.pool().close().await;
    }

    /// The current generation of `server`, if one was ever committed.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn load_current(&self, server: &str) -> Result<Option<StoredServer>, StoreError> {
        let row = sqlx::query("SELECT current_generation, last_verified_at_ms, private_to FROM servers WHERE name = ?")
            .bind(server)
            .fetch_optional(&self.pool())
            .await?;
        let Some(row) = row else { return Ok(None) };
        let number: i64 = row.try_get(0)?;
        if number == 0 {
            return Ok(None);
        }
        let committed_at_ms: i64 = sqlx::query_scalar("SELECT committed_at_ms FROM generations WHERE server = ? AND generation = ?")
            .bind(server)
            .bind(number)
            .fetch_optional(&self.pool())
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
    pub async fn load_all_current(&self) -> Result<HashMap<String, StoredServer>, StoreError> {
        // name, current generation, last verified, committed at, private to.
        type Head = (String, i64, Option<i64>, Option<i64>, Option<String>);
        let heads: Vec<Head> = sqlx::query_as(
            "SELECT s.name, s.current_generation, s.last_verified_at_ms, g.committed_at_ms, s.private_to FROM servers s \
             LEFT JOIN generations g ON g.server = s.name AND g.generation = s.current_generation WHERE s.current_generation > 0",
        )
        .fetch_all(&self.pool())
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
    async fn load_snapshots(&self, current: &HashMap<&str, i64>) -> Result<HashMap<String, Vec<ToolDef>>, StoreError> {
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
        &self,
        current: &HashMap<&str, i64>,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<HashMap<String, Vec<ToolDef>>, StoreError> {
        let rows: Vec<(String, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT server, generation, tools FROM current_snapshots WHERE (?1 IS NULL OR server >= ?1) AND (?2 IS NULL OR server < ?2)",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool())
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
    async fn load_packed(&self, from: Option<&str>, to: Option<&str>) -> Result<HashMap<String, Vec<ToolDef>>, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT v.server, '[' || group_concat('[' || json_quote(v.name) || ',' || json_quote(v.hash) || ',' || d.definition || ']', ',') || ']' \
             FROM tool_versions v JOIN definitions d ON d.hash = v.hash \
             WHERE v.last_generation IS NULL AND (?1 IS NULL OR v.server >= ?1) AND (?2 IS NULL OR v.server < ?2) GROUP BY v.server",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool())
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
    pub async fn tool_history(&self, server: &str, name: &str, limit: u32) -> Result<Vec<(u64, Option<u64>, String)>, StoreError> {
        let rows: Vec<(i64, Option<i64>, String)> = sqlx::query_as(
            "SELECT first_generation, last_generation, hash FROM tool_versions WHERE server = ? AND name = ? \
             ORDER BY first_generation DESC LIMIT ?",
        )
        .bind(server)
        .bind(name)
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
        .await?;
        rows.into_iter().map(|(first, last, hash)| Ok((to_u64(first)?, last.map(to_u64).transpose()?, hash))).collect()
    }

    /// The tools of `server` at `generation` (empty if that generation was pruned or never existed).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn tools_at(&self, server: &str, generation: u64) -> Result<Vec<ToolDef>, StoreError> {
        let generation = to_i64(generation);
        let rows = sqlx::query(
            "SELECT v.name, d.definition, v.hash FROM tool_versions v JOIN definitions d ON d.hash = v.hash \
             WHERE v.server = ? AND v.first_generation <= ? AND (v.last_generation IS NULL OR v.last_generation >= ?) \
             ORDER BY v.name",
        )
        .bind(server)
        .bind(generation)
        .bind(generation)
        .fetch_all(&self.pool())
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
    pub async fn eras(&self) -> Result<HashMap<String, String>, StoreError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT name, era FROM servers WHERE era IS NOT NULL").fetch_all(&self.pool()).await?;
        Ok(rows.into_iter().collect())
    }

    /// Remembers the era and version a server was found to speak.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn remember_era(&self, server: &str, era: &str, version: &str) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
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
    pub async fn removed_in(&self, server: &str, name: &str) -> Result<Option<u64>, StoreError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT last_generation FROM tool_versions WHERE server = ? AND name = ? ORDER BY first_generation DESC LIMIT 1",
        )
        .bind(server)
        .bind(name)
        .fetch_optional(&self.pool())
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
        &self,
        server: &str,
        listing: &Listing,
        accepted: &[(String, String)],
        private_to: Option<&str>,
        why: String,
    ) -> Result<CommitOutcome, StoreError> {
        let head: Option<(i64, Option<String>)> = sqlx::query_as("SELECT current_generation, private_to FROM servers WHERE name = ?")
            .bind(server)
            .fetch_optional(&self.pool())
            .await?;
        let Some((current, stored_private_to)) = head.filter(|(current, _)| *current > 0) else { return Err(StoreError::Degraded(why)) };
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT name, hash FROM tool_versions WHERE server = ? AND last_generation IS NULL ORDER BY name")
                .bind(server)
                .fetch_all(&self.pool())
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
    pub async fn names_in_history(&self, server: &str) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT DISTINCT name FROM tool_versions WHERE server = ? ORDER BY name")
            .bind(server)
            .fetch_all(&self.pool())
            .await?)
    }

    /// Commits a complete listing as the server's new generation if it differs from the
    /// current one, and records the enumeration either way. One transaction. `previous` is the
    /// caller's copy of the current generation, if it has one.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure; nothing is committed then.
    pub async fn commit(
        &self,
        server: &str,
        listing: Listing,
        record: EnumerationRecord,
        previous: Option<&Generation>,
    ) -> Result<CommitOutcome, StoreError> {
        self.commit_accepting(server, listing, record, previous, &[], None).await
    }

    /// [`Store::commit`] that also records, in the same transaction, the definitions the
    /// server's integrity policy accepted (`(tool, hash)`): the baseline later changes are
    /// compared with is durable exactly when the generation is.
    ///
    /// # Errors
    /// As [`Store::commit`].
    pub async fn commit_accepting(
        &self,
        server: &str,
        listing: Listing,
        mut record: EnumerationRecord,
        previous: Option<&Generation>,
        accepted: &[(String, String)],
        private_to: Option<&str>,
    ) -> Result<CommitOutcome, StoreError> {
        let mut tx = match self.begin().await {
            Ok(tx) => tx,
            Err(StoreError::Degraded(why)) => return self.confirm_unchanged(server, &listing, accepted, private_to, why).await,
            Err(error) => return Err(error),
        };
        sqlx::query("INSERT INTO servers (name) VALUES (?) ON CONFLICT(name) DO NOTHING").bind(server).execute(tx.conn()).await?;
        let current: i64 =
            sqlx::query_scalar("SELECT current_generation FROM servers WHERE name = ?").bind(server).fetch_one(tx.conn()).await?;
        // The caller's copy of the current generation saves reading every row back, as long as
        // it is the one the database holds.
        let diff = match previous {
            Some(previous) if to_i64(previous.number) == current => {
                Diff::between_sorted(previous.tools.iter().map(|t| (t.name.as_str(), t.hash.as_str())), &listing.tools)
            }
            _ => {
                let rows: Vec<(String, String)> =
                    sqlx::query_as("SELECT name, hash FROM tool_versions WHERE server = ? AND last_generation IS NULL ORDER BY name")
                        .bind(server)
                        .fetch_all(tx.conn())
                        .await?;
                Diff::between_sorted(rows.iter().map(|(name, hash)| (name.as_str(), hash.as_str())), &listing.tools)
            }
        };
        let now = now_ms();
        sqlx::query("UPDATE servers SET private_to = ? WHERE name = ?").bind(private_to).bind(server).execute(tx.conn()).await?;
        if diff.is_empty() && current > 0 {
            sqlx::query("UPDATE servers SET last_verified_at_ms = ? WHERE name = ?").bind(now).bind(server).execute(tx.conn()).await?;
            // A store from before snapshots (or after the rehash) gets its snapshot here.
            let packed: Option<i64> = sqlx::query_scalar("SELECT generation FROM current_snapshots WHERE server = ?")
                .bind(server)
                .fetch_optional(tx.conn())
                .await?;
            if packed != Some(current) {
                write_snapshot(tx.conn(), server, current, &listing.tools).await?;
            }
            record.outcome = EnumerationOutcome::Unchanged;
            record.generation = to_u64(current)?;
            insert_enumeration(tx.conn(), server, &record).await?;
            tx.commit().await?;
            return Ok(CommitOutcome::Unchanged { generation: to_u64(current)? });
        }

        let next = current.checked_add(1).ok_or_else(|| StoreError::Corrupt(format!("generation counter of {server} is exhausted")))?;
        // A handful of statements per commit whatever its size: each takes its rows as one JSON
        // array (a statement is a round trip to the database thread; a row is SQLite's work).
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
            .execute(tx.conn())
            .await?;
            if self.search_index {
                search::end_versions(tx.conn(), server, current, &ended).await?;
            }
        }
        let new_tools: Vec<&ToolDef> = diff.added.iter().chain(&diff.changed).map(|name| by_name[name.as_str()]).collect();
        if !new_tools.is_empty() {
            let rows: Vec<serde_json::Value> =
                new_tools.iter().map(|tool| serde_json::json!([tool.name, tool.hash, &*tool.definition])).collect();
            let rows = serde_json::Value::Array(rows).to_string();
            sqlx::query(
                "INSERT INTO definitions (hash, definition) SELECT value ->> 1, value ->> 2 FROM json_each(?1) WHERE true \
                 ON CONFLICT(hash) DO NOTHING",
            )
            .bind(&rows)
            .execute(tx.conn())
            .await?;
            sqlx::query(
                "INSERT INTO tool_versions (server, name, first_generation, hash) SELECT ?1, value ->> 0, ?2, value ->> 1 FROM json_each(?3)",
            )
            .bind(server)
            .bind(next)
            .bind(&rows)
            .execute(tx.conn())
            .await?;
            if self.search_index {
                index_versions(tx.conn(), server, next, None, &new_tools).await?;
            }
        }
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

    /// Records an enumeration that committed nothing (failed or superseded).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn record_enumeration(&self, server: &str, mut record: EnumerationRecord) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
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
    pub async fn enumerations(&self, server: &str, limit: u32) -> Result<Vec<EnumerationRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT started_at_ms, duration_ms, reason, outcome, pages, tools, bytes, generation, error, diagnostics \
             FROM enumerations WHERE server = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
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
    pub async fn history(&self, server: &str, limit: u32) -> Result<Vec<GenerationSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT generation, committed_at_ms, reason, tool_count, added, removed, changed FROM generations \
             WHERE server = ? ORDER BY generation DESC LIMIT ?",
        )
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
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
    async fn prune_history(&self, tx: &mut SqliteConnection, server: &str, newest: i64) -> Result<(), StoreError> {
        let oldest_kept = newest - i64::from(self.history_generations) + 1;
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

fn to_u64(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative counter {value}")))
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
