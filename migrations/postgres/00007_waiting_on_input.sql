-- +goose Up
-- The inbox's "Waiting on input" view lists the sessions in awaiting_input,
-- the longest waiting first. input_requested_at is when the session's
-- question was asked; the projection sets it on entering awaiting_input and
-- keeps it while the session waits (a pause and resume included), so the
-- view is a keyset read of this partial index, whatever the number of
-- sessions or the length of their histories.
ALTER TABLE sessions ADD COLUMN input_requested_at timestamptz NULL;
CREATE INDEX sessions_waiting_input_idx ON sessions (input_requested_at, id) WHERE status = 'awaiting_input';
-- Sessions waiting before this column existed: the time of the newest event
-- that asks (while a session waits none of them can happen again).
UPDATE sessions SET input_requested_at = COALESCE((
    SELECT e.created_at FROM events e
    WHERE e.session_id = sessions.id
      AND e.type IN ('result.needs_input', 'result.failed', 'human.requested_input')
    ORDER BY e.seq DESC LIMIT 1), updated_at)
WHERE status = 'awaiting_input' OR (status = 'paused' AND state LIKE '%"paused_from":"awaiting_input"%');

-- +goose Down
DROP INDEX sessions_waiting_input_idx;
ALTER TABLE sessions DROP COLUMN input_requested_at;
