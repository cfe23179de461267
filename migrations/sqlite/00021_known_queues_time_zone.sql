-- +goose Up
-- A hand-back or resume to a queue that has no route and no worker lease in
-- the last 7 days asks for confirmation (models/queues.go). Both questions
-- are index seeks: routes by queue, and delegations a worker leased, by
-- queue and last change.
CREATE INDEX routes_queue_idx ON routes (queue);
CREATE INDEX delegations_worked_queue_idx ON delegations (queue, updated_at) WHERE leased_by <> '';

-- A user's time zone (IANA name, '' = none): the console shows times in the
-- browser's zone; this is the fallback for pages rendered without script.
ALTER TABLE users ADD COLUMN time_zone text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE users DROP COLUMN time_zone;
DROP INDEX delegations_worked_queue_idx;
DROP INDEX routes_queue_idx;
