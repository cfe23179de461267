-- +goose Up
-- The full state of a session moves out of the sessions row into a table of
-- its own, as on PostgreSQL (see migrations/postgres/00020): the row the
-- lists read stays narrow. SQLite rewrites a row in place, so the gain here
-- is only that list queries no longer page through the states.
CREATE TABLE session_states (
    session_id text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    -- The session's latest valid state (canonical JSON, models.EncodeState);
    -- verify compares it byte for byte with the replayed state.
    state      text NOT NULL
);
INSERT INTO session_states (session_id, state) SELECT id, state FROM sessions;
ALTER TABLE sessions DROP COLUMN state;

-- +goose Down
ALTER TABLE sessions ADD COLUMN state text NOT NULL DEFAULT '';
UPDATE sessions SET state = (SELECT ss.state FROM session_states ss WHERE ss.session_id = sessions.id);
DROP TABLE session_states;
