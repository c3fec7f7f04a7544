-- Each host's audit chain as it shipped it: the chain fields of every record, and every signed
-- checkpoint of its head. A host that rewrites its own store afterwards (and signs it again)
-- no longer matches the checkpoints kept here, which it cannot change. The first public key a
-- host shipped is pinned: checkpoints signed by another key are refused by `verify --fleet`.
ALTER TABLE audit ADD COLUMN prev_hash TEXT, ADD COLUMN hash TEXT;

CREATE TABLE audit_checkpoints (
    host_id      TEXT NOT NULL,
    local_id     BIGINT NOT NULL,
    record_id    BIGINT NOT NULL,
    head_hash    TEXT NOT NULL,
    records      BIGINT NOT NULL,
    signed_at_ms BIGINT NOT NULL,
    public_key   TEXT NOT NULL,
    signature    TEXT NOT NULL,
    anchor       TEXT,
    PRIMARY KEY (host_id, local_id)
);

CREATE TABLE audit_keys (
    host_id       TEXT PRIMARY KEY,
    public_key    TEXT NOT NULL,
    first_seen_ms BIGINT NOT NULL
);
