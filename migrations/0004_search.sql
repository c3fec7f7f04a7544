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

-- The text, by row id: the names (qualified and original, split into words), the title, and
-- the description with the input schema's property names and descriptions; stemmed (porter).
-- Three columns, because ranking costs per column and per match.
CREATE VIRTUAL TABLE tool_search USING fts5(
    names, title, body,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- The ranking every search uses (ORDER BY rank): BM25 with names weighted over the title, and
-- the title over the description.
INSERT INTO tool_search (tool_search, rank) VALUES ('rank', 'bm25(4.0, 3.0, 1.0)');

-- Facts about the store itself, such as whether the search index covers every kept version.
CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
