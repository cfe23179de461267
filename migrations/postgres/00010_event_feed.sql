-- +goose Up
-- The event feed's commit-ordered position (models/feed.go). An event gets it
-- after its transaction commits, from the one sequencer that runs at a time,
-- so positions are contiguous and never given to an uncommitted event: a
-- reader following the feed by position cannot skip an event that committed
-- late. NULL means committed (or in flight) and not sequenced yet.
ALTER TABLE events ADD COLUMN feed_pos bigint NULL;
-- The id of the transaction that wrote the event (PostgreSQL; NULL on
-- SQLite): it bounds the sequencer's scan of the pending rows (models/feed.go,
-- sequencePostgres).
ALTER TABLE events ADD COLUMN feed_xid bigint NULL;

-- Existing events are numbered as the sequencer would number them: by the
-- running maximum of created_at within the session (so that clock skew
-- between server processes cannot put a session's seq out of order), then
-- session and seq.
UPDATE events e SET feed_pos = n.pos
FROM (
    SELECT id, row_number() OVER (ORDER BY t, session_id, seq) AS pos
    FROM (SELECT id, session_id, seq,
                 max(created_at) OVER (PARTITION BY session_id ORDER BY seq) AS t
          FROM events) x
) n
WHERE e.id = n.id;

-- Readers page by position; the unique index also makes a sequencing bug that
-- hands out a position twice fail loudly instead of corrupting the feed. The
-- pending rows stay out of it.
CREATE UNIQUE INDEX events_feed_pos_key ON events (feed_pos) WHERE feed_pos IS NOT NULL;
-- The sequencer's work list: only the rows not sequenced yet.
CREATE INDEX events_feed_pending_idx ON events (feed_xid) WHERE feed_pos IS NULL;

-- +goose Down
DROP INDEX events_feed_pending_idx;
DROP INDEX events_feed_pos_key;
ALTER TABLE events DROP COLUMN feed_xid;
ALTER TABLE events DROP COLUMN feed_pos;
