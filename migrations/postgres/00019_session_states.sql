-- +goose Up
-- The full state of a session moves out of the sessions row into a table of
-- its own (models/write.go). Every write moves updated_at, which seven
-- indexes of sessions read, so a session update is never a heap-only (HOT)
-- update: each one writes a new row version. With the state inline that
-- version was about 1.5 kB, a page held five and had no room for the next,
-- so every write extended the table with a new page's worth of dead rows
-- until a vacuum ran. Now the sessions row keeps the projection columns the
-- lists read (a few hundred bytes, pages filled to 80% so that the next
-- version of a row fits beside it once page pruning has removed the old one)
-- and session_states holds the state under a primary key that never
-- changes: its updates are HOT, and with pages half full the new version
-- goes on the same page and pruning reclaims the old one, vacuum or not.
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
