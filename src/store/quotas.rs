//! Quota usage: counted in the store, so that a quota holds across restarts.

use super::{Store, StoreError, to_i64};

/// The quota counts' repository, reached as [`Store::quotas`].
#[derive(Clone, Copy)]
pub struct Quotas<'a> {
    pub(super) store: &'a Store,
}

impl Quotas<'_> {
    /// Counts up to `want` calls against a quota in its current `window`, as many as `limit`
    /// leaves: the number counted (0 when the quota is used up). One write transaction, so
    /// concurrent takers never count past the limit.
    ///
    /// # Errors
    /// [`StoreError`] when the count cannot be written (a quota then fails closed).
    pub async fn take(self, agent: &str, quota: &str, window: u64, limit: u32, want: u32) -> Result<u32, StoreError> {
        let mut tx = self.store.begin().await?;
        let stored: Option<(i64, i64)> = sqlx::query_as("SELECT window_index, used FROM quota_usage WHERE agent = ? AND quota = ?")
            .bind(agent)
            .bind(quota)
            .fetch_optional(tx.conn())
            .await?;
        let used = match stored {
            Some((stored_window, used)) if stored_window == to_i64(window) => u32::try_from(used).unwrap_or(u32::MAX),
            _ => 0,
        };
        let granted = want.min(limit.saturating_sub(used));
        if granted > 0 {
            sqlx::query(
                "INSERT INTO quota_usage (agent, quota, window_index, used) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (agent, quota) DO UPDATE SET window_index = excluded.window_index, used = excluded.used",
            )
            .bind(agent)
            .bind(quota)
            .bind(to_i64(window))
            .bind(i64::from(used + granted))
            .execute(tx.conn())
            .await?;
        }
        tx.commit().await?;
        Ok(granted)
    }

    /// Calls used of a quota in `window` (what `whoami` shows).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn used(self, agent: &str, quota: &str, window: u64) -> Result<u32, StoreError> {
        let used: Option<i64> = sqlx::query_scalar("SELECT used FROM quota_usage WHERE agent = ? AND quota = ? AND window_index = ?")
            .bind(agent)
            .bind(quota)
            .bind(to_i64(window))
            .fetch_optional(&self.store.pool())
            .await?;
        Ok(used.and_then(|used| u32::try_from(used).ok()).unwrap_or(0))
    }
}
