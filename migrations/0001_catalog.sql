-- The tool catalog: servers, their committed generations, and every enumeration's outcome.
-- Pagination cursors are never stored here: a generation is a complete tool set, nothing more.

CREATE TABLE servers (
    name                TEXT PRIMARY KEY NOT NULL,
    -- 0 until the first complete enumeration is committed.
    current_generation  INTEGER NOT NULL DEFAULT 0,
    -- Unix ms of the last complete enumeration, changed or not.
    last_verified_at_ms INTEGER,
    protocol_version    TEXT,
    server_info         TEXT
) STRICT;

-- Definitions are content-addressed: a tool that does not change between generations is stored once.
CREATE TABLE definitions (
    hash       TEXT PRIMARY KEY NOT NULL,
    definition TEXT NOT NULL
) STRICT, WITHOUT ROWID;

-- One row per (tool, definition) interval: the tool had this definition from first_generation
-- to last_generation inclusive (NULL while it is current). Writes cost O(diff), not O(tools).
CREATE TABLE tool_versions (
    server           TEXT NOT NULL REFERENCES servers(name) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    first_generation INTEGER NOT NULL,
    last_generation  INTEGER,
    hash             TEXT NOT NULL REFERENCES definitions(hash),
    PRIMARY KEY (server, name, first_generation)
) STRICT, WITHOUT ROWID;

CREATE INDEX tool_versions_current ON tool_versions(server, last_generation);

CREATE TABLE generations (
    server          TEXT NOT NULL REFERENCES servers(name) ON DELETE CASCADE,
    generation      INTEGER NOT NULL,
    committed_at_ms INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    tool_count      INTEGER NOT NULL,
    -- JSON arrays of tool names.
    added           TEXT NOT NULL,
    removed         TEXT NOT NULL,
    changed         TEXT NOT NULL,
    PRIMARY KEY (server, generation)
) STRICT, WITHOUT ROWID;

CREATE TABLE enumerations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    server        TEXT NOT NULL REFERENCES servers(name) ON DELETE CASCADE,
    started_at_ms INTEGER NOT NULL,
    duration_ms   INTEGER NOT NULL,
    -- initial | list_changed | reconnect | manual | stale_tool
    reason        TEXT NOT NULL,
    -- committed | unchanged | failed | superseded
    outcome       TEXT NOT NULL,
    pages         INTEGER NOT NULL,
    tools         INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,
    -- The server's current generation once this enumeration ended.
    generation    INTEGER NOT NULL,
    error         TEXT,
    -- JSON array of notes about skipped entries.
    diagnostics   TEXT NOT NULL
) STRICT;

CREATE INDEX enumerations_by_server ON enumerations(server, id);
