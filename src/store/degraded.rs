//! A store on a full filesystem. SQLite in WAL mode cannot even open a database whose
//! shared-memory index (`-shm`) it cannot create, so a daemon restarted on a full disk would
//! serve nothing exactly when the host is in trouble. Instead the store opens *degraded*: one
//! connection in exclusive locking mode, which keeps the WAL index in its own memory and needs
//! no `-shm`, reads the stored catalog as it is on disk; every write is refused with
//! [`StoreError::Degraded`] until the filesystem has room again, when the next write reopens
//! the store as usual ([`Store::recover`]). Nothing is published that is not stored.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteLockingMode, SqlitePoolOptions};

use super::writer::{free_bytes, ownership_of};
use super::{Store, StoreError};

/// Free space a store needs before it leaves degraded mode (or is opened degraded at all):
/// room for the shared-memory index and the first transactions.
const ROOM: u64 = 1 << 20;

/// Whether the filesystem that holds `path` has room for the store to work normally. A
/// filesystem that cannot be asked is taken to have room (the open's own error then stands).
pub(super) fn has_room(path: &Path) -> bool {
    free_bytes(path).is_none_or(|free| free >= ROOM)
}

/// The degraded reader for the store at `path`, if it is a toolhost store this version can read
/// as it is (every migration applied, every one-time rewrite done): nothing may need a write.
pub(super) async fn open(path: &Path) -> Result<SqlitePool, StoreError> {
    let open_error = |source| StoreError::Open { path: path.display().to_string(), source };
    let options = SqliteConnectOptions::new()
        .filename(path)
        .locking_mode(SqliteLockingMode::Exclusive)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5));
    let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.map_err(open_error)?;
    match readable_as_is(path, &pool).await {
        Ok(()) => Ok(pool),
        Err(error) => {
            pool.close().await;
            Err(error)
        }
    }
}

async fn readable_as_is(path: &Path, pool: &SqlitePool) -> Result<(), StoreError> {
    let mut connection = pool.acquire().await?;
    ownership_of(path, &mut connection).await?;
    let latest = sqlx::migrate!("./migrations").migrations.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success = 1").fetch_one(&mut *connection).await.unwrap_or(None);
    let rewritten: i64 = sqlx::query_scalar("SELECT count(*) FROM store_meta WHERE key IN ('definition_hash', 'search_index')")
        .fetch_one(&mut *connection)
        .await
        .unwrap_or(0);
    if applied != Some(latest) || rewritten != 2 {
        return Err(StoreError::Degraded(format!(
            "{} needs an upgrade that writes to it, and its filesystem is full: free some space",
            path.display()
        )));
    }
    Ok(())
}

impl Store {
    /// Leaves degraded mode once the filesystem has room: the exclusive reader closes, the store
    /// opens as usual (migrated, its WAL index created) and serves reads and writes again. A
    /// failed attempt goes back to the degraded reader. Called with the writer's lock held.
    pub(super) async fn recover(&self) -> Result<(), StoreError> {
        let Some(why) = self.degraded() else { return Ok(()) };
        if !has_room(&self.path) {
            return Err(StoreError::Degraded(why.to_string()));
        }
        let exclusive = self.pool();
        exclusive.close().await;
        match super::open_healthy(&self.path, &self.reader_options).await {
            Ok(pool) => {
                self.pool.store(Arc::new(pool));
                self.degraded.send_replace(None);
                tracing::info!(store = %self.path.display(), "the store's filesystem has room again: writing resumes");
                Ok(())
            }
            Err(error) => {
                // Back to reading what is stored; if even that fails, reads say so.
                if let Ok(pool) = open(&self.path).await {
                    self.pool.store(Arc::new(pool));
                }
                Err(error)
            }
        }
    }
}
