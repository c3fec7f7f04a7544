-- What each agent entry has used of each of its quotas in the current window. `quota` is the
-- quota's definition (its tool globs and period): a quota that changes starts afresh. Windows
-- are fixed, aligned to the Unix epoch (`window_index` = Unix ms / period ms), so a restart neither
-- resets nor extends them.
CREATE TABLE quota_usage (
    agent TEXT NOT NULL,
    quota TEXT NOT NULL,
    window_index INTEGER NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (agent, quota)
);
