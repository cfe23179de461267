-- +goose Up
-- Invariant 10, "only work moves the version": an audit-only event (a
-- reviewer's score, an SLA breach marker) is appended to the chain with its
-- own seq but leaves state_version where it was, so the two numbers part.
-- last_seq is the seq of the session's newest event: the write path numbers
-- the next event from it and guards its conditional update with it (two
-- events may now share a state_version, never a seq). Before this release
-- every event moved the version, so for every existing session the newest
-- seq is its state_version.
ALTER TABLE sessions ADD COLUMN last_seq bigint NOT NULL DEFAULT 0;
UPDATE sessions SET last_seq = state_version;

-- +goose Down
ALTER TABLE sessions DROP COLUMN last_seq;
