//! Quota usage: counted in the store, so that a quota holds across restarts.

use super::{Store, StoreError, to_i64};

impl Store {
    /// Counts one call against a quota in its current `window`, unless `limit` calls already
    /// used it: `Ok(true)` when the call may go. One statement, so concurrent calls are counted
    /// exactly (SQLite serializes writers).
    ///
    /// # Errors
    /// [`StoreError`] when the count cannot be written (a quota then fails closed).
    pub async fn take_quota(&self, agent: &str, quota: &str, window: u64, limit: u32) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let taken = sqlx::query(
            "INSERT INTO quota_usage (agent, quota, window_index, used) VALUES (?1, ?2, ?3, 1) \
             ON CONFLICT (agent, quota) DO UPDATE SET \
               used = CASE WHEN quota_usage.window_index = excluded.window_index THEN quota_usage.used + 1 ELSE 1 END, \
               window_index = excluded.window_index \
             WHERE quota_usage.window_index != excluded.window_index OR quota_usage.used < ?4 \
             RETURNING used",
        )
        .bind(agent)
        .bind(quota)
        .bind(to_i64(window))
        .bind(i64::from(limit))
        .fetch_optional(tx.conn())
        .await?
        .is_some();
        tx.commit().await?;
        Ok(taken)
    }

    /// Calls used of a quota in `window` (what `whoami` shows).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn quota_used(&self, agent: &str, quota: &str, window: u64) -> Result<u32, StoreError> {
        let used: Option<i64> = sqlx::query_scalar("SELECT used FROM quota_usage WHERE agent = ? AND quota = ? AND window_index = ?")
            .bind(agent)
            .bind(quota)
            .bind(to_i64(window))
            .fetch_optional(&self.pool())
            .await?;
        Ok(used.and_then(|used| u32::try_from(used).ok()).unwrap_or(0))
    }
}
