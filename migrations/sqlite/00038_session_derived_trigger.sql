-- +goose Up
-- PostgreSQL's migration 00038 merges the row triggers that keep its
-- inbox_counts, sla_counts, inbox_rows and waiting_counts tables; SQLite has
-- none of those tables. This migration keeps the numbers of both dialects
-- in step.
SELECT 1;

-- +goose Down
SELECT 1;
