-- +goose Up
-- A dense copy of the sessions in human hands, for the inbox's word search.
-- A search reads every inbox session it matches (the page is ordered by SLA
-- due and the facet counts group all matches), and through the partial GIN
-- index on sessions each match cost a heap page of its own: the inbox
-- sessions are a tenth of the sessions, scattered over the whole table
-- (at a million events, 1,518 matches of "refund" read 1,472 pages, 3.7 of
-- the statement's 6.7 ms). Here they sit together, a few hundred pages in
-- all, with only the columns the inbox shows and counts by.
--
-- The triggers below keep it exact in every transaction that writes
-- sessions, as inbox_counts' do; their WHEN clauses are evaluated without
-- calling the function, so a write of a session outside the inbox (every
-- worker write) costs nothing more. models.inboxRowsDriftSQL checks it
-- against the sessions (verify) and RepairInboxRows rebuilds it (migrate up).
CREATE TABLE inbox_rows (
    id            text PRIMARY KEY,
    ticket_ref    text NOT NULL,
    goal          text NOT NULL,
    status        text NOT NULL,
    priority      integer NOT NULL,
    state_version bigint NOT NULL,
    current_step  text NOT NULL,
    queue         text NOT NULL,
    assignee      text NOT NULL,
    escalated_at  timestamptz,
    updated_at    timestamptz NOT NULL,
    reason_code   text NOT NULL,
    search_doc    tsvector NOT NULL
);

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

-- AFTER triggers, so that they copy search_doc as the BEFORE trigger of
-- migration 00033 computed it.
CREATE TRIGGER sessions_inbox_rows_insert AFTER INSERT ON sessions FOR EACH ROW
    WHEN (NEW.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_rows_track();
CREATE TRIGGER sessions_inbox_rows_update AFTER UPDATE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active') OR NEW.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_rows_track();
CREATE TRIGGER sessions_inbox_rows_delete AFTER DELETE ON sessions FOR EACH ROW
    WHEN (OLD.status IN ('escalated', 'human_active'))
    EXECUTE FUNCTION inbox_rows_track();

-- The backfill, after the triggers and in the same transaction (creating a
-- trigger locks out writers of sessions until commit).
INSERT INTO inbox_rows (id, ticket_ref, goal, status, priority, state_version, current_step,
        queue, assignee, escalated_at, updated_at, reason_code, search_doc)
SELECT id, ticket_ref, goal, status, priority, state_version, current_step,
    queue, assignee, escalated_at, updated_at, reason_code, search_doc
FROM sessions WHERE status IN ('escalated', 'human_active');

-- Built after the backfill (a sorted build), and without the pending list:
-- with fastupdate every new entry goes to a list that each search reads in
-- full until a vacuum merges it (366 pages a search after the backfill of a
-- million-event database, 6 ms for a word that matches nothing); the
-- copy is written at the pace of humans, so entering the tree directly
-- costs little.
CREATE INDEX inbox_rows_search_idx ON inbox_rows USING gin (search_doc) WITH (fastupdate = off);

-- The inbox search read this partial index of sessions; nothing does now,
-- and every write of a session in human hands kept it.
DROP INDEX sessions_inbox_search_idx;

-- +goose Down
CREATE INDEX sessions_inbox_search_idx ON sessions USING gin (search_doc)
    WHERE status IN ('escalated', 'human_active');
DROP TRIGGER sessions_inbox_rows_delete ON sessions;
DROP TRIGGER sessions_inbox_rows_update ON sessions;
DROP TRIGGER sessions_inbox_rows_insert ON sessions;
DROP FUNCTION inbox_rows_track();
DROP TABLE inbox_rows;
