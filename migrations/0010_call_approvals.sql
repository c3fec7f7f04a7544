-- Calls waiting for, or bound by, a person's approval. A request binds the caller (its
-- principal), the qualified tool, the definition hash in force, the arguments as RFC 8785
-- canonical JSON (and their SHA-256), and the caller's policy revision; the call runs at most
-- once, with exactly these arguments, only while all still hold. `status` moves once from
-- `pending` (to approved, denied or expired) and once from `approved` (to used, stale or
-- expired). A plain call that stops waiting leaves a task (`task_id`) following the request.
CREATE TABLE call_approvals (
    id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    agent TEXT NOT NULL,
    caller TEXT NOT NULL,
    qualified_name TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    arguments TEXT NOT NULL,
    arguments_digest TEXT NOT NULL,
    policy_revision TEXT NOT NULL,
    status TEXT NOT NULL,
    requested_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    decided_by TEXT,
    decided_at_ms INTEGER,
    reason TEXT,
    -- The task that follows the request for a plain call that stopped waiting.
    task_id TEXT
);
CREATE INDEX call_approvals_by_status ON call_approvals (status, requested_at_ms);
CREATE INDEX call_approvals_by_call ON call_approvals (principal, qualified_name, arguments_digest, status);
