-- Where a working task's call is, for the daemon that starts next. `approval_id`: the approval
-- request the call waits for (nothing is sent before it is approved and used: the next start
-- follows the request again). `sent_generation`: the generation the call was handed to (from
-- there it may have run: the next start says its outcome is unknown, naming where).
ALTER TABLE tasks ADD COLUMN approval_id TEXT;
ALTER TABLE tasks ADD COLUMN sent_generation INTEGER;
-- Tasks an older daemon left working may have been sent: the next start says so.
UPDATE tasks SET sent_generation = 0 WHERE status = 'working' AND upstream_task IS NULL;
