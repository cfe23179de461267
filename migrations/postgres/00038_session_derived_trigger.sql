-- +goose Up
-- One row trigger per operation on sessions for the four tables kept from
-- them (inbox_counts 00029, sla_counts 00032, inbox_rows 00034,
-- waiting_counts 00037), instead of one per table and operation.
--
-- Why: PostgreSQL parses and prepares a row trigger's WHEN clause on each
-- execution of a statement that may fire it, before it evaluates it, and
-- every session write is a statement of one row. With four AFTER UPDATE
-- triggers, each of the three session writes of a delegate → lease →
-- result cycle parsed four clauses that none of them passed (a worker's
-- session is never in human hands): in a perf profile of `bench cycles`,
-- 5 % of the server's CPU was stringToNode under ExecARUpdateTriggers and
-- 8.5 % the AFTER UPDATE triggers altogether. One short clause (the session
-- is, or was, in human hands or waiting on input) now gates one function,
-- which applies each table's own condition, the one its trigger's WHEN
-- clause had, in the order those triggers fired (by name).
--
-- Each table's change is a function of its own taking the old and the new
-- row (before_row, after_row; NULL on insert and on delete), so that the
-- logic stays in one place.

-- +goose StatementBegin
CREATE FUNCTION inbox_counts_apply(before_row sessions, after_row sessions) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := coalesce(before_row.status IN ('escalated', 'human_active'), false);
    entering boolean := coalesce(after_row.status IN ('escalated', 'human_active'), false);
BEGIN
    -- A counter row stays locked until the writer commits. When a session
    -- moves from one tuple to another, the two rows are changed in key
    -- order, so that two writers moving sessions between the same tuples
    -- in opposite directions take the locks in the same order instead of
    -- deadlocking (a transaction moving several sessions can still meet
    -- another; Store.Write retries a deadlock).
    IF leaving AND entering AND (after_row.status, after_row.queue, after_row.priority, after_row.reason_code, after_row.assignee)
        < (before_row.status, before_row.queue, before_row.priority, before_row.reason_code, before_row.assignee) THEN
        INSERT INTO inbox_counts VALUES (after_row.status, after_row.queue, after_row.priority, after_row.reason_code, after_row.assignee, 1)
            ON CONFLICT (status, queue, priority, reason_code, assignee) DO UPDATE SET n = inbox_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        -- Zero rows stay: a later session with the same tuple updates them
        -- in place, and RepairInboxCounts drops them.
        INSERT INTO inbox_counts VALUES (before_row.status, before_row.queue, before_row.priority, before_row.reason_code, before_row.assignee, -1)
            ON CONFLICT (status, queue, priority, reason_code, assignee) DO UPDATE SET n = inbox_counts.n - 1;
    END IF;
    IF entering THEN
        INSERT INTO inbox_counts VALUES (after_row.status, after_row.queue, after_row.priority, after_row.reason_code, after_row.assignee, 1)
            ON CONFLICT (status, queue, priority, reason_code, assignee) DO UPDATE SET n = inbox_counts.n + 1;
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION inbox_rows_apply(before_row sessions, after_row sessions) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF after_row.id IS NULL OR after_row.status NOT IN ('escalated', 'human_active') THEN
        DELETE FROM inbox_rows WHERE id = before_row.id;
        RETURN;
    END IF;
    INSERT INTO inbox_rows (id, ticket_ref, goal, status, priority, state_version, current_step,
            queue, assignee, escalated_at, updated_at, reason_code, search_doc)
        VALUES (after_row.id, after_row.ticket_ref, after_row.goal, after_row.status, after_row.priority, after_row.state_version,
            after_row.current_step, after_row.queue, after_row.assignee, after_row.escalated_at, after_row.updated_at,
            after_row.reason_code, after_row.search_doc)
        ON CONFLICT (id) DO UPDATE SET ticket_ref = EXCLUDED.ticket_ref, goal = EXCLUDED.goal,
            status = EXCLUDED.status, priority = EXCLUDED.priority,
            state_version = EXCLUDED.state_version, current_step = EXCLUDED.current_step,
            queue = EXCLUDED.queue, assignee = EXCLUDED.assignee,
            escalated_at = EXCLUDED.escalated_at, updated_at = EXCLUDED.updated_at,
            reason_code = EXCLUDED.reason_code, search_doc = EXCLUDED.search_doc;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION sla_counts_apply(before_row sessions, after_row sessions) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := coalesce(before_row.status IN ('escalated', 'human_active') AND before_row.escalated_at IS NOT NULL, false);
    entering boolean := coalesce(after_row.status IN ('escalated', 'human_active') AND after_row.escalated_at IS NOT NULL, false);
    old_min  timestamptz;
    new_min  timestamptz;
BEGIN
    -- date_bin against the Unix epoch: a minute that does not depend on the
    -- session's time zone, the one models.slaCountsSQL computes in Go.
    IF leaving THEN
        old_min := date_bin('1 minute', before_row.escalated_at, timestamptz '1970-01-01 00:00:00+00');
    END IF;
    IF entering THEN
        new_min := date_bin('1 minute', after_row.escalated_at, timestamptz '1970-01-01 00:00:00+00');
    END IF;
    -- Rows changed in key order, as inbox_counts_apply does, so that two
    -- writers moving sessions between the same rows do not deadlock.
    IF leaving AND entering AND (after_row.priority, new_min) < (before_row.priority, old_min) THEN
        INSERT INTO sla_counts VALUES (after_row.priority, new_min, 1)
            ON CONFLICT (priority, escalated_min) DO UPDATE SET n = sla_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        INSERT INTO sla_counts VALUES (before_row.priority, old_min, -1)
            ON CONFLICT (priority, escalated_min) DO UPDATE SET n = sla_counts.n - 1;
        -- Unlike the inbox's, these keys are new every minute: a row that
        -- falls to zero goes, so the table keeps the size of the backlog's
        -- minutes, not of every minute that ever saw an escalation.
        DELETE FROM sla_counts WHERE priority = before_row.priority AND escalated_min = old_min AND n = 0;
    END IF;
    IF entering THEN
        INSERT INTO sla_counts VALUES (after_row.priority, new_min, 1)
            ON CONFLICT (priority, escalated_min) DO UPDATE SET n = sla_counts.n + 1;
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION waiting_counts_apply(before_row sessions, after_row sessions) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    leaving  boolean := coalesce(before_row.status = 'awaiting_input', false);
    entering boolean := coalesce(after_row.status = 'awaiting_input', false);
BEGIN
    -- Rows changed in key order, as inbox_counts_apply does, so that two
    -- writers moving sessions between the same queues do not deadlock.
    IF leaving AND entering AND after_row.queue < before_row.queue THEN
        INSERT INTO waiting_counts VALUES (after_row.queue, 1)
            ON CONFLICT (queue) DO UPDATE SET n = waiting_counts.n + 1;
        entering := false;
    END IF;
    IF leaving THEN
        -- Zero rows stay: the next question in that queue updates them in
        -- place, and RepairWaitingCounts drops them.
        INSERT INTO waiting_counts VALUES (before_row.queue, -1)
            ON CONFLICT (queue) DO UPDATE SET n = waiting_counts.n - 1;
    END IF;
    IF entering THEN
        INSERT INTO waiting_counts VALUES (after_row.queue, 1)
            ON CONFLICT (queue) DO UPDATE SET n = waiting_counts.n + 1;
    END IF;
END;
$$;
-- +goose StatementEnd

-- The dispatcher. OLD is NULL in an INSERT trigger and NEW in a DELETE
-- trigger, so one function serves the three operations; each IF is the
-- WHEN clause of the trigger it replaces (on insert and delete a change of
-- columns is implied).
-- +goose StatementBegin
CREATE FUNCTION sessions_derived_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_row sessions := CASE WHEN TG_OP <> 'INSERT' THEN OLD END;
    after_row sessions := CASE WHEN TG_OP <> 'DELETE' THEN NEW END;
    was_inbox boolean := coalesce(before_row.status IN ('escalated', 'human_active'), false);
    is_inbox  boolean := coalesce(after_row.status IN ('escalated', 'human_active'), false);
    was_sla   boolean := was_inbox AND before_row.escalated_at IS NOT NULL;
    is_sla    boolean := is_inbox AND after_row.escalated_at IS NOT NULL;
    updating  boolean := TG_OP = 'UPDATE';
BEGIN
    IF (was_inbox OR is_inbox) AND (NOT updating
            OR (before_row.status, before_row.queue, before_row.priority, before_row.reason_code, before_row.assignee)
                IS DISTINCT FROM (after_row.status, after_row.queue, after_row.priority, after_row.reason_code, after_row.assignee)) THEN
        PERFORM inbox_counts_apply(before_row, after_row);
    END IF;
    IF was_inbox OR is_inbox THEN
        PERFORM inbox_rows_apply(before_row, after_row);
    END IF;
    IF was_sla IS DISTINCT FROM is_sla
            OR (is_sla AND (before_row.priority, before_row.escalated_at) IS DISTINCT FROM (after_row.priority, after_row.escalated_at)) THEN
        PERFORM sla_counts_apply(before_row, after_row);
    END IF;
    IF coalesce(before_row.status = 'awaiting_input' OR after_row.status = 'awaiting_input', false) AND (NOT updating
            OR (before_row.status, before_row.queue) IS DISTINCT FROM (after_row.status, after_row.queue)) THEN
        PERFORM waiting_counts_apply(before_row, after_row);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER sessions_inbox_counts_insert ON sessions;
DROP TRIGGER sessions_inbox_counts_update ON sessions;
DROP TRIGGER sessions_inbox_counts_delete ON sessions;
DROP TRIGGER sessions_sla_counts_insert ON sessions;
DROP TRIGGER sessions_sla_counts_update ON sessions;
DROP TRIGGER sessions_sla_counts_delete ON sessions;
DROP TRIGGER sessions_inbox_rows_insert ON sessions;
DROP TRIGGER sessions_inbox_rows_update ON sessions;
DROP TRIGGER sessions_inbox_rows_delete ON sessions;
DROP TRIGGER sessions_waiting_counts_insert ON sessions;
DROP TRIGGER sessions_waiting_counts_update ON sessions;
DROP TRIGGER sessions_waiting_counts_delete ON sessions;
DROP FUNCTION inbox_counts_track();
DROP FUNCTION sla_counts_track();
DROP FUNCTION inbox_rows_track();
DROP FUNCTION waiting_counts_track();

-- AFTER triggers, so that inbox_rows copies search_doc as the BEFORE
-- trigger of migration 00033 computed it. The tables were exact before
-- this migration and no write of sessions can run between the drops and
-- the creates (dropping a trigger locks the table until commit), so
-- nothing needs rebuilding.
CREATE TRIGGER sessions_derived_insert AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.status IN ('escalated', 'human_active', 'awaiting_input'))
    EXECUTE FUNCTION sessions_derived_track();
CREATE TRIGGER sessions_derived_update AFTER UPDATE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active', 'awaiting_input')
        OR NEW.status IN ('escalated', 'human_active', 'awaiting_input'))
    EXECUTE FUNCTION sessions_derived_track();
CREATE TRIGGER sessions_derived_delete AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active', 'awaiting_input'))
    EXECUTE FUNCTION sessions_derived_track();

-- +goose Down
DROP TRIGGER sessions_derived_delete ON sessions;
DROP TRIGGER sessions_derived_update ON sessions;
DROP TRIGGER sessions_derived_insert ON sessions;
DROP FUNCTION sessions_derived_track();
DROP FUNCTION waiting_counts_apply(sessions, sessions);
DROP FUNCTION sla_counts_apply(sessions, sessions);
DROP FUNCTION inbox_rows_apply(sessions, sessions);
DROP FUNCTION inbox_counts_apply(sessions, sessions);

-- The functions and triggers of migrations 00029, 00032, 00034 and 00037,
-- as they left them.
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

-- +goose StatementBegin
CREATE FUNCTION inbox_rows_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.status NOT IN ('escalated', 'human_active') THEN
        DELETE FROM inbox_rows WHERE id = OLD.id;
        RETURN NULL;
    END IF;
    INSERT INTO inbox_rows (id, ticket_ref, goal, status, priority, state_version, current_step,
            queue, assignee, escalated_at, updated_at, reason_code, search_doc)
        VALUES (NEW.id, NEW.ticket_ref, NEW.goal, NEW.status, NEW.priority, NEW.state_version,
            NEW.current_step, NEW.queue, NEW.assignee, NEW.escalated_at, NEW.updated_at,
            NEW.reason_code, NEW.search_doc)
        ON CONFLICT (id) DO UPDATE SET ticket_ref = EXCLUDED.ticket_ref, goal = EXCLUDED.goal,
            status = EXCLUDED.status, priority = EXCLUDED.priority,
            state_version = EXCLUDED.state_version, current_step = EXCLUDED.current_step,
            queue = EXCLUDED.queue, assignee = EXCLUDED.assignee,
            escalated_at = EXCLUDED.escalated_at, updated_at = EXCLUDED.updated_at,
            reason_code = EXCLUDED.reason_code, search_doc = EXCLUDED.search_doc;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER sessions_inbox_rows_insert AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_rows_track();
CREATE TRIGGER sessions_inbox_rows_update AFTER UPDATE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active') OR NEW.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_rows_track();
CREATE TRIGGER sessions_inbox_rows_delete AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_rows_track();

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
