-- +goose Up
-- Erasure (models/erase.go): one row per session whose personal data was
-- erased on request. Every event up to through_seq has its payload replaced
-- by a tombstone that keeps the SHA-256 chaining value after the payload, so
-- the hash chain still verifies; state is the scrubbed state at through_seq,
-- which replay and verify start from for the events after it.
CREATE TABLE session_erasures (
    session_id  text PRIMARY KEY,
    erasure_id  text NOT NULL,
    ticket_ref  text NOT NULL DEFAULT '',
    through_seq bigint NOT NULL,
    state       text NOT NULL,
    reason      text NOT NULL,
    erased_by   text NOT NULL,
    erased_at   timestamptz NOT NULL
);
CREATE INDEX session_erasures_ticket_idx ON session_erasures (ticket_ref);

-- +goose Down
DROP TABLE session_erasures;
