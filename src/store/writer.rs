//! The writer connection's transactions, and the check that a database file is toolhost's.

use std::path::Path;

use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

use super::{APPLICATION_ID, StoreError, WriteTx};

/// The WAL's size past which a commit checkpoints and truncates it.
pub(super) const WAL_BOUND: u64 = 1 << 20;

// === impl WriteTx ===

impl WriteTx<'_> {
    pub(super) fn conn(&mut self) -> &mut SqliteConnection {
        // `begin` opened it, and only dropping an uncommitted transaction takes it away.
        self.writer.connection.as_mut().expect("the writer connection is open during a transaction")
    }

    /// Commits. On failure the connection is closed (rolling back whatever SQLite still holds).
    /// Then keeps the WAL bounded ([`WAL_BOUND`]).
    pub(super) async fn commit(mut self) -> Result<(), StoreError> {
        sqlx::query("COMMIT").execute(self.conn()).await?;
        self.committed = true;
        self.bound_the_wal().await;
        Ok(())
    }

    /// Checkpoints the WAL into the database and truncates it once it is larger than
    /// [`WAL_BOUND`] or an eighth of the filesystem's free space, whichever is less: SQLite's
    /// own checkpoint waits for 1,000 pages (4 MiB), which on a small or nearly full filesystem
    /// is every byte there is, and a WAL that holds the last free bytes leaves a checkpoint no
    /// room to grow the database, so nothing could ever be committed again. The commit has
    /// happened whatever this does; a checkpoint that fails (readers busy, no room) is tried
    /// again after the next commit.
    async fn bound_the_wal(&mut self) {
        let Ok(size) = std::fs::metadata(&self.writer.wal).map(|meta| meta.len()) else { return };
        let bound = free_bytes(&self.writer.wal).map_or(WAL_BOUND, |free| WAL_BOUND.min(free / 8));
        if size <= bound {
            return;
        }
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(self.conn()).await {
            tracing::debug!(%error, wal_bytes = size, "the store's WAL could not be checkpointed yet");
        }
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if !self.committed {
            // Closing the connection ends the transaction whatever state SQLite left it in
            // (after SQLITE_FULL it may or may not have rolled back by itself).
            self.writer.connection = None;
        }
    }
}

/// The bytes free to this user on the filesystem that holds `path`, if it can be asked.
pub(super) fn free_bytes(path: &Path) -> Option<u64> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let stats = nix::sys::statvfs::statvfs(dir).ok()?;
    // The block count is narrower than u64 on some targets.
    #[allow(clippy::useless_conversion)]
    Some(u64::from(stats.blocks_available()).saturating_mul(u64::from(stats.fragment_size())))
}

/// Refuses a database that belongs to someone else: a non-zero `application_id` other than
/// toolhost's, or tables without toolhost's schema. An empty file, toolhost's own, or a store of
/// an earlier toolhost (its tables, no id yet) are fine.
pub(super) async fn check_ownership(path: &Path) -> Result<(), StoreError> {
    let foreign = |reason: String| StoreError::Foreign { path: path.display().to_string(), reason };
    if std::fs::metadata(path).map_or(true, |meta| meta.len() == 0) {
        return Ok(());
    }
    // Read-only and without touching the journal mode: looking must not change the file.
    let options = SqliteConnectOptions::new().filename(path).read_only(true);
    let mut connection =
        SqliteConnection::connect_with(&options).await.map_err(|source| StoreError::Open { path: path.display().to_string(), source })?;
    let verdict = ownership(&mut connection, foreign).await;
    let _ = connection.close().await;
    verdict
}

/// [`check_ownership`] on a connection already open (a degraded store's).
pub(super) async fn ownership_of(path: &Path, connection: &mut SqliteConnection) -> Result<(), StoreError> {
    ownership(connection, |reason| StoreError::Foreign { path: path.display().to_string(), reason }).await
}

async fn ownership(connection: &mut SqliteConnection, foreign: impl Fn(String) -> StoreError) -> Result<(), StoreError> {
    let application_id: i64 = sqlx::query_scalar("PRAGMA application_id").fetch_one(&mut *connection).await?;
    if application_id == APPLICATION_ID {
        return Ok(());
    }
    if application_id != 0 {
        return Err(foreign(format!("its application_id is {application_id:#x}")));
    }
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .fetch_all(&mut *connection)
            .await?;
    let ours = ["_sqlx_migrations", "servers", "tool_versions", "generations"];
    if tables.is_empty() || ours.iter().all(|name| tables.iter().any(|table| table == name)) {
        return Ok(());
    }
    let mut listed = tables.iter().take(5).map(String::as_str).collect::<Vec<_>>().join(", ");
    if tables.len() > 5 {
        listed.push_str(", …");
    }
    Err(foreign(format!("it holds other tables ({listed})")))
}
