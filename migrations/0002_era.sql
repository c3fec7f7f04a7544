-- The protocol era and version last found for each server, so that a legacy server does not
-- pay the server/discover probe on every reconnect, and a modern one is not sent initialize.
ALTER TABLE servers ADD COLUMN era TEXT;
ALTER TABLE servers ADD COLUMN protocol_version_seen TEXT;
