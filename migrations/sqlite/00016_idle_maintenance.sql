-- +goose Up
-- The maintenance pass finds each kind of timer with an index seek on its
-- due time and never revisits rows it already handled (models/maintenance.go).
--
-- sla_breached_for is the escalated_at of the escalation whose SLA breach
-- was recorded: the partial index below holds only the escalations still
-- waiting to be judged, so breached ones drop out of every later pass, and a
-- new escalation of the same session (a new escalated_at) is pending again.
ALTER TABLE sessions ADD COLUMN sla_breached_for text NULL;
UPDATE sessions AS s SET sla_breached_for = s.escalated_at
WHERE s.status IN ('escalated', 'human_active') AND s.escalated_at IS NOT NULL
  AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.type = 'escalation.sla_breached' AND e.created_at >= s.escalated_at);
CREATE INDEX sessions_sla_pending_idx ON sessions (priority, escalated_at)
    WHERE status IN ('escalated', 'human_active') AND escalated_at IS NOT NULL AND sla_breached_for IS DISTINCT FROM escalated_at;
-- Child sessions by last write, for the join catch-up: it looks only at the
-- parents of children written since its previous look.
CREATE INDEX sessions_child_updated_idx ON sessions (updated_at) WHERE parent_id IS NOT NULL;
-- Reviewer queries start with the reviewer: "not scored by me" and "my
-- scores" probe review_scores by reviewer instead of scanning every score.
CREATE INDEX review_scores_reviewer_idx ON review_scores (reviewer, session_id, at_version);

-- +goose Down
DROP INDEX review_scores_reviewer_idx;
DROP INDEX sessions_child_updated_idx;
DROP INDEX sessions_sla_pending_idx;
ALTER TABLE sessions DROP COLUMN sla_breached_for;
