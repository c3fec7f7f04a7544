-- The audit trail as a hash chain: each record carries the SHA-256 of the record before it
-- (`prev_hash`) and of itself (`hash` = SHA-256 of the previous hash and the record's RFC 8785
-- canonical JSON), written in the transaction that writes the record. Records written before
-- this migration have neither and precede the chain. Checkpoints sign the chain's head with the
-- daemon's Ed25519 key, so that whoever can write the store cannot rewrite what was signed.
ALTER TABLE audit ADD COLUMN prev_hash TEXT;
ALTER TABLE audit ADD COLUMN hash TEXT;

CREATE TABLE audit_checkpoints (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id    INTEGER NOT NULL,
    head_hash    TEXT NOT NULL,
    records      INTEGER NOT NULL,
    signed_at_ms INTEGER NOT NULL,
    public_key   TEXT NOT NULL,
    signature    TEXT NOT NULL
) STRICT;
