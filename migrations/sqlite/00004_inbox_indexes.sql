-- +goose Up
-- The console inbox lists sessions in human hands, most urgent first, by
-- keyset over (priority, escalated_at, id). These partial indexes cover only
-- the escalated and human_active rows, so they stay small however many
-- sessions have finished, and each common filter seeks instead of scanning.
CREATE INDEX sessions_inbox_idx ON sessions (priority, escalated_at, id)
    WHERE status IN ('escalated', 'human_active');
CREATE INDEX sessions_inbox_status_idx ON sessions (status, priority, escalated_at, id)
    WHERE status IN ('escalated', 'human_active');
CREATE INDEX sessions_inbox_assignee_idx ON sessions (assignee, priority, escalated_at, id)
    WHERE status IN ('escalated', 'human_active');
CREATE INDEX sessions_inbox_queue_idx ON sessions (queue, priority, escalated_at, id)
    WHERE status IN ('escalated', 'human_active');

-- +goose Down
DROP INDEX sessions_inbox_queue_idx;
DROP INDEX sessions_inbox_assignee_idx;
DROP INDEX sessions_inbox_status_idx;
DROP INDEX sessions_inbox_idx;
