-- +goose Up
-- The SLA figures of the metrics (models.SLAStats), maintained in the write
-- path like the inbox's counts (00029): they read every session in human
-- hands on each metrics request (8,939 at a million events); this table
-- holds a few rows per priority and minute. Only writes that move a session
-- into, out of or within human hands touch it.
--
-- The stalled counts are not maintained: a counter per (next_step, queue)
-- is one row that every result naming a next step and every delegation of
-- that step would update, so concurrent writers of the same step would
-- queue on its lock until commit (bench cycles measured 590 cycles/s with
-- it, against 1,524 without, one run each on a slower day). They are read
-- from sessions_stalled_idx, which holds exactly those sessions.
--
-- sla_counts: the sessions in human hands with an escalation clock
-- (escalated_at set), per priority and minute of escalated_at. An SLA
-- threshold t (escalated at or before t) is the sum of the minutes before
-- t's minute plus the sessions of t's own minute, read through
-- sessions_inbox_idx: at most one minute of escalations, whatever the
-- backlog. A minute's row is deleted when it falls to zero.
CREATE TABLE sla_counts (
    priority      integer NOT NULL,
    escalated_min timestamptz NOT NULL,
    n             bigint NOT NULL,
    PRIMARY KEY (priority, escalated_min)
);

-- +goose StatementBegin
CREATE FUNCTION sla_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := TG_OP <> 'INSERT' AND coalesce(OLD.status IN ('escalated', 'human_active') AND OLD.escalated_at IS NOT NULL, false);
    entering boolean := TG_OP <> 'DELETE' AND coalesce(NEW.status IN ('escalated', 'human_active') AND NEW.escalated_at IS NOT NULL, false);
    old_min  timestamptz;
    new_min  timestamptz;
BEGIN
    -- date_bin against the Unix epoch: a minute that does not depend on the
    -- session's time zone, the one models.slaCountsSQL computes in Go.
    IF leaving THEN
        old_min := date_bin('1 minute', OLD.escalated_at, timestamptz '1970-01-01 00:00:00+00');
    END IF;
    IF entering THEN
        new_min := date_bin('1 minute', NEW.escalated_at, timestamptz '1970-01-01 00:00:00+00');
    END IF;
    -- Rows changed in key order, as inbox_counts_track does, so that two
    -- writers moving sessions between the same rows do not deadlock.
    IF leaving AND entering AND (NEW.priority, new_min) < (OLD.priority, old_min) THEN
        INSERT INTO sla_counts VALUES (NEW.priority, new_min, 1)
            ON CONFLICT (priority, escalated_min) DO UPDATE SET n = sla_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        INSERT INTO sla_counts VALUES (OLD.priority, old_min, -1)
            ON CONFLICT (priority, escalated_min) DO UPDATE SET n = sla_counts.n - 1;
        -- Unlike the inbox's, these keys are new every minute: a row that
        -- falls to zero goes, so the table keeps the size of the backlog's
        -- minutes, not of every minute that ever saw an escalation.
        DELETE FROM sla_counts WHERE priority = OLD.priority AND escalated_min = old_min AND n = 0;
    END IF;
    IF entering THEN
        INSERT INTO sla_counts VALUES (NEW.priority, new_min, 1)
            ON CONFLICT (priority, escalated_min) DO UPDATE SET n = sla_counts.n + 1;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- The WHEN clauses run in the executor without calling the functions, so a
-- write that leaves these columns alone (every worker write) costs nothing
-- more.
CREATE TRIGGER sessions_sla_counts_insert AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.status IN ('escalated', 'human_active') AND NEW.escalated_at IS NOT NULL)
    EXECUTE FUNCTION sla_counts_track();
CREATE TRIGGER sessions_sla_counts_update AFTER UPDATE OF status, priority, escalated_at ON sessions FOR EACH ROW
    WHEN ((OLD.status IN ('escalated', 'human_active') AND OLD.escalated_at IS NOT NULL)
            IS DISTINCT FROM (NEW.status IN ('escalated', 'human_active') AND NEW.escalated_at IS NOT NULL)
        OR (NEW.status IN ('escalated', 'human_active') AND NEW.escalated_at IS NOT NULL
            AND (OLD.priority, OLD.escalated_at) IS DISTINCT FROM (NEW.priority, NEW.escalated_at)))
    EXECUTE FUNCTION sla_counts_track();
CREATE TRIGGER sessions_sla_counts_delete AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active') AND OLD.escalated_at IS NOT NULL)
    EXECUTE FUNCTION sla_counts_track();

-- The backfill, after the triggers and in the same transaction (creating a
-- trigger locks out writers of sessions until commit).
INSERT INTO sla_counts (priority, escalated_min, n)
SELECT priority, date_bin('1 minute', escalated_at, timestamptz '1970-01-01 00:00:00+00'), count(*) FROM sessions
WHERE status IN ('escalated', 'human_active') AND escalated_at IS NOT NULL
GROUP BY 1, 2;

-- +goose Down
DROP TRIGGER sessions_sla_counts_delete ON sessions;
DROP TRIGGER sessions_sla_counts_update ON sessions;
DROP TRIGGER sessions_sla_counts_insert ON sessions;
DROP FUNCTION sla_counts_track();
DROP TABLE sla_counts;
