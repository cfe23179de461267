-- +goose Up
-- The feed's positions move out of events into a narrow table of their own
-- (models/feed.go). The sequencer used to give an event its position by
-- UPDATE-ing the event row: on PostgreSQL that writes a whole new version of
-- a wide row and a new entry in every index of events. Now it inserts one
-- narrow row per event here, and events are written once and never again.
--
-- pos: the feed position, contiguous from 1, given after commit by the one
-- sequencer that runs at a time. event_id: unique, so an event can never be
-- told twice. horizon: the bound of the sequencer's next scan after the
-- batch this row belongs to (every events.feed_xid below it is numbered), so
-- that a restarted process resumes its scan there instead of from 0.
-- No foreign key to events: events are never deleted, and the check would
-- cost the sequencer a lookup per event.
CREATE TABLE feed (
    pos      bigint PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    horizon  bigint NOT NULL DEFAULT 0
);
INSERT INTO feed (pos, event_id) SELECT feed_pos, id FROM events WHERE feed_pos IS NOT NULL;
-- Events left unnumbered by writers that did not set feed_xid (only scripts
-- insert without it) are scanned from 0 by the first pass.
UPDATE events SET feed_xid = 0 WHERE feed_pos IS NULL AND feed_xid IS NULL;
-- Any writer that leaves feed_xid out now gets its transaction's id, so the
-- sequencer's bounded scan finds its events too.
ALTER TABLE events ALTER COLUMN feed_xid SET DEFAULT pg_current_xact_id()::text::bigint;
-- The sequencer's scan of recent events: feed_xid >= horizon, anti-joined
-- with feed(event_id).
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
ALTER TABLE webhooks ADD COLUMN lease_expires_at timestamptz NULL;

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
ALTER TABLE events ADD COLUMN feed_pos bigint NULL;
UPDATE events e SET feed_pos = f.pos FROM feed f WHERE f.event_id = e.id;
CREATE UNIQUE INDEX events_feed_pos_key ON events (feed_pos) WHERE feed_pos IS NOT NULL;
CREATE INDEX events_feed_pending_idx ON events (feed_xid) WHERE feed_pos IS NULL;
DROP INDEX events_feed_xid_idx;
ALTER TABLE events ALTER COLUMN feed_xid DROP DEFAULT;
DROP TABLE feed;
