-- +goose Up
-- The inbox's facet counts read the sessions in human hands once, grouped
-- by every column a filter offers (models.inboxCounts), instead of one
-- bounded count per option. This partial index holds exactly those columns
-- for exactly those sessions, so the read is an index-only scan of the
-- backlog whatever the history.
CREATE INDEX sessions_inbox_facets_idx ON sessions (status, queue, priority, reason_code, assignee)
    WHERE status IN ('escalated', 'human_active');
-- The inbox's word search: the expression of sessions_search_idx (00009,
-- models.searchDocumentPG, byte-identical) over the sessions in human hands
-- only. Over the whole table a common word matches a share of the history,
-- and every match was fetched to be dropped for its status; this index
-- holds the backlog's words only, so a search costs the backlog's matches.
CREATE INDEX sessions_inbox_search_idx ON sessions USING gin (to_tsvector('simple'::regconfig,
    translate(ticket_ref || ' ' || goal || ' ' || search_notes,
        '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~', '                                ')))
    WHERE status IN ('escalated', 'human_active');

-- +goose Down
DROP INDEX sessions_inbox_search_idx;
DROP INDEX sessions_inbox_facets_idx;
