//! Tool calls run as tasks, for both doors: the call runs here, owned by the daemon rather than
//! by the caller's connection, and its end is kept in the store until the task's TTL runs out,
//! so that a caller that went away (or came back through the other door) gets it by id.
//!
//! A task belongs to the principal that started it: to anyone else it does not exist. Limits
//! (open tasks, stored result bytes) are checked and the task stored under one lock, so they
//! hold exactly. A task's call runs at most its TTL. Where the call is (waiting for approval
//! request X, handed to generation G) is stored before each step, so that a daemon that stops or
//! dies under a task leaves an exact account: a task waiting for approval is followed again by
//! the next daemon (nothing was sent); one whose call was sent fails with an unknown outcome
//! naming its server and generation (never retried), unless its server runs it as a task of its
//! own, which the next daemon follows to its end; one stopped before either fails saying it did
//! not run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub mod overview;

use super::Door;
use super::call::gate::{Following, Stage};
use super::call::{Audit, Given};
use crate::access::{Caller, Identity};
use crate::calls::{ApprovalError, CallError, CallRequest, CallResult, ToolRef, UpstreamTask};
use crate::catalog::names::SEPARATOR;
use crate::catalog::record::now_ms;
use crate::config::TasksConfig;
use crate::registry::ServerState;
use crate::store::call_approvals::ApprovalRecord;
use crate::store::tasks::{TaskEnd, TaskRecord, TaskStatus};
use crate::store::{Store, StoreError};

/// How often a caller is told to look again.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How often ended tasks whose TTL ran out are deleted.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// How often a task's status message follows its server's progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Longest status message kept from a server's progress.
const MAX_PROGRESS_MESSAGE: usize = 512;
/// Tasks one page of a listing holds at most.
pub const MAX_PAGE: u32 = 100;

/// Why a task operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The call would be refused before anything is sent: no task is made.
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("agent {agent:?} has {limit} tasks working, its share: wait for some to end")]
    TooManyForAgent { agent: String, limit: u32 },
    #[error("toolhost has {limit} tasks working, all it runs at once: wait for some to end")]
    TooMany { limit: u32 },
    #[error("the results kept for {whose} fill their {limit} bytes: fetch or let some expire first")]
    StorageFull { whose: String, limit: u64 },
    /// Not there, expired, or another caller's: indistinguishable on purpose.
    #[error("no task {0:?} (unknown, expired, or not yours)")]
    Unknown(String),
    #[error("task {id:?} has already ended ({status})")]
    Ended { id: String, status: &'static str },
    #[error("toolhost is shutting down")]
    ShuttingDown,
    #[error("cannot read the system's random source for a task id")]
    NoRandom,
    #[error("task store: {0}")]
    Store(#[from] StoreError),
}

/// A call to run as a task, owned (it outlives the request that started it).
#[derive(Debug, Clone)]
pub struct TaskCall {
    pub tool: ToolRef,
    /// A JSON object as text; `None` means `{}`.
    pub arguments: Option<String>,
    pub expected_hash: Option<String>,
    pub expected_revision: Option<u64>,
    /// How long the task is kept from its creation (the configured default when `None`);
    /// its call runs at most this long.
    pub ttl: Option<Duration>,
}

/// The daemon's tasks. Cheap to clone; owned by the [`Door`].
#[derive(Clone)]
pub struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: TasksConfig,
    /// Running calls by task id, and what cancels each.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Serializes the limit check with the insert, so that limits hold exactly.
    admission: tokio::sync::Mutex<()>,
    tracker: TaskTracker,
    stopping: CancellationToken,
    /// Moves each time a task ends: what waiters watch.
    ended: watch::Sender<u64>,
}

/// What the caller gets back: the task as stored.
pub type Task = TaskRecord;

impl Tasks {
    #[must_use]
    pub fn new(store: Store, settings: TasksConfig) -> Tasks {
        Tasks {
            inner: Arc::new(Inner {
                store,
                settings,
                running: Mutex::default(),
                admission: tokio::sync::Mutex::new(()),
                tracker: TaskTracker::new(),
                stopping: CancellationToken::new(),
                ended: watch::Sender::new(0),
            }),
        }
    }

    /// At start, the tasks a previous daemon left working: one whose server keeps it, or whose
    /// call waits for an approval, is followed again; one whose call was sent is failed with an
    /// unknown outcome; one stopped before either, as not run. Returns how many ended.
    ///
    /// # Errors
    /// [`StoreError`].
    pub(super) async fn recover(&self, door: &Door) -> Result<u64, StoreError> {
        let mut ended = 0_u64;
        for task in self.inner.store.tasks().working().await? {
            let stopped = match (&task.upstream, task.sent_generation, &task.approval) {
                (Some(upstream), _, _) => {
                    let (upstream, stop) = (upstream.clone(), self.follow(&task.id));
                    tracing::info!(task = %task.id, server_task = %upstream, "following a task its server kept across a restart");
                    self.inner.tracker.spawn(Resume { tasks: self.clone(), door: door.clone(), task, upstream, stop }.run());
                    continue;
                }
                (None, Some(generation), _) => interrupted("toolhost restarted", &task.qualified_name, Some(generation)),
                (None, None, Some(request)) => match self.follow_approval(door, &task, request).await? {
                    Ok(run) => {
                        tracing::info!(task = %task.id, approval = %request, "following the approval request a task waits for across a restart");
                        self.inner.tracker.spawn(run.call());
                        continue;
                    }
                    Err(refused) => refused,
                },
                (None, None, None) => not_sent(&task.qualified_name),
            };
            let failure = encode(&stopped);
            if self.inner.store.tasks().end(&task.id, &stopped_end(&stopped, &failure), now_ms()).await? {
                ended = ended.saturating_add(1);
            }
        }
        if ended > 0 {
            tracing::warn!(
                tasks = ended,
                "tasks that were running when toolhost stopped are failed, each saying whether its call was sent"
            );
        }
        Ok(ended)
    }

    /// Marks task `id` as running (a call runs for it), and gives what stops that call.
    fn follow(&self, id: &str) -> CancellationToken {
        let stop = self.inner.stopping.child_token();
        self.inner.running.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), stop.clone());
        stop
    }

    /// The call of `task`, which waited for approval request `request` when the previous
    /// daemon stopped, ready to follow that request again; or why it cannot (it did not run).
    async fn follow_approval(&self, door: &Door, task: &Task, request: &str) -> Result<Result<Run, CallError>, StoreError> {
        let Some(record) = door.approvals.get(request).await? else {
            return Ok(Err(ApprovalError::Expired { id: request.to_owned() }.into()));
        };
        // The request binds the caller: a task follows only its own owner's.
        if record.principal != task.owner || record.qualified_name != task.qualified_name {
            return Ok(Err(ApprovalError::Expired { id: record.id }.into()));
        }
        // The caller is not here: its agent entry as configured now decides for it (and an
        // approval asked under another policy no longer holds).
        let Some(agent) = door.policy().entries().into_iter().find(|agent| *agent.name == *task.agent) else {
            return Ok(Err(ApprovalError::Stale { id: record.id, what: "the caller's policy".to_owned() }.into()));
        };
        let left = u64::try_from(expires_at(task).saturating_sub(now_ms())).unwrap_or(0);
        if left == 0 {
            return Ok(Err(ApprovalError::Pending { id: record.id, expires_at_ms: record.expires_at_ms, task: None }.into()));
        }
        let ApprovalRecord { id, arguments, .. } = record;
        let call = TaskCall {
            tool: ToolRef::Qualified(task.qualified_name.clone()),
            arguments: Some(arguments),
            expected_hash: None,
            expected_revision: None,
            ttl: None,
        };
        Ok(Ok(Run {
            tasks: self.clone(),
            door: door.clone(),
            // Its credential is not kept (only its digest, in the principal): the trail names
            // the agent entry, and the request the call follows names the caller that asked.
            caller: Caller { identity: Identity::tcp(None), agent },
            id: task.id.clone(),
            call,
            timeout: Duration::from_millis(left),
            stop: self.follow(&task.id),
            follow: Some(id),
        }))
    }

    /// How long a 2026 MCP call may take before it is answered as a task (`answer_within`).
    pub fn answer_within(&self) -> Duration {
        self.inner.settings.answer_within
    }

    /// Deletes ended tasks whose TTL ran out, every minute, until `cancel`.
    pub async fn sweep(self, cancel: CancellationToken) {
        loop {
            if let Err(error) = self.inner.store.tasks().expire(now_ms()).await {
                tracing::warn!(%error, "cannot delete expired tasks");
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(SWEEP_EVERY) => {}
            }
        }
    }

    /// Runs `work` to its end on the tasks' own tracker, whatever becomes of the caller that
    /// awaits it: what must not stop half-way when a client goes away (a follower task started
    /// but not yet linked to its approval request). Shutdown waits for it like for any task.
    pub(in crate::door) fn see_through<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.inner.tracker.spawn(work)
    }

    /// Stops every running task's call (each is then failed with an unknown outcome) and waits
    /// for them until `deadline`.
    pub async fn shutdown(&self, deadline: tokio::time::Instant) {
        self.inner.stopping.cancel();
        self.inner.tracker.close();
        if tokio::time::timeout_at(deadline, self.inner.tracker.wait()).await.is_err() {
            tracing::warn!("tasks did not record their end before the shutdown deadline");
        }
    }

    /// A task of `caller`'s, or [`TaskError::Unknown`].
    ///
    /// # Errors
    /// [`TaskError::Unknown`], [`TaskError::Store`].
    pub async fn get(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        let unknown = || TaskError::Unknown(crate::door::truncate(id.to_owned(), 128));
        // Looked at before the row is read: a call ends by storing its end, then leaving this set.
        let running = self.inner.running.lock().unwrap_or_else(PoisonError::into_inner).contains_key(id);
        let task = self.inner.store.tasks().get(id).await?.ok_or_else(unknown)?;
        let expired = task.status.is_terminal() && expires_at(&task) < now_ms();
        if task.owner != caller.principal() || expired {
            return Err(unknown());
        }
        Ok(as_it_is(task, running))
    }

    /// `caller`'s tasks, newest first, after the task `after` (the last of the previous page).
    ///
    /// # Errors
    /// [`TaskError::Unknown`] for an `after` that is not the caller's, [`TaskError::Store`].
    async fn list(&self, caller: &Caller, after: Option<&str>, limit: u32) -> Result<Vec<Task>, TaskError> {
        let before = match after {
            Some(id) => Some(self.get(caller, id).await?),
            None => None,
        };
        let before = before.as_ref().map(|task| (task.created_at_ms, task.id.as_str()));
        let now = now_ms();
        let running = self.running_now();
        let tasks = self.inner.store.tasks().owned_by(&caller.principal(), before, limit.clamp(1, MAX_PAGE.saturating_add(1))).await?;
        Ok(as_listed(tasks, &running, now))
    }

    /// The tasks whose calls run now.
    fn running_now(&self) -> std::collections::HashSet<String> {
        self.inner.running.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect()
    }

    /// One page of `caller`'s tasks (at most `size`, up to [`MAX_PAGE`]) after the task `after`,
    /// and the id to continue after when there are more: what both doors' listings page by.
    ///
    /// # Errors
    /// As [`Tasks::list`].
    pub async fn page(&self, caller: &Caller, after: Option<&str>, size: u32) -> Result<(Vec<Task>, Option<String>), TaskError> {
        let size = size.clamp(1, MAX_PAGE);
        // One more than the page: whether there is a next page at all.
        let mut tasks = self.list(caller, after, size.saturating_add(1)).await?;
        let more = tasks.len() > size as usize;
        tasks.truncate(size as usize);
        let next = if more { tasks.last().map(|task| task.id.clone()) } else { None };
        Ok((tasks, next))
    }

    /// Waits until `caller`'s task has ended or `until` passes, then gives it as it is.
    ///
    /// # Errors
    /// As [`Tasks::get`].
    pub async fn wait(&self, caller: &Caller, id: &str, until: tokio::time::Instant) -> Result<Task, TaskError> {
        let mut ended = self.inner.ended.subscribe();
        loop {
            ended.borrow_and_update();
            let task = self.get(caller, id).await?;
            if task.status.is_terminal() {
                return Ok(task);
            }
            tokio::select! {
                changed = ended.changed() => if changed.is_err() { return Ok(task) },
                () = tokio::time::sleep_until(until) => return Ok(task),
            }
        }
    }

    /// Forgets an ended task whose caller got its end directly (a 2026 call that ended before
    /// it needed to become a task): it was never handed out, and keeps no storage.
    pub async fn discard(&self, id: &str) {
        if let Err(error) = self.inner.store.tasks().delete_ended(id).await {
            tracing::debug!(task = %id, %error, "cannot delete an answered task (its TTL will)");
        }
    }

    /// Cancels `caller`'s working task: it is marked cancelled first (durably), then its call
    /// is stopped, which tells the server (`notifications/cancelled`); a server's own task
    /// (`upstream`) is for the [`Door`] to cancel.
    ///
    /// # Errors
    /// [`TaskError::Unknown`], [`TaskError::Ended`], [`TaskError::Store`].
    pub(super) async fn cancel(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        let task = self.get(caller, id).await?;
        if !self.end_cancelled(&task.id, "cancelled by its caller").await? {
            let now = self.get(caller, id).await?;
            return Err(TaskError::Ended { id: now.id, status: now.status.as_str() });
        }
        let mut cancelled = self.get(caller, id).await?;
        // The server's own task id, read after the call stopped (it may have just been kept).
        cancelled.upstream = self.inner.store.tasks().get(id).await?.and_then(|task| task.upstream);
        Ok(cancelled)
    }

    /// Marks a working task cancelled (durably, with `message`), then stops its call; `false`
    /// when it had already ended.
    async fn end_cancelled(&self, id: &str, message: &str) -> Result<bool, TaskError> {
        let end = TaskEnd {
            status: TaskStatus::Cancelled,
            message: Some(message),
            outcome: "cancelled",
            result: None,
            failure: None,
            ran_against: None,
        };
        if !self.inner.store.tasks().end(id, &end, now_ms()).await? {
            return Ok(false);
        }
        if let Some(call) = self.inner.running.lock().unwrap_or_else(PoisonError::into_inner).remove(id) {
            call.cancel();
        }
        self.inner.ended.send_modify(|count| *count = count.wrapping_add(1));
        Ok(true)
    }

    /// Starts a task of `caller`'s that follows the approval request its plain call of `tool`
    /// (with `arguments`) waits for: its call finds the same request and waits for it.
    /// [`Door::call`] starts it once the plain call is recorded, so its check records no
    /// refusal (the call has its one record); it runs the call's steps, never [`Door::call`].
    ///
    /// # Errors
    /// As [`Tasks::start`].
    pub(super) async fn start_follower(&self, door: &Door, caller: &Caller, tool: ToolRef, arguments: String) -> Result<Task, TaskError> {
        let call = TaskCall { tool, arguments: Some(arguments), expected_hash: None, expected_revision: None, ttl: None };
        self.begin(door, caller, call, Audit::Silent).await
    }

    /// Starts `call` as a task of `caller`'s, after the checks a call gets before anything is
    /// sent (refused, it is no task at all, and recorded as the call would be), within the limits.
    pub(super) async fn start(&self, door: &Door, caller: &Caller, call: TaskCall) -> Result<Task, TaskError> {
        self.begin(door, caller, call, Audit::Refusal).await
    }

    /// [`Tasks::start`], its check's refusal recorded or not (`audit`).
    async fn begin(&self, door: &Door, caller: &Caller, call: TaskCall, audit: Audit) -> Result<Task, TaskError> {
        if self.inner.stopping.is_cancelled() {
            return Err(TaskError::ShuttingDown);
        }
        let given = Given {
            arguments: call.arguments.as_deref(),
            expected_hash: call.expected_hash.as_deref(),
            expected_revision: call.expected_revision,
        };
        super::call::preflight(door, caller, given, &call.tool, audit).await?;
        let settings = &self.inner.settings;
        let ttl = call.ttl.unwrap_or(settings.default_ttl).clamp(Duration::from_secs(1), settings.max_ttl);
        // The id is the task's only handle: unguessable, from the kernel's CSPRNG.
        let id = crate::secrets::random_token().ok_or(TaskError::NoRandom)?;
        let now = now_ms();
        let task = TaskRecord {
            id: id.clone(),
            owner: caller.principal(),
            agent: caller.agent.name.to_string(),
            qualified_name: crate::door::truncate(call.tool.qualified().into_owned(), 256),
            status: TaskStatus::Working,
            status_message: Some("the call is running".to_owned()),
            outcome: None,
            result: None,
            failure: None,
            result_bytes: 0,
            ran_against: None,
            upstream: None,
            approval: None,
            sent_generation: None,
            created_at_ms: now,
            updated_at_ms: now,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let stop = self.inner.stopping.child_token();
        {
            let _admitted = self.inner.admission.lock().await;
            let usage = self.inner.store.tasks().usage(&task.agent).await?;
            if usage.open_by_agent >= u64::from(settings.max_open_per_agent) {
                return Err(TaskError::TooManyForAgent { agent: task.agent, limit: settings.max_open_per_agent });
            }
            if usage.open >= u64::from(settings.max_open) {
                return Err(TaskError::TooMany { limit: settings.max_open });
            }
            if usage.bytes_by_agent.saturating_add(settings.max_result_bytes) > settings.max_stored_bytes_per_agent {
                return Err(TaskError::StorageFull {
                    whose: format!("agent {:?}", task.agent),
                    limit: settings.max_stored_bytes_per_agent,
                });
            }
            if usage.bytes.saturating_add(settings.max_result_bytes) > settings.max_stored_bytes {
                return Err(TaskError::StorageFull { whose: "all agents".to_owned(), limit: settings.max_stored_bytes });
            }
            // Running before it is stored: a reader never sees it working with no call behind it.
            self.inner.running.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), stop.clone());
            if let Err(error) = self.inner.store.tasks().insert(&task).await {
                self.inner.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
                return Err(error.into());
            }
        }
        let run = Run { tasks: self.clone(), door: door.clone(), caller: caller.clone(), id, call, timeout: ttl, stop, follow: None };
        self.inner.tracker.spawn(run.call());
        Ok(task)
    }
}

/// One task's call, on its own task.
struct Run {
    tasks: Tasks,
    door: Door,
    caller: Caller,
    id: String,
    call: TaskCall,
    timeout: Duration,
    stop: CancellationToken,
    /// The approval request the call waited for before a restart, followed again by id.
    follow: Option<String>,
}

impl Run {
    /// Runs the call's steps ([`super::call::run`]), which start no task themselves; a call
    /// cancelled or stopped here is recorded as `cancelled` when its future is dropped.
    async fn call(self) {
        let (started, mut told) = tokio::sync::oneshot::channel();
        let (progress, mut progressed) = tokio::sync::mpsc::channel(crate::upstream::session::PROGRESS_QUEUE);
        let request = CallRequest {
            tool: self.call.tool.clone(),
            queue_as: self.caller.agent.name.clone(),
            arguments: self.call.arguments.as_deref(),
            expected_hash: self.call.expected_hash.as_deref(),
            expected_revision: self.call.expected_revision,
            timeout: Some(self.timeout),
            progress: Some(progress),
            answer: None,
            client_capabilities: None,
            // On a server that runs tasks, the call runs as one there too: its id is kept, so
            // that a restarted toolhost follows it instead of losing it.
            upstream_task: Some(UpstreamTask { ttl: self.timeout, started: Some(started) }),
        };
        // A request followed again is already kept in the task's row.
        let following = Following::new(self.tasks.inner.store.clone(), self.id.clone(), self.follow.clone());
        let call = super::call::run(&self.door, &self.caller, request, Some(&following));
        tokio::pin!(call);
        let (mut upstream, mut told_once) = (false, false);
        let mut last_progress: Option<tokio::time::Instant> = None;
        let result = loop {
            tokio::select! {
                result = &mut call => break Some(result),
                () = self.stop.cancelled() => break None,
                // The server's progress becomes the task's status message, at most once a second
                // (a write each): what a caller that looks sees of a long call.
                Some(update) = progressed.recv() => {
                    let due = last_progress.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY);
                    if due && let Some(message) = progress_message(&update) {
                        last_progress = Some(tokio::time::Instant::now());
                        if let Err(error) = self.tasks.inner.store.tasks().set_message(&self.id, &message).await {
                            tracing::debug!(task = %self.id, %error, "cannot keep a task's progress");
                        }
                    }
                }
                id = &mut told, if !told_once => {
                    told_once = true;
                    // No id: the call was not a task on its server.
                    let Ok(id) = id else { continue };
                    upstream = true;
                    if let Err(error) = self.tasks.inner.store.tasks().set_upstream(&self.id, &id).await {
                        tracing::warn!(task = %self.id, %error, "cannot keep the server's task id: a restart will not follow it");
                    }
                }
            }
        };
        // Read once the call is no longer polled: nothing moves it any more.
        let left = match following.stage() {
            _ if upstream => Left::Kept,
            Stage::Waiting => Left::Kept,
            Stage::Sent(generation) => Left::CutOff(Some(generation)),
            Stage::Before => Left::NotSent,
        };
        if result.is_none() && left == Left::Kept && self.tasks.inner.stopping.is_cancelled() {
            // The daemon stops under the call and the next start follows it again, recording
            // its outcome: the call's future, dropped when this returns, must not record it
            // as cancelled (a caller's cancellation still does).
            following.hand_on();
        }
        finish(&self.tasks, &self.id, &self.call.tool.qualified(), result, left).await;
    }
}

/// What a task's call leaves for the next start when toolhost stops under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// Followed again by the next start (its server keeps it, or it waits for an approval).
    Kept,
    /// Sent (to this generation, where known): its outcome is unknown.
    CutOff(Option<u64>),
    /// Never sent: it did not run.
    NotSent,
}

/// A task whose call a server runs as its own task, followed again after a restart.
struct Resume {
    tasks: Tasks,
    door: Door,
    task: Task,
    upstream: String,
    stop: CancellationToken,
}

impl Resume {
    async fn run(self) {
        let left = u64::try_from(expires_at(&self.task).saturating_sub(now_ms())).unwrap_or(0);
        let deadline = crate::deadline::after(Duration::from_millis(left));
        let tool = ToolRef::Qualified(self.task.qualified_name.clone());
        let result = tokio::select! {
            result = self.door.calls().resume_upstream_task(&tool, self.upstream.clone(), deadline) => Some(result),
            () = self.stop.cancelled() => None,
        };
        finish(&self.tasks, &self.task.id, &self.task.qualified_name, result, Left::Kept).await;
    }
}

/// Stored tasks as a listing shows them: those whose TTL ran out left out, each as it is given
/// the calls `running` just before they were read.
fn as_listed(tasks: Vec<Task>, running: &std::collections::HashSet<String>, now: i64) -> Vec<Task> {
    tasks
        .into_iter()
        .filter(|task| !task.status.is_terminal() || expires_at(task) >= now)
        .map(|task| {
            let was_running = running.contains(&task.id);
            as_it_is(task, was_running)
        })
        .collect()
}

/// A stored task as it is, given the calls that ran just before it was read: one stored as
/// working that no call runs was cut off by a daemon that stopped (its end could not be
/// written: a full disk at start), its outcome unknown if it was sent, else not run.
fn as_it_is(mut task: Task, was_running: bool) -> Task {
    if task.status == TaskStatus::Working && !was_running {
        let stopped = match task.sent_generation {
            Some(generation) => interrupted("toolhost stopped", &task.qualified_name, Some(generation)),
            None => not_sent(&task.qualified_name),
        };
        let failure = encode(&stopped);
        let end = stopped_end(&stopped, &failure);
        task.status = end.status;
        task.status_message = end.message.map(str::to_owned);
        task.outcome = Some(end.outcome.to_owned());
        task.failure = Some(failure);
    }
    task
}

/// Records how a task's call of `qualified` ended (`None`: it was stopped, leaving `left`),
/// and tells the waiters.
async fn finish(tasks: &Tasks, id: &str, qualified: &str, result: Option<Result<CallResult, CallError>>, left: Left) {
    let inner = &tasks.inner;
    let (failure, stopped);
    let too_large;
    let end = match &result {
        // Cancelled by its caller (already recorded).
        None if !inner.stopping.is_cancelled() => return forget(tasks, id),
        // The daemon stops, and the server keeps the task or it waits for an approval: the
        // next start follows it.
        None if left == Left::Kept => return forget(tasks, id),
        None => {
            stopped = match left {
                Left::CutOff(generation) => interrupted("toolhost stopped", qualified, generation),
                Left::Kept | Left::NotSent => not_sent(qualified),
            };
            failure = encode(&stopped);
            stopped_end(&stopped, &failure)
        }
        Some(Ok(done)) if done.outcome.input_required.is_some() => {
            failure = encode(&CallError::InvalidResult {
                server: done.server.to_string(),
                tool: done.name.clone(),
                generation: done.generation,
                message: "the server asked for input, which a task cannot give it yet; call the tool without a task".to_owned(),
            });
            TaskEnd {
                status: TaskStatus::Failed,
                message: Some("the server asked for input"),
                outcome: "input_required",
                result: None,
                failure: Some(&failure),
                ran_against: None,
            }
        }
        Some(Ok(done)) if done.raw.get().len() as u64 > inner.settings.max_result_bytes => {
            too_large = format!(
                "the result is {} bytes; a task keeps at most {} (tasks.max_result_bytes): it was not kept",
                done.raw.get().len(),
                inner.settings.max_result_bytes
            );
            failure = encode(&CallError::InvalidResult {
                server: done.server.to_string(),
                tool: done.name.clone(),
                generation: done.generation,
                message: too_large.clone(),
            });
            TaskEnd {
                status: TaskStatus::Failed,
                message: Some(&too_large),
                outcome: "result_too_large",
                result: None,
                failure: Some(&failure),
                ran_against: None,
            }
        }
        // A tool's own failure fails the task, with its result (as MCP's tasks say).
        Some(Ok(done)) => TaskEnd {
            status: if done.outcome.is_error { TaskStatus::Failed } else { TaskStatus::Completed },
            message: Some(if done.outcome.is_error { "the tool reported an error" } else { "the call completed" }),
            outcome: done.outcome.label(),
            result: Some(done.raw.get()),
            failure: None,
            ran_against: Some((done.generation, &done.definition_hash)),
        },
        Some(Err(error)) => {
            failure = encode(error);
            TaskEnd {
                status: TaskStatus::Failed,
                message: Some(match error {
                    CallError::Approval(_) => "the call did not run: its approval request did not let it",
                    _ => "the call failed",
                }),
                outcome: error.kind(),
                result: None,
                failure: Some(&failure),
                ran_against: None,
            }
        }
    };
    match inner.store.tasks().end(id, &end, now_ms()).await {
        Ok(_) => {}
        // Left working in the store: the next start ends it.
        Err(error) => tracing::error!(task = %id, %error, "cannot record a task's end"),
    }
    forget(tasks, id);
}

/// No call runs for the task any more (only now: until its end is stored, it is running, see
/// [`Tasks::as_it_is`]); its waiters look again.
fn forget(tasks: &Tasks, id: &str) {
    tasks.inner.running.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    tasks.inner.ended.send_modify(|count| *count = count.wrapping_add(1));
}

const INTERRUPTED: &str = "toolhost stopped while the call ran; its outcome is unknown and it was not retried";

/// A server's `notifications/progress` params as a status message: `progress 3/10: message`.
fn progress_message(params: &serde_json::value::RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Progress {
        progress: f64,
        #[serde(default)]
        total: Option<f64>,
        #[serde(default)]
        message: Option<String>,
    }
    let update: Progress = serde_json::from_str(params.get()).ok()?;
    let amount = match update.total {
        Some(total) => format!("progress {}/{}", update.progress, total),
        None => format!("progress {}", update.progress),
    };
    let text = match update.message {
        // Nothing done yet, nothing to count: the message alone (toolhost's own "waiting for
        // approval", a server's "starting").
        Some(message) if update.progress == 0.0 && update.total.is_none() => message,
        Some(message) => format!("{amount}: {message}"),
        None => amount,
    };
    Some(crate::door::truncate(crate::secrets::redact_owned(text), MAX_PROGRESS_MESSAGE))
}

/// The end of a task whose call toolhost stopped running with `error` (as `failure`): its
/// outcome unknown when the call was sent, else saying that it did not run.
fn stopped_end<'a>(error: &CallError, failure: &'a str) -> TaskEnd<'a> {
    let message = match error {
        CallError::SessionLost { .. } => INTERRUPTED,
        CallError::Approval(_) => "toolhost stopped while the call waited for approval, and it cannot run now: it did not run",
        _ => NOT_SENT,
    };
    TaskEnd {
        status: TaskStatus::Failed,
        message: Some(message),
        outcome: error.kind(),
        result: None,
        failure: Some(failure),
        ran_against: None,
    }
}

const NOT_SENT: &str = "toolhost stopped before the call was sent; it did not run";

/// The failure of a task whose call (of `qualified`, handed to `generation`) was cut off by
/// toolhost stopping: its outcome unknown.
fn interrupted(why: &str, qualified: &str, generation: Option<u64>) -> CallError {
    let (server, tool) = split(qualified);
    CallError::SessionLost {
        server: server.to_owned(),
        tool: tool.to_owned(),
        generation: generation.unwrap_or(0),
        detail: Some(format!("{why} while the task's call ran")),
    }
}

/// The failure of a task whose call of `qualified` toolhost stopped before it was sent.
fn not_sent(qualified: &str) -> CallError {
    let (server, tool) = split(qualified);
    CallError::Unavailable {
        server: server.to_owned(),
        tool: tool.to_owned(),
        state: ServerState::Stopped,
        reason: Some(NOT_SENT.to_owned()),
    }
}

/// A qualified name's server and tool parts (the whole name as the tool when it has none).
fn split(qualified: &str) -> (&str, &str) {
    qualified.split_once(SEPARATOR).unwrap_or(("", qualified))
}

fn encode(error: &CallError) -> String {
    serde_json::to_string(error).unwrap_or_else(|_| "null".to_owned())
}

/// The error a failed task's call came to, as the doors show a call's.
#[must_use]
pub fn failure_of(task: &Task) -> Option<CallError> {
    task.failure.as_deref().and_then(|text| serde_json::from_str(text).ok())
}

/// When the task may be forgotten (milliseconds since the epoch).
#[must_use]
pub fn expires_at(task: &Task) -> i64 {
    task.created_at_ms.saturating_add(i64::try_from(task.ttl_ms).unwrap_or(i64::MAX))
}
