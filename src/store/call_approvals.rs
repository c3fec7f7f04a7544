//! Calls waiting for a person's approval, and the approvals that bind them: durable, so that a
//! pending request survives a restart and an approval is used at most once. Every change of
//! status is one conditional update: of two operators deciding at once exactly one wins, and of
//! two calls holding one approval exactly one runs.

use sqlx::Row;

use super::{Store, StoreError};

/// Where a request is. `pending` and `approved` are the only states it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
    /// The approved call ran (or was sent to run): never again.
    Used,
    /// Approved, but the definition or the caller's policy changed before it ran.
    Stale,
}

impl ApprovalStatus {
    const ALL: [ApprovalStatus; 6] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Used,
        ApprovalStatus::Stale,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Used => "used",
            ApprovalStatus::Stale => "stale",
        }
    }

    #[must_use]
    pub fn named(text: &str) -> Option<ApprovalStatus> {
        ApprovalStatus::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// One request as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    pub id: String,
    pub principal: String,
    pub agent: String,
    /// Who asked, as the audit trail names callers.
    pub caller: String,
    pub qualified_name: String,
    pub definition_hash: String,
    /// RFC 8785 canonical JSON: exactly what runs.
    pub arguments: String,
    pub arguments_digest: String,
    pub policy_revision: String,
    pub status: ApprovalStatus,
    pub requested_at_ms: i64,
    pub expires_at_ms: i64,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub reason: Option<String>,
    /// The task following the request for a plain call that stopped waiting.
    pub task_id: Option<String>,
}

/// Why a request could not be stored.
#[derive(Debug)]
pub enum Admission {
    Stored,
    /// The agent has this many pending already.
    AgentFull(u32),
    /// Everyone together has this many pending already.
    Full(u32),
}

fn record(row: &sqlx::sqlite::SqliteRow) -> ApprovalRecord {
    let status: String = row.get("status");
    ApprovalRecord {
        id: row.get("id"),
        principal: row.get("principal"),
        agent: row.get("agent"),
        caller: row.get("caller"),
        qualified_name: row.get("qualified_name"),
        definition_hash: row.get("definition_hash"),
        arguments: row.get("arguments"),
        arguments_digest: row.get("arguments_digest"),
        policy_revision: row.get("policy_revision"),
        status: ApprovalStatus::named(&status).unwrap_or(ApprovalStatus::Expired),
        requested_at_ms: row.get("requested_at_ms"),
        expires_at_ms: row.get("expires_at_ms"),
        decided_by: row.get("decided_by"),
        decided_at_ms: row.get("decided_at_ms"),
        reason: row.get("reason"),
        task_id: row.get("task_id"),
    }
}

/// The repository of requests to run one call, reached as [`Store::call_approvals`].
#[derive(Clone, Copy)]
pub struct CallApprovals<'a> {
    pub(super) store: &'a Store,
}

impl CallApprovals<'_> {
    /// Stores a new pending request, unless its agent or everyone has as many pending as
    /// allowed (checked and stored in one transaction, so the limits hold exactly).
    ///
    /// # Errors
    /// [`StoreError`]: nothing was stored.
    pub async fn insert(self, request: &ApprovalRecord, per_agent: u32, in_all: u32, now_ms: i64) -> Result<Admission, StoreError> {
        let mut tx = self.store.begin().await?;
        let (by_agent, all): (i64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(agent = ?1), 0), COUNT(*) FROM call_approvals WHERE status = 'pending' AND expires_at_ms > ?2",
        )
        .bind(&request.agent)
        .bind(now_ms)
        .fetch_one(tx.conn())
        .await?;
        if by_agent >= i64::from(per_agent) {
            return Ok(Admission::AgentFull(per_agent));
        }
        if all >= i64::from(in_all) {
            return Ok(Admission::Full(in_all));
        }
        sqlx::query(
            "INSERT INTO call_approvals (id, principal, agent, caller, qualified_name, definition_hash, arguments, \
             arguments_digest, policy_revision, status, requested_at_ms, expires_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending', ?10, ?11)",
        )
        .bind(&request.id)
        .bind(&request.principal)
        .bind(&request.agent)
        .bind(&request.caller)
        .bind(&request.qualified_name)
        .bind(&request.definition_hash)
        .bind(&request.arguments)
        .bind(&request.arguments_digest)
        .bind(&request.policy_revision)
        .bind(request.requested_at_ms)
        .bind(request.expires_at_ms)
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(Admission::Stored)
    }

    /// A request by id.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn get(self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let row = sqlx::query("SELECT * FROM call_approvals WHERE id = ?").bind(id).fetch_optional(&self.store.pool()).await?;
        Ok(row.as_ref().map(record))
    }

    /// The live request (pending, or approved and unused) of this caller for this exact call,
    /// if any: the same call asked again follows it instead of asking anew.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn live(self, principal: &str, qualified: &str, digest: &str, now_ms: i64) -> Result<Option<ApprovalRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT * FROM call_approvals WHERE principal = ?1 AND qualified_name = ?2 AND arguments_digest = ?3 \
             AND status IN ('pending', 'approved') AND expires_at_ms > ?4 ORDER BY requested_at_ms DESC LIMIT 1",
        )
        .bind(principal)
        .bind(qualified)
        .bind(digest)
        .bind(now_ms)
        .fetch_optional(&self.store.pool())
        .await?;
        Ok(row.as_ref().map(record))
    }

    /// Requests in `status` (all when `None`), newest first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn list(self, status: Option<ApprovalStatus>, limit: u32) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = sqlx::query("SELECT * FROM call_approvals WHERE (?1 IS NULL OR status = ?1) ORDER BY requested_at_ms DESC, id LIMIT ?2")
            .bind(status.map(ApprovalStatus::as_str))
            .bind(i64::from(limit))
            .fetch_all(&self.store.pool())
            .await?;
        Ok(rows.iter().map(record).collect())
    }

    /// Moves a request from `from` to `to` if it is still in `from` and has not expired
    /// (`decided` set: who, when, why); `false` when another change came first.
    ///
    /// # Errors
    /// [`StoreError`]: nothing changed.
    pub async fn transition(
        self,
        id: &str,
        from: ApprovalStatus,
        to: ApprovalStatus,
        decided: Option<(&str, Option<&str>)>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.store.begin().await?;
        let changed = sqlx::query(
            "UPDATE call_approvals SET status = ?3, \
               decided_by = COALESCE(?4, decided_by), reason = COALESCE(?5, reason), \
               decided_at_ms = CASE WHEN ?4 IS NULL THEN decided_at_ms ELSE ?6 END \
             WHERE id = ?1 AND status = ?2 AND (expires_at_ms > ?6 OR ?3 IN ('expired', 'stale'))",
        )
        .bind(id)
        .bind(from.as_str())
        .bind(to.as_str())
        .bind(decided.map(|(by, _)| by))
        .bind(decided.and_then(|(_, reason)| reason))
        .bind(now_ms)
        .execute(tx.conn())
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(changed == 1)
    }

    /// Makes `task` the request's follower if its follower is still `was` (none, or one that
    /// ended); `false` when another call made its own first.
    ///
    /// # Errors
    /// [`StoreError`]: nothing changed.
    pub async fn follow(self, id: &str, was: Option<&str>, task: &str) -> Result<bool, StoreError> {
        let mut tx = self.store.begin().await?;
        let changed = sqlx::query("UPDATE call_approvals SET task_id = ?3 WHERE id = ?1 AND task_id IS ?2")
            .bind(id)
            .bind(was)
            .bind(task)
            .execute(tx.conn())
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(changed == 1)
    }

    /// Marks every pending or approved request whose time ran out as expired; how many.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn expire(self, now_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.store.begin().await?;
        let changed =
            sqlx::query("UPDATE call_approvals SET status = 'expired' WHERE status IN ('pending', 'approved') AND expires_at_ms <= ?1")
                .bind(now_ms)
                .execute(tx.conn())
                .await?
                .rows_affected();
        tx.commit().await?;
        Ok(changed)
    }
}
