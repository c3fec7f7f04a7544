//! Tasks as the console lists them: an agent its own, an operator everyone's with filters;
//! and an operator's cancellation of any working task.

use super::{Task, TaskError, Tasks, as_listed};
use crate::access::Caller;
use crate::catalog::record::now_ms;
use crate::store::tasks::TaskFilter;

/// Tasks a listing shows at most.
pub const MAX_LISTED: u32 = 200;

impl Tasks {
    /// The tasks `caller` may see that `filter` keeps, newest first, at most [`MAX_LISTED`]: an
    /// operator's filter is as given, anyone else's is narrowed to their own tasks.
    ///
    /// # Errors
    /// [`TaskError::Store`].
    pub async fn overview(&self, caller: &Caller, mut filter: TaskFilter) -> Result<Vec<Task>, TaskError> {
        if !caller.agent.admin {
            filter.owner = Some(caller.principal());
        }
        let running = self.running_now();
        let now = now_ms();
        let tasks = self.inner.store.tasks().filtered(&filter, MAX_LISTED).await?;
        Ok(as_listed(tasks, &running, now))
    }

    /// An operator cancels anyone's working task: said so in its status message.
    ///
    /// # Errors
    /// [`TaskError::Unknown`] (also for a caller that is no operator), [`TaskError::Ended`],
    /// [`TaskError::Store`].
    pub(in crate::door) async fn cancel_as_operator(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        let unknown = || TaskError::Unknown(crate::door::truncate(id.to_owned(), 128));
        if !caller.agent.admin {
            return Err(unknown());
        }
        let task = self.inner.store.tasks().get(id).await?.ok_or_else(unknown)?;
        let message = format!("cancelled by operator {}", caller.agent.name);
        if !self.end_cancelled(&task.id, &message).await? {
            let now = self.inner.store.tasks().get(id).await?.ok_or_else(unknown)?;
            return Err(TaskError::Ended { id: now.id, status: now.status.as_str() });
        }
        self.inner.store.tasks().get(id).await?.ok_or_else(unknown)
    }
}
