-- +goose Up
-- Every escalation carries a reason code (models.ReasonCode); the projection
-- keeps the code of the session's escalation so that the inbox can filter by
-- it. The index mirrors the inbox indexes of 00004: partial on the sessions in
-- human hands, keyed for the inbox's per-priority keyset read.
ALTER TABLE sessions ADD COLUMN reason_code text NOT NULL DEFAULT '';
CREATE INDEX sessions_inbox_reason_idx ON sessions (reason_code, priority, escalated_at, id)
    WHERE status IN ('escalated', 'human_active');
-- Sessions escalated before codes existed: the code is derived, as Apply
-- derives it, from the last event that can escalate (after an escalation no
-- such event happens until the session is delegated again, which ends it).
UPDATE sessions SET reason_code = COALESCE((
    SELECT CASE e.type
        WHEN 'result.escalated' THEN 'worker'
        WHEN 'session.escalated' THEN 'controller'
        WHEN 'delegation.lease_expired' THEN 'leases_exhausted'
        WHEN 'result.failed' THEN CASE WHEN json_extract(e.payload, '$.failure.class') = 'transient' THEN 'retries_exhausted' ELSE 'permanent_failure' END
        WHEN 'children.joined' THEN CASE WHEN json_extract(e.payload, '$.result') = 'conflict' THEN 'join_conflict' ELSE 'join_timeout' END
    END
    FROM events e
    WHERE e.session_id = sessions.id
      AND e.type IN ('result.escalated', 'session.escalated', 'delegation.lease_expired', 'result.failed', 'children.joined')
    ORDER BY e.seq DESC LIMIT 1), '')
WHERE state LIKE '%"escalation":{%';

-- +goose Down
DROP INDEX sessions_inbox_reason_idx;
ALTER TABLE sessions DROP COLUMN reason_code;
