-- Tool calls run as tasks: each kept until its TTL (from creation) runs out, with its result
-- or failure, so that a caller that went away gets it by id. `owner` is the caller's principal
-- (only it sees the task); `agent` the agent entry whose limits it counts against. `result` is
-- the tool's result object byte for byte; `failure` the call's error as toolhost's own JSON.
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    agent TEXT NOT NULL,
    qualified_name TEXT NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT,
    outcome TEXT,
    result TEXT,
    failure TEXT,
    result_bytes INTEGER NOT NULL DEFAULT 0,
    -- What the call ran against, once it reached a tool.
    generation INTEGER,
    definition_hash TEXT,
    -- The server's own task id, when the server runs the call as a task: a restarted toolhost
    -- follows it instead of failing the task.
    upstream_task TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    ttl_ms INTEGER NOT NULL
);
CREATE INDEX tasks_by_owner ON tasks (owner, created_at_ms DESC, id DESC);
CREATE INDEX tasks_by_agent ON tasks (agent, status);
CREATE INDEX tasks_by_expiry ON tasks (created_at_ms + ttl_ms);
