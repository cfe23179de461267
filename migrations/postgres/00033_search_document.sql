-- +goose Up
-- The word search's document, stored. Until now both search indexes were
-- expression indexes over to_tsvector(ticket_ref, goal, search_notes): every
-- session update computed the document again for each index (a session row
-- changes on every write, so no update is heap-only), and a search that
-- walks sessions newest first (a common word, where the GIN index would
-- return a share of the history to sort) computed it once more per row it
-- looked at, about 25 µs a row. The stored column is computed only when one
-- of its three inputs changes (the triggers below; they change rarely: a
-- goal is set at creation, notes are added by humans), and the indexes and
-- the search read it as it is.
--
-- models.searchDocumentSQL is the same expression (a test compares them).
ALTER TABLE sessions ADD COLUMN search_doc tsvector;

-- +goose StatementBegin
CREATE FUNCTION sessions_search_doc() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_doc := to_tsvector('simple'::regconfig,
        translate(NEW.ticket_ref || ' ' || NEW.goal || ' ' || NEW.search_notes,
            '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                '));
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- Every write sets all projection columns (models.projectionColumns), so
-- "UPDATE OF" alone would fire on every write; the WHEN clause keeps the
-- function for the writes that change the text.
CREATE TRIGGER sessions_search_doc_insert BEFORE INSERT ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_search_doc();
CREATE TRIGGER sessions_search_doc_update BEFORE UPDATE OF ticket_ref, goal, search_notes ON sessions
    FOR EACH ROW
    WHEN (OLD.ticket_ref IS DISTINCT FROM NEW.ticket_ref OR OLD.goal IS DISTINCT FROM NEW.goal
        OR OLD.search_notes IS DISTINCT FROM NEW.search_notes OR OLD.search_doc IS NULL)
    EXECUTE FUNCTION sessions_search_doc();

UPDATE sessions SET search_doc = to_tsvector('simple'::regconfig,
    translate(ticket_ref || ' ' || goal || ' ' || search_notes,
        '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                '));
ALTER TABLE sessions ALTER COLUMN search_doc SET NOT NULL;

-- The same two indexes (names and predicates unchanged), over the column.
DROP INDEX sessions_search_idx;
CREATE INDEX sessions_search_idx ON sessions USING gin (search_doc);
DROP INDEX sessions_inbox_search_idx;
CREATE INDEX sessions_inbox_search_idx ON sessions USING gin (search_doc)
    WHERE status IN ('escalated', 'human_active');

-- +goose Down
DROP INDEX sessions_inbox_search_idx;
CREATE INDEX sessions_inbox_search_idx ON sessions USING gin (to_tsvector('simple'::regconfig,
    translate(ticket_ref || ' ' || goal || ' ' || search_notes,
        '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                ')))
    WHERE status IN ('escalated', 'human_active');
DROP INDEX sessions_search_idx;
CREATE INDEX sessions_search_idx ON sessions USING gin (to_tsvector('simple'::regconfig,
    translate(ticket_ref || ' ' || goal || ' ' || search_notes,
        '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                ')));
DROP TRIGGER sessions_search_doc_update ON sessions;
DROP TRIGGER sessions_search_doc_insert ON sessions;
DROP FUNCTION sessions_search_doc();
ALTER TABLE sessions DROP COLUMN search_doc;
