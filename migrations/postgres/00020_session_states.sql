-- +goose Up
-- The full state of a session moves out of the sessions row into a table of
-- its own (models/write.go). Every write moves updated_at, which seven
-- indexes of sessions read, so a session update is never a heap-only (HOT)
-- update: each one writes a new row version. With the state inline that
-- version was about 1.5 kB and every write copied the state into the table
-- every list reads. Now the sessions row keeps the projection columns the
-- lists read (about 340 bytes; pages filled to 80% so that the next version
-- of a row can go beside it once pruning removed an old one), and
-- session_states holds the state under a primary key that never changes:
-- its updates are HOT while the page has room (half of it is kept free).
-- Measured sizes, with and without vacuum: README, "Storage".
CREATE TABLE session_states (
    session_id text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    -- The session's latest valid state (canonical JSON, models.EncodeState);
    -- verify compares it byte for byte with the replayed state.
    state      text NOT NULL
) WITH (fillfactor = 50);
INSERT INTO session_states (session_id, state) SELECT id, state FROM sessions;
ALTER TABLE sessions DROP COLUMN state;
ALTER TABLE sessions SET (fillfactor = 80);

-- +goose Down
ALTER TABLE sessions RESET (fillfactor);
ALTER TABLE sessions ADD COLUMN state text NOT NULL DEFAULT '';
UPDATE sessions s SET state = ss.state FROM session_states ss WHERE ss.session_id = s.id;
ALTER TABLE sessions ALTER COLUMN state DROP DEFAULT;
DROP TABLE session_states;
