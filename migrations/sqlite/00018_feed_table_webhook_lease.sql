-- +goose Up
-- The feed's positions move out of events into a narrow table of their own
-- (models/feed.go): the sequencer inserts one narrow row per event instead
-- of rewriting the event row, and events are written once and never again.
--
-- pos: the feed position, contiguous from 1, given after commit by the one
-- sequencer that runs at a time. event_id: unique, so an event can never be
-- told twice (no foreign key: events are never deleted). horizon: the bound
-- of the sequencer's next scan after the batch this row belongs to (every
-- event with a lower feed_xid is numbered).
CREATE TABLE feed (
    pos      integer PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    horizon  integer NOT NULL DEFAULT 0
);
INSERT INTO feed (pos, event_id) SELECT feed_pos, id FROM events WHERE feed_pos IS NOT NULL;
-- On SQLite feed_xid is the order in which events were written, which is
-- commit order (one writer at a time): the write path sets it to the
-- highest so far plus one. Unnumbered events get 0, so the first pass,
-- whose bound is 0, finds them.
UPDATE events SET feed_xid = 0 WHERE feed_pos IS NULL;
-- Writers that leave feed_xid out (scripts) get the next number too.
-- +goose StatementBegin
CREATE TRIGGER events_feed_xid AFTER INSERT ON events WHEN NEW.feed_xid IS NULL
BEGIN
    UPDATE events SET feed_xid = (SELECT coalesce(max(feed_xid), 0) + 1 FROM events) WHERE rowid = NEW.rowid;
END;
-- +goose StatementEnd
CREATE INDEX events_feed_xid_idx ON events (feed_xid);
DROP INDEX events_feed_pending_idx;
DROP INDEX events_feed_pos_key;
ALTER TABLE events DROP COLUMN feed_pos;

-- A dispatcher sends a webhook's new feed events straight from the feed and
-- records them afterwards, one row per event in their final state (web/
-- webhooks.go): it holds the webhook's page of the feed meanwhile with this
-- lease, so that two processes do not send the same page. A dispatcher that
-- dies holding it leaves the cursor where it was; the page is sent again
-- once the lease expires (at least once).
ALTER TABLE webhooks ADD COLUMN lease_token text NULL;
ALTER TABLE webhooks ADD COLUMN lease_expires_at text NULL;

-- Two indexes of sessions that no query reads any more (listing orders by
-- updated_at since 00009, and the inbox, timers and gauges have their own
-- partial indexes): a session's every write (an update of updated_at, so
-- never a HOT update on PostgreSQL) inserted an entry into each of them.
DROP INDEX sessions_status_priority_created_idx;
DROP INDEX sessions_created_idx;

-- +goose Down
CREATE INDEX sessions_created_idx ON sessions (created_at, id);
CREATE INDEX sessions_status_priority_created_idx ON sessions (status, priority, created_at, id);
ALTER TABLE webhooks DROP COLUMN lease_expires_at;
ALTER TABLE webhooks DROP COLUMN lease_token;
ALTER TABLE events ADD COLUMN feed_pos integer NULL;
UPDATE events SET feed_pos = (SELECT f.pos FROM feed f WHERE f.event_id = events.id);
CREATE UNIQUE INDEX events_feed_pos_key ON events (feed_pos) WHERE feed_pos IS NOT NULL;
CREATE INDEX events_feed_pending_idx ON events (session_id, seq) WHERE feed_pos IS NULL;
DROP INDEX events_feed_xid_idx;
DROP TRIGGER events_feed_xid;
UPDATE events SET feed_xid = NULL;
DROP TABLE feed;
