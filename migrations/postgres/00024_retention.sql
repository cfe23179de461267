-- +goose Up
-- Retention (models/retention.go): the maintenance pass deletes idempotency
-- keys older than --idempotency-key-ttl and rejection counters older than
-- --rejection-retention, in bounded batches, oldest first. Its probe asks
-- for the oldest row of each with min(time column), one index seek: the
-- rejection counters' primary key starts with their bucket already; the
-- idempotency keys get this index.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- +goose Down
DROP INDEX idempotency_keys_created_idx;
