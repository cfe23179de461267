-- +goose Up
-- PostgreSQL keeps a dense copy of the sessions in human hands for the
-- inbox's word search (its migration 00034); SQLite searches the inbox
-- through its FTS5 table, as before. This migration keeps the numbers of
-- both dialects in step.
SELECT 1;

-- +goose Down
SELECT 1;
