//! The daemon's SQLite store: one file, several repositories, each the only writer of its own
//! tables with its own section of `migrations/` (see `owners.rs`): the catalog's generations
//! (`generations`, with `search`, `snapshot` and definition `approvals`), the audit trail
//! (`audit`, `audit_chain`), `tasks`, `quotas`, `call_approvals`, and the fleet spool's cursors
//! (`fleet`). Each repository is a type reached from the store (`store.generations()`,
//! `store.audit()`, ...), a borrowed handle whose methods are that repository's and nothing
//! else's. This module opens the file, keeps its health, and owns the one write path they share.
//!
//! Reads run in parallel on a small pool under WAL. Every write goes through one dedicated
//! connection behind an in-process lock, in `BEGIN IMMEDIATE` transactions with
//! `synchronous = FULL`: when a commit returns, the generation is on disk. A transaction that
//! fails for any reason (a full disk, an I/O error) closes that connection, which rolls the
//! transaction back; the next write opens a fresh one. No connection is ever left inside a
//! transaction, and the store recovers by itself once the fault clears. A store whose
//! filesystem is full at start opens degraded (see [`degraded`]): it serves what it holds and
//! refuses writes until there is room.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqlitePool};
use tokio::sync::{Mutex, MutexGuard};

use crate::catalog::model::{Diff, Generation};

pub mod approvals;
pub mod audit;
pub mod audit_chain;
pub mod call_approvals;
mod definitions;
mod degraded;
pub mod fleet;
pub mod generations;
#[cfg(test)]
mod model_test;
// The map of repositories to tables and migrations, held by its test.
#[cfg(test)]
mod owners;
mod quotas;
mod search;
mod snapshot;
pub mod tasks;
mod writer;

pub use approvals::Approvals;
pub use audit::Audit;
pub use call_approvals::CallApprovals;
pub use fleet::Spool;
pub use generations::Generations;
pub use quotas::Quotas;
pub use tasks::Tasks;
use writer::check_ownership;

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
            store.generations().rehash_definitions().await?;
            store.generations().backfill_search().await?;
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

    /// The catalog's generations: commits, history, enumerations, eras, definitions, search.
    pub fn generations(&self) -> Generations<'_> {
        Generations { store: self }
    }

    /// Definition approvals: the integrity baselines and operators' approvals.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals { store: self }
    }

    /// The audit trail and its signed chain.
    pub fn audit(&self) -> Audit<'_> {
        Audit { store: self }
    }

    /// Tasks: calls that outlive their request.
    pub fn tasks(&self) -> Tasks<'_> {
        Tasks { store: self }
    }

    /// Quota counts, per agent and window.
    pub fn quotas(&self) -> Quotas<'_> {
        Quotas { store: self }
    }

    /// Requests to run one call, waiting for a person's decision.
    pub fn call_approvals(&self) -> CallApprovals<'_> {
        CallApprovals { store: self }
    }

    /// The fleet spool: its cursors, and what it ships.
    pub fn fleet(&self) -> Spool<'_> {
        Spool { store: self }
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
}

fn to_u64(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative counter {value}")))
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
