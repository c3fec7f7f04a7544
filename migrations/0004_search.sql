-- Full-text search over every kept tool version: a row per (server, tool, first generation),
-- with the generations it was current for, so that a search can ask for exactly the tools of
-- the generations the registry has published. Maintained in the transaction that commits a
-- generation (and pruned with history), so it is never out of step with the catalog.
CREATE TABLE search_rows (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    server           TEXT NOT NULL,
    name             TEXT NOT NULL,
    first_generation INTEGER NOT NULL,
    last_generation  INTEGER,
    UNIQUE (server, name, first_generation)
) STRICT;

CREATE INDEX search_rows_current ON search_rows(server, name, last_generation);

-- The text, by row id. Names split on '_' and case; descriptions stemmed (porter).
CREATE VIRTUAL TABLE tool_search USING fts5(
    qualified, original, title, description, properties,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
