-- +goose Up
-- The inbox's facet counts read the sessions in human hands once, grouped
-- by every column a filter offers (models.inboxCounts), instead of one
-- bounded count per option: this partial index holds exactly those columns
-- for exactly those sessions (a covering scan of the backlog). The word
-- search stays on sessions_fts.
CREATE INDEX sessions_inbox_facets_idx ON sessions (status, queue, priority, reason_code, assignee)
    WHERE status IN ('escalated', 'human_active');

-- +goose Down
DROP INDEX sessions_inbox_facets_idx;
