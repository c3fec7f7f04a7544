-- The audit trail: one row per tool call (or refused call), kept for a bounded time and count.
-- Arguments are kept only when an operator opts in per server (their hash, or the text).
CREATE TABLE audit (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms           INTEGER NOT NULL,
    agent           TEXT NOT NULL,
    caller          TEXT NOT NULL,
    transport       TEXT NOT NULL,
    qualified_name  TEXT NOT NULL,
    server          TEXT NOT NULL,
    tool            TEXT NOT NULL,
    generation      INTEGER NOT NULL,
    definition_hash TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    duration_us     INTEGER NOT NULL,
    arguments       TEXT
) STRICT;

CREATE INDEX audit_by_time ON audit(at_ms);
CREATE INDEX audit_by_agent ON audit(agent, at_ms);
