-- A checkpoint also signs where the chain starts (the hash its first kept record follows, as
-- retention left it): records removed from the start, with the stored cut moved to match, no
-- longer verify. Checkpoints signed before this migration have none and are checked as before.
ALTER TABLE audit_checkpoints ADD COLUMN anchor TEXT;
