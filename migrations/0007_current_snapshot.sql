-- Each server's current generation packed into one blob, written in the same transaction as the
-- generation itself: a restart reads the whole catalog with one sequential scan instead of
-- joining and re-encoding every current tool version. A snapshot whose generation is not the
-- server's current one, or that does not decode (length-prefixed, with a checksum), is ignored
-- and the tool versions are read instead: it is a cache of them, never the source of truth.
CREATE TABLE current_snapshots (
    server      TEXT PRIMARY KEY NOT NULL REFERENCES servers(name) ON DELETE CASCADE,
    generation  INTEGER NOT NULL,
    tools       BLOB NOT NULL
) STRICT;
