-- +goose Up
-- The count of the sessions waiting on input (models.CountWaitingOnInput),
-- maintained in the write path like the inbox's counts (00029). The inbox
-- shows it on the tab of every view and on the "Waiting on input" view,
-- and it was a bounded count over sessions_waiting_input_idx: at a million
-- events, where 4,036 sessions wait, it read 1,001 index entries (0.44 ms
-- against 0.07 at ten thousand events). This table holds one row per queue
-- with the number of sessions in awaiting_input there; a view sums them.
--
-- Per queue rather than one row: a counter row stays locked until its
-- writer commits, so one row would make every question asked and every
-- answer given anywhere wait for the one before it to commit; per queue,
-- only writers of the same queue do.
CREATE TABLE waiting_counts (
    queue text NOT NULL PRIMARY KEY,
    n     bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION waiting_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := TG_OP <> 'INSERT' AND coalesce(OLD.status = 'awaiting_input', false);
    entering boolean := TG_OP <> 'DELETE' AND coalesce(NEW.status = 'awaiting_input', false);
BEGIN
    -- Rows changed in key order, as inbox_counts_track does, so that two
    -- writers moving sessions between the same queues do not deadlock.
    IF leaving AND entering AND NEW.queue < OLD.queue THEN
        INSERT INTO waiting_counts VALUES (NEW.queue, 1)
            ON CONFLICT (queue) DO UPDATE SET n = waiting_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        -- Zero rows stay: the next question in that queue updates them in
        -- place, and RepairWaitingCounts drops them.
        INSERT INTO waiting_counts VALUES (OLD.queue, -1)
            ON CONFLICT (queue) DO UPDATE SET n = waiting_counts.n - 1;
    END IF;
    IF entering THEN
        INSERT INTO waiting_counts VALUES (NEW.queue, 1)
            ON CONFLICT (queue) DO UPDATE SET n = waiting_counts.n + 1;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- The WHEN clauses keep every other write of a session free of the
-- function call (see 00029).
CREATE TRIGGER sessions_waiting_counts_insert AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.status = 'awaiting_input')
    EXECUTE FUNCTION waiting_counts_track();
CREATE TRIGGER sessions_waiting_counts_update AFTER UPDATE OF status, queue ON sessions FOR EACH ROW
    WHEN ((OLD.status = 'awaiting_input' OR NEW.status = 'awaiting_input')
        AND (OLD.status, OLD.queue) IS DISTINCT FROM (NEW.status, NEW.queue))
    EXECUTE FUNCTION waiting_counts_track();
CREATE TRIGGER sessions_waiting_counts_delete AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.status = 'awaiting_input')
    EXECUTE FUNCTION waiting_counts_track();

-- The backfill, after the triggers and in the same transaction (see 00029).
INSERT INTO waiting_counts (queue, n)
SELECT queue, count(*) FROM sessions WHERE status = 'awaiting_input' GROUP BY queue;

-- +goose Down
DROP TRIGGER sessions_waiting_counts_delete ON sessions;
DROP TRIGGER sessions_waiting_counts_update ON sessions;
DROP TRIGGER sessions_waiting_counts_insert ON sessions;
DROP FUNCTION waiting_counts_track();
DROP TABLE waiting_counts;
