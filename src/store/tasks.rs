//! Tool calls run as tasks: their records, durable so that a caller that went away (or a
//! restarted daemon) finds them by id. Only terminal states are ever overwritten by nothing:
//! a task leaves `working` once, by the first of its end or its cancellation.

use sqlx::Row;

use super::{Store, StoreError, to_i64};

/// Where a task is. `working` is the only state it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// A status by its name, if it is one.
    #[must_use]
    pub fn named(text: &str) -> Option<TaskStatus> {
        [TaskStatus::Working, TaskStatus::Completed, TaskStatus::Failed, TaskStatus::Cancelled].into_iter().find(|s| s.as_str() == text)
    }

    fn parse(text: &str) -> TaskStatus {
        match text {
            "working" => TaskStatus::Working,
            "completed" => TaskStatus::Completed,
            "cancelled" => TaskStatus::Cancelled,
            _ => TaskStatus::Failed,
        }
    }

    #[must_use]
    pub fn is_terminal(self) -> bool {
        self != TaskStatus::Working
    }
}

/// One task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    pub id: String,
    /// The caller's principal: the only caller that may see the task.
    pub owner: String,
    /// The agent entry whose limits the task counts against.
    pub agent: String,
    pub qualified_name: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    /// toolhost's outcome label once it ended (`ok`, `tool_error`, `session_lost`…).
    pub outcome: Option<String>,
    /// The tool's result object, byte for byte (completed, or failed with `isError`).
    pub result: Option<String>,
    /// The call's error (toolhost's JSON of it), for a task that failed without a result.
    pub failure: Option<String>,
    pub result_bytes: u64,
    /// The generation and definition the call ran against, once it reached a tool.
    pub ran_against: Option<(u64, String)>,
    /// The server's own task id, when the server runs the call as a task.
    pub upstream: Option<String>,
    /// The approval request the call waits for (or waited for): until it is used, nothing
    /// was sent, and a restarted daemon follows it again.
    pub approval: Option<String>,
    /// The generation the call was handed to: from there it may have run.
    pub sent_generation: Option<u64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub ttl_ms: u64,
}

/// How a task ended, as written once.
#[derive(Debug)]
pub struct TaskEnd<'a> {
    pub status: TaskStatus,
    pub message: Option<&'a str>,
    pub outcome: &'a str,
    pub result: Option<&'a str>,
    pub failure: Option<&'a str>,
    pub ran_against: Option<(u64, &'a str)>,
}

/// Which tasks a listing keeps (every one when all are `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub owner: Option<String>,
    pub agent: Option<String>,
    pub status: Option<TaskStatus>,
    /// Part of the qualified name.
    pub tool: Option<String>,
}

/// What the open tasks and stored results of one agent, and of everyone, amount to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskUsage {
    pub open_by_agent: u64,
    pub open: u64,
    pub bytes_by_agent: u64,
    pub bytes: u64,
}

fn record(row: &sqlx::sqlite::SqliteRow) -> TaskRecord {
    let status: String = row.get("status");
    TaskRecord {
        id: row.get("id"),
        owner: row.get("owner"),
        agent: row.get("agent"),
        qualified_name: row.get("qualified_name"),
        status: TaskStatus::parse(&status),
        status_message: row.get("status_message"),
        outcome: row.get("outcome"),
        result: row.get("result"),
        failure: row.get("failure"),
        result_bytes: u64::try_from(row.get::<i64, _>("result_bytes")).unwrap_or(0),
        ran_against: match (row.get::<Option<i64>, _>("generation"), row.get::<Option<String>, _>("definition_hash")) {
            (Some(generation), Some(hash)) => Some((u64::try_from(generation).unwrap_or(0), hash)),
            _ => None,
        },
        upstream: row.get("upstream_task"),
        approval: row.get("approval_id"),
        sent_generation: row.get::<Option<i64>, _>("sent_generation").and_then(|generation| u64::try_from(generation).ok()),
        created_at_ms: row.get("created_at_ms"),
        updated_at_ms: row.get("updated_at_ms"),
        ttl_ms: u64::try_from(row.get::<i64, _>("ttl_ms")).unwrap_or(0),
    }
}

/// The tasks' repository, reached as [`Store::tasks`].
#[derive(Clone, Copy)]
pub struct Tasks<'a> {
    pub(super) store: &'a Store,
}

impl Tasks<'_> {
    /// Stores a new task.
    ///
    /// # Errors
    /// [`StoreError`]: the task was not created.
    pub async fn insert(self, task: &TaskRecord) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query(
            "INSERT INTO tasks (id, owner, agent, qualified_name, status, status_message, created_at_ms, updated_at_ms, ttl_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)",
        )
        .bind(&task.id)
        .bind(&task.owner)
        .bind(&task.agent)
        .bind(&task.qualified_name)
        .bind(task.status.as_str())
        .bind(&task.status_message)
        .bind(task.created_at_ms)
        .bind(to_i64(task.ttl_ms))
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Ends a working task; `false` when it had already ended (cancelled first).
    ///
    /// # Errors
    /// [`StoreError`]: the end was not written.
    pub async fn end(self, id: &str, end: &TaskEnd<'_>, now_ms: i64) -> Result<bool, StoreError> {
        let bytes = end.result.map_or(0, str::len);
        let mut tx = self.store.begin().await?;
        let changed = sqlx::query(
            "UPDATE tasks SET status = ?2, status_message = ?3, outcome = ?4, result = ?5, failure = ?6, result_bytes = ?7, \
             updated_at_ms = ?8, generation = ?9, definition_hash = ?10 WHERE id = ?1 AND status = 'working'",
        )
        .bind(id)
        .bind(end.status.as_str())
        .bind(end.message)
        .bind(end.outcome)
        .bind(end.result)
        .bind(end.failure)
        .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
        .bind(now_ms)
        .bind(end.ran_against.map(|(generation, _)| to_i64(generation)))
        .bind(end.ran_against.map(|(_, hash)| hash))
        .execute(tx.conn())
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(changed == 1)
    }

    /// A task by id, whoever owns it (the caller checks).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn get(self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let row = sqlx::query("SELECT * FROM tasks WHERE id = ?").bind(id).fetch_optional(&self.store.pool()).await?;
        Ok(row.as_ref().map(record))
    }

    /// `owner`'s tasks, newest first, after `before` (the last one of the previous page).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn owned_by(self, owner: &str, before: Option<(i64, &str)>, limit: u32) -> Result<Vec<TaskRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM tasks WHERE owner = ?1 \
             AND (?2 IS NULL OR created_at_ms < ?2 OR (created_at_ms = ?2 AND id < ?3)) \
             ORDER BY created_at_ms DESC, id DESC LIMIT ?4",
        )
        .bind(owner)
        .bind(before.map(|(at, _)| at))
        .bind(before.map_or("", |(_, id)| id))
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        Ok(rows.iter().map(record).collect())
    }

    /// Tasks as the console lists them, newest first: of one owner or all, and of the agent,
    /// in the status, whose qualified name contains `tool`, where given.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn filtered(self, filter: &TaskFilter, limit: u32) -> Result<Vec<TaskRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM tasks WHERE (?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR agent = ?2) \
             AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR instr(qualified_name, ?4) > 0) \
             ORDER BY created_at_ms DESC, id DESC LIMIT ?5",
        )
        .bind(filter.owner.as_deref())
        .bind(filter.agent.as_deref())
        .bind(filter.status.map(TaskStatus::as_str))
        .bind(filter.tool.as_deref())
        .bind(i64::from(limit))
        .fetch_all(&self.store.pool())
        .await?;
        Ok(rows.iter().map(record).collect())
    }

    /// What `agent`'s open tasks and stored results, and everyone's, amount to.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn usage(self, agent: &str) -> Result<TaskUsage, StoreError> {
        let row = sqlx::query(
            "SELECT \
               COALESCE(SUM(status = 'working' AND agent = ?1), 0) AS open_by_agent, \
               COALESCE(SUM(status = 'working'), 0) AS open, \
               COALESCE(SUM(CASE WHEN agent = ?1 THEN result_bytes ELSE 0 END), 0) AS bytes_by_agent, \
               COALESCE(SUM(result_bytes), 0) AS bytes \
             FROM tasks",
        )
        .bind(agent)
        .fetch_one(&self.store.pool())
        .await?;
        let get = |name: &str| u64::try_from(row.get::<i64, _>(name)).unwrap_or(0);
        Ok(TaskUsage { open_by_agent: get("open_by_agent"), open: get("open"), bytes_by_agent: get("bytes_by_agent"), bytes: get("bytes") })
    }

    /// Keeps the server's own task id of a working task.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn set_upstream(self, id: &str, upstream: &str) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("UPDATE tasks SET upstream_task = ?2 WHERE id = ?1 AND status = 'working'")
            .bind(id)
            .bind(upstream)
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes an ended task (one whose end was answered directly, never handed out).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn delete_ended(self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("DELETE FROM tasks WHERE id = ?1 AND status != 'working'").bind(id).execute(tx.conn()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A working task's status message (its server's progress).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn set_message(self, id: &str, message: &str) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("UPDATE tasks SET status_message = ?2 WHERE id = ?1 AND status = 'working'")
            .bind(id)
            .bind(message)
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Keeps the approval request a working task's call waits for: a restarted daemon follows
    /// it again instead of failing the task.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn set_approval(self, id: &str, approval: &str) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("UPDATE tasks SET approval_id = ?2 WHERE id = ?1 AND status = 'working'")
            .bind(id)
            .bind(approval)
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Keeps the generation a working task's call was handed to (from there it may run).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn set_sent(self, id: &str, generation: u64) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        sqlx::query("UPDATE tasks SET sent_generation = ?2 WHERE id = ?1 AND status = 'working'")
            .bind(id)
            .bind(to_i64(generation))
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every task still working in the store (at start: those a previous daemon left).
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn working(self) -> Result<Vec<TaskRecord>, StoreError> {
        let rows = sqlx::query("SELECT * FROM tasks WHERE status = 'working'").fetch_all(&self.store.pool()).await?;
        Ok(rows.iter().map(record).collect())
    }

    /// Deletes ended tasks whose TTL ran out. Returns how many.
    ///
    /// # Errors
    /// [`StoreError`] on a database failure.
    pub async fn expire(self, now_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.store.begin().await?;
        let deleted = sqlx::query("DELETE FROM tasks WHERE status != 'working' AND created_at_ms + ttl_ms < ?1")
            .bind(now_ms)
            .execute(tx.conn())
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(deleted)
    }
}
