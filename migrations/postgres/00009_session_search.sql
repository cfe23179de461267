-- +goose Up
-- Listing and searching sessions (GET /api/v1/sessions, the console's search).
--
-- search_notes is the text of the human notes (State.Notes[].text, one per
-- line), written by the projection with the rest of the row, so that notes
-- are searchable without parsing the state JSON on every write.
ALTER TABLE sessions ADD COLUMN search_notes text NOT NULL DEFAULT '';
UPDATE sessions SET search_notes = coalesce((
    SELECT string_agg(n.value ->> 'text', E'\n' ORDER BY n.ordinality)
    FROM jsonb_array_elements(sessions.state::jsonb -> 'notes') WITH ORDINALITY AS n(value, ordinality)), '')
WHERE state LIKE '%"notes":[%';

-- Word search: an expression GIN index over ticket, goal and notes, so the
-- write path maintains it with no statement of its own. ASCII punctuation
-- becomes a space before parsing, so that "T-1182" is the words t and 1182
-- on both dialects (FTS5's unicode61 splits the same way); the 'simple'
-- configuration lowercases and neither stems nor drops stop words.
-- models.searchDocument must stay byte-identical to this expression, or the
-- planner will not match the index.
CREATE INDEX sessions_search_idx ON sessions USING gin (to_tsvector('simple'::regconfig,
    translate(ticket_ref || ' ' || goal || ' ' || search_notes,
        '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                ')));

-- Keyset pages newest first: every filter seeks an index whose trailing
-- columns are (updated_at, id), read backwards from the cursor.
CREATE INDEX sessions_updated_idx ON sessions (updated_at, id);
CREATE INDEX sessions_status_updated_idx ON sessions (status, updated_at, id);
CREATE INDEX sessions_queue_updated_idx ON sessions (queue, updated_at, id);
-- These two replace the single-column ticket_ref and parent_id indexes,
-- which they serve as well (equality on the leading column).
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
DROP INDEX sessions_search_idx;
ALTER TABLE sessions DROP COLUMN search_notes;
