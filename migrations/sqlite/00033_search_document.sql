-- +goose Up
-- PostgreSQL stores the word search's document in sessions.search_doc (see
-- its migration 00033). SQLite's search is the FTS5 table sessions_fts,
-- which already holds its document; nothing changes here. The migration
-- exists so that both dialects share their version numbers.
SELECT 1;

-- +goose Down
SELECT 1;
