-- +goose Up
-- The inbox's facet counts, maintained in the write path (models.inboxCounts).
-- Grouping the sessions in human hands on every inbox view cost as much as
-- the backlog (8,900 sessions at a million events); this table holds one row
-- per combination of the columns the inbox's filters count by, with the
-- number of sessions in human hands that have it (400 rows at a million
-- events), so a view sums a few hundred rows whatever the backlog.
--
-- The triggers below keep it exact for every write of sessions (the command
-- path, reproject, restore, retention, erasure, hand-written SQL) in the
-- writing transaction. Their WHEN clauses are evaluated in the executor
-- without calling the function, so a write that leaves a session's tuple
-- alone (every worker write: lease, heartbeat, result outside the inbox)
-- costs nothing more and sends no statement more.
CREATE TABLE inbox_counts (
    status      text NOT NULL,
    queue       text NOT NULL,
    priority    integer NOT NULL,
    reason_code text NOT NULL,
    assignee    text NOT NULL,
    n           bigint NOT NULL,
    PRIMARY KEY (status, queue, priority, reason_code, assignee)
);

-- +goose StatementBegin
CREATE FUNCTION inbox_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := TG_OP <> 'INSERT' AND coalesce(OLD.status IN ('escalated', 'human_active'), false);
    entering boolean := TG_OP <> 'DELETE' AND coalesce(NEW.status IN ('escalated', 'human_active'), false);
BEGIN
    -- A counter row stays locked until the writer commits. When a session
    -- moves from one tuple to another, the two rows are changed in key
    -- order, so that two writers moving sessions between the same tuples
    -- in opposite directions take the locks in the same order instead of
    -- deadlocking (a transaction moving several sessions can still meet
    -- another; Store.Write retries a deadlock).
    IF leaving AND entering AND (NEW.status, NEW.queue, NEW.priority, NEW.reason_code, NEW.assignee)
        < (OLD.status, OLD.queue, OLD.priority, OLD.reason_code, OLD.assignee) THEN
        INSERT INTO inbox_counts VALUES (NEW.status, NEW.queue, NEW.priority, NEW.reason_code, NEW.assignee, 1)
            ON CONFLICT (status, queue, priority, reason_code, assignee) DO UPDATE SET n = inbox_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        -- Zero rows stay: a later session with the same tuple updates them
        -- in place, and RepairInboxCounts drops them.
        INSERT INTO inbox_counts VALUES (OLD.status, OLD.queue, OLD.priority, OLD.reason_code, OLD.assignee, -1)
            ON CONFLICT (status, queue, priority, reason_code, assignee) DO UPDATE SET n = inbox_counts.n - 1;
    END IF;
    IF entering THEN
        INSERT INTO inbox_counts VALUES (NEW.status, NEW.queue, NEW.priority, NEW.reason_code, NEW.assignee, 1)
            ON CONFLICT (status, queue, priority, reason_code, assignee) DO UPDATE SET n = inbox_counts.n + 1;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER sessions_inbox_counts_insert AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_counts_track();
CREATE TRIGGER sessions_inbox_counts_update AFTER UPDATE OF status, queue, priority, reason_code, assignee ON sessions FOR EACH ROW
    WHEN ((OLD.status IN ('escalated', 'human_active') OR NEW.status IN ('escalated', 'human_active'))
        AND (OLD.status, OLD.queue, OLD.priority, OLD.reason_code, OLD.assignee)
            IS DISTINCT FROM (NEW.status, NEW.queue, NEW.priority, NEW.reason_code, NEW.assignee))
    EXECUTE FUNCTION inbox_counts_track();
CREATE TRIGGER sessions_inbox_counts_delete AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_counts_track();

-- The backfill, after the triggers and in the same transaction: creating a
-- trigger locks out writers of sessions until commit, so no write falls
-- between the count and the triggers.
INSERT INTO inbox_counts (status, queue, priority, reason_code, assignee, n)
SELECT status, queue, priority, reason_code, assignee, count(*) FROM sessions
WHERE status IN ('escalated', 'human_active')
GROUP BY status, queue, priority, reason_code, assignee;

-- sessions_inbox_facets_idx (00027) served the grouped read these counts
-- replace; only verify and repair still group the backlog, rarely, and an
-- index no page reads is a cost on every write of a session in human hands.
DROP INDEX sessions_inbox_facets_idx;

-- +goose Down
CREATE INDEX sessions_inbox_facets_idx ON sessions (status, queue, priority, reason_code, assignee)
    WHERE status IN ('escalated', 'human_active');
DROP TRIGGER sessions_inbox_counts_delete ON sessions;
DROP TRIGGER sessions_inbox_counts_update ON sessions;
DROP TRIGGER sessions_inbox_counts_insert ON sessions;
DROP FUNCTION inbox_counts_track();
DROP TABLE inbox_counts;
