-- +goose Up
-- Timers of the periodic maintenance pass, derived from the state by the
-- projection so that each pass finds due work with an index seek:
--   resume_at   a snoozed (paused with until) session wakes at this time;
--   join_due_at a parent waiting for its children times out at this time.
ALTER TABLE sessions ADD COLUMN resume_at timestamptz NULL;
ALTER TABLE sessions ADD COLUMN join_due_at timestamptz NULL;
CREATE INDEX sessions_resume_at_idx ON sessions (resume_at) WHERE resume_at IS NOT NULL;
CREATE INDEX sessions_join_due_at_idx ON sessions (join_due_at) WHERE join_due_at IS NOT NULL;
-- Parents waiting for their children, for the join catch-up pass.
CREATE INDEX sessions_waiting_children_idx ON sessions (id) WHERE status = 'waiting_children';
-- SLA breaches are looked up per session and escalation.
CREATE INDEX events_session_type_idx ON events (session_id, type, seq);

-- +goose Down
DROP INDEX events_session_type_idx;
DROP INDEX sessions_waiting_children_idx;
DROP INDEX sessions_join_due_at_idx;
DROP INDEX sessions_resume_at_idx;
ALTER TABLE sessions DROP COLUMN join_due_at;
ALTER TABLE sessions DROP COLUMN resume_at;
