-- The fleet store: what the toolhost daemons of several hosts share. Each host's own catalog
-- stays in its SQLite file; nothing here is on a host's call path.

-- Every host that ever connected, and when it was last heard from.
CREATE TABLE hosts (
    host_id      TEXT PRIMARY KEY,
    version      TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    last_seen    TIMESTAMPTZ NOT NULL
);

-- Each host's servers as it last published them. A server's identity (its URL, or its command
-- and arguments, or the operator's fleet_identity) is what makes it the same server on two hosts.
CREATE TABLE host_servers (
    host_id      TEXT NOT NULL REFERENCES hosts ON DELETE CASCADE,
    server       TEXT NOT NULL,
    identity     TEXT NOT NULL,
    state        TEXT NOT NULL,
    generation   BIGINT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (host_id, server)
);

-- The tools of each host's current generation of each server, by definition hash: two hosts
-- that see different hashes for one (identity, tool) are drift.
CREATE TABLE host_tools (
    host_id          TEXT NOT NULL,
    server           TEXT NOT NULL,
    identity         TEXT NOT NULL,
    tool             TEXT NOT NULL,
    definition_hash  TEXT NOT NULL,
    PRIMARY KEY (host_id, server, tool),
    FOREIGN KEY (host_id, server) REFERENCES host_servers ON DELETE CASCADE
);
CREATE INDEX host_tools_by_identity ON host_tools (identity, tool);

-- Operators' approvals of one definition of one tool of one server identity, made on one host
-- (its own row id there makes shipping it twice harmless), for every host.
CREATE TABLE approvals (
    id               BIGSERIAL PRIMARY KEY,
    identity         TEXT NOT NULL,
    tool             TEXT NOT NULL,
    definition_hash  TEXT NOT NULL,
    approved_by      TEXT NOT NULL,
    approved_at_ms   BIGINT NOT NULL,
    host_id          TEXT NOT NULL,
    local_id         BIGINT NOT NULL,
    UNIQUE (host_id, local_id)
);
CREATE INDEX approvals_by_identity ON approvals (identity, tool);

-- Every host's audit trail, shipped from its SQLite spool at least once; (host_id, local_id)
-- makes a batch shipped twice land once.
CREATE TABLE audit (
    host_id          TEXT NOT NULL,
    local_id         BIGINT NOT NULL,
    at_ms            BIGINT NOT NULL,
    agent            TEXT NOT NULL,
    caller           TEXT NOT NULL,
    transport        TEXT NOT NULL,
    qualified_name   TEXT NOT NULL,
    server           TEXT NOT NULL,
    tool             TEXT NOT NULL,
    generation       BIGINT NOT NULL,
    definition_hash  TEXT NOT NULL,
    outcome          TEXT NOT NULL,
    duration_us      BIGINT NOT NULL,
    arguments        TEXT,
    PRIMARY KEY (host_id, local_id)
);
CREATE INDEX audit_by_time ON audit (at_ms);
