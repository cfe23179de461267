-- +goose Up
-- PostgreSQL's migration 00039 compresses long text columns with lz4;
-- SQLite does not compress values. This migration keeps the numbers of both
-- dialects in step.
SELECT 1;

-- +goose Down
SELECT 1;
