-- +goose Up
-- Signed checkpoints over the whole log (models/checkpoint.go): each one is a
-- signed note over a Merkle root of every session's (id, event count, head
-- hash), so that deleting a session or cutting the tail of its chain, which
-- the per-session hash chain cannot reveal, no longer goes unnoticed.
-- The signing key is never stored here, only the public key that signed.
CREATE TABLE checkpoints (
    seq        bigint PRIMARY KEY,
    created_at timestamptz NOT NULL,
    created_by text NOT NULL,
    sessions   bigint NOT NULL,
    events     bigint NOT NULL,
    root       text NOT NULL,
    public_key text NOT NULL,
    note       text NOT NULL
);

-- A session's (event count, head hash) as of checkpoint_seq, stored only when
-- it changed since the session's previous row: the leaves of checkpoint N are,
-- per session, its newest row with checkpoint_seq <= N. So a checkpoint writes
-- a row per session that moved, not per session. No foreign key to sessions:
-- these rows are the evidence that a deleted session existed.
CREATE TABLE checkpoint_entries (
    session_id     text NOT NULL,
    checkpoint_seq bigint NOT NULL,
    event_count    bigint NOT NULL,
    head_hash      text NOT NULL,
    PRIMARY KEY (session_id, checkpoint_seq)
);

-- +goose Down
DROP TABLE checkpoint_entries;
DROP TABLE checkpoints;
