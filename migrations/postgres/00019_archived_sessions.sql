-- +goose Up
-- Archival (models/archive.go): a closed session whose transcript was written
-- to an archive file and whose rows were then deleted. The head it had (event
-- count and last hash) lets checkpoints that recorded the session account for
-- it, and the file's SHA-256 lets `verify --archive DIR` check the file.
CREATE TABLE archived_sessions (
    session_id  text PRIMARY KEY,
    ticket_ref  text NOT NULL DEFAULT '',
    status      text NOT NULL,
    events      bigint NOT NULL,
    last_hash   text NOT NULL,
    closed_at   timestamptz NOT NULL,
    archived_at timestamptz NOT NULL,
    archived_by text NOT NULL,
    file        text NOT NULL,
    file_sha256 text NOT NULL
);
-- "What was archived for ticket T" (erasure requests) without a scan.
CREATE INDEX archived_sessions_ticket_idx ON archived_sessions (ticket_ref);

-- +goose Down
DROP TABLE archived_sessions;
