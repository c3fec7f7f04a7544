-- Tool-definition integrity: who approved which definition of a tool, and when. The latest row
-- per (server, name) is the approved definition; older rows are its history (bounded per tool).
-- Definition hashes are SHA-256 over the RFC 8785 (JCS) form from this version on: the daemon
-- rehashes stored definitions once at start (store_meta 'definition_hash' = 'jcs-sha256').
CREATE TABLE approvals (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    server         TEXT NOT NULL,
    name           TEXT NOT NULL,
    hash           TEXT NOT NULL,
    -- The operator (agent entry and identity), or the policy that accepted it.
    approved_by    TEXT NOT NULL,
    approved_at_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX approvals_by_tool ON approvals(server, name, id);
