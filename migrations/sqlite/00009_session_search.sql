-- +goose Up
-- Listing and searching sessions (GET /api/v1/sessions, the console's search).
--
-- search_notes is the text of the human notes (State.Notes[].text, one per
-- line), written by the projection with the rest of the row.
ALTER TABLE sessions ADD COLUMN search_notes text NOT NULL DEFAULT '';
UPDATE sessions SET search_notes = coalesce((
    SELECT group_concat(n.value ->> '$.text', char(10) ORDER BY n.key)
    FROM json_each(sessions.state, '$.notes') AS n), '')
WHERE json_type(state, '$.notes') = 'array';

-- Word search: an FTS5 index over ticket, goal and notes, with the session
-- row as its external content (keyed by the row's rowid), kept in sync by
-- triggers so that the write path has no statement of its own. unicode61
-- splits words at every character that is not a letter or digit, as the
-- PostgreSQL index does at ASCII punctuation. The update trigger fires only
-- when a searched column changed (notes), not on every transition.
-- Should the sessions' rowids ever change (a VACUUM may renumber a table
-- without an INTEGER PRIMARY KEY), rebuild it:
--   INSERT INTO sessions_fts(sessions_fts) VALUES ('rebuild');
CREATE VIRTUAL TABLE sessions_fts USING fts5(ticket_ref, goal, search_notes,
    content='sessions', content_rowid='rowid', tokenize='unicode61');
INSERT INTO sessions_fts(sessions_fts) VALUES ('rebuild');
-- +goose StatementBegin
CREATE TRIGGER sessions_fts_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO sessions_fts(rowid, ticket_ref, goal, search_notes)
    VALUES (new.rowid, new.ticket_ref, new.goal, new.search_notes);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER sessions_fts_update AFTER UPDATE ON sessions
WHEN old.ticket_ref IS NOT new.ticket_ref OR old.goal IS NOT new.goal OR old.search_notes IS NOT new.search_notes
BEGIN
    INSERT INTO sessions_fts(sessions_fts, rowid, ticket_ref, goal, search_notes)
    VALUES ('delete', old.rowid, old.ticket_ref, old.goal, old.search_notes);
    INSERT INTO sessions_fts(rowid, ticket_ref, goal, search_notes)
    VALUES (new.rowid, new.ticket_ref, new.goal, new.search_notes);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER sessions_fts_delete AFTER DELETE ON sessions BEGIN
    INSERT INTO sessions_fts(sessions_fts, rowid, ticket_ref, goal, search_notes)
    VALUES ('delete', old.rowid, old.ticket_ref, old.goal, old.search_notes);
END;
-- +goose StatementEnd

-- Keyset pages newest first: every filter seeks an index whose trailing
-- columns are (updated_at, id), read backwards from the cursor.
CREATE INDEX sessions_updated_idx ON sessions (updated_at, id);
CREATE INDEX sessions_status_updated_idx ON sessions (status, updated_at, id);
CREATE INDEX sessions_queue_updated_idx ON sessions (queue, updated_at, id);
-- These two replace the single-column ticket_ref and parent_id indexes.
CREATE INDEX sessions_ticket_updated_idx ON sessions (ticket_ref, updated_at, id);
DROP INDEX sessions_ticket_ref_idx;
CREATE INDEX sessions_parent_updated_idx ON sessions (parent_id, updated_at, id) WHERE parent_id IS NOT NULL;
DROP INDEX sessions_parent_idx;

-- +goose Down
CREATE INDEX sessions_parent_idx ON sessions (parent_id) WHERE parent_id IS NOT NULL;
DROP INDEX sessions_parent_updated_idx;
CREATE INDEX sessions_ticket_ref_idx ON sessions (ticket_ref);
DROP INDEX sessions_ticket_updated_idx;
DROP INDEX sessions_queue_updated_idx;
DROP INDEX sessions_status_updated_idx;
DROP INDEX sessions_updated_idx;
DROP TRIGGER sessions_fts_delete;
DROP TRIGGER sessions_fts_update;
DROP TRIGGER sessions_fts_insert;
DROP TABLE sessions_fts;
ALTER TABLE sessions DROP COLUMN search_notes;
