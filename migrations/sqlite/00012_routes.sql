-- +goose Up
-- Step routes: a completed result whose next_step has a route is delegated
-- to the route's queue in the same transaction (models/routes.go). Keyed by
-- the step, so the result path reads its route with one primary-key lookup.
CREATE TABLE routes (
    step          text PRIMARY KEY,
    queue         text NOT NULL,
    instructions  text NOT NULL DEFAULT '',
    lease_seconds integer NOT NULL,
    max_attempts  integer NOT NULL,
    created_by    text NOT NULL,
    updated_by    text NOT NULL,
    created_at    text NOT NULL,
    updated_at    text NOT NULL
);

-- The session's next_step, projected from its state, so that stalled
-- sessions (open, with a next_step that has no route) are found through a
-- partial index that holds only open sessions waiting on a step, anti-joined
-- with routes' primary key: listing and counting them never scans sessions.
ALTER TABLE sessions ADD COLUMN next_step text NOT NULL DEFAULT '';
UPDATE sessions SET next_step = COALESCE(json_extract(state, '$.next_step'), '')
    WHERE state LIKE '%"next_step"%';
CREATE INDEX sessions_stalled_idx ON sessions (next_step, queue, updated_at, id)
    WHERE status = 'open' AND next_step <> '';

-- The per-queue Prometheus gauges count leased delegations by queue; the
-- expiry index has no queue, so this keeps the scrape an index-only read.
CREATE INDEX delegations_leased_queue_idx ON delegations (queue) WHERE status = 'leased';

-- +goose Down
DROP INDEX delegations_leased_queue_idx;
DROP INDEX sessions_stalled_idx;
ALTER TABLE sessions DROP COLUMN next_step;
DROP TABLE routes;
