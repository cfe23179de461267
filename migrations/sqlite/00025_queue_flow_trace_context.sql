-- +goose Up
-- Per-queue flow control (models/flow.go). SQLite has one writer: the claim
-- statement counts the queue's leased and unexpired delegations and reads the
-- token bucket in its own subquery, under the write lock, and the trigger
-- below takes the lease's token in the same statement.
CREATE TABLE queue_flow (
    queue                 text PRIMARY KEY,
    max_in_flight         integer,
    max_leases_per_second real,
    burst                 real NOT NULL DEFAULT 0,
    tokens                real NOT NULL DEFAULT 0,
    tokens_at             text NOT NULL,
    leases_granted        integer NOT NULL DEFAULT 0,
    created_by            text NOT NULL,
    updated_by            text NOT NULL,
    created_at            text NOT NULL,
    updated_at            text NOT NULL
);

-- +goose StatementBegin
CREATE TRIGGER delegations_lease_flow AFTER UPDATE OF status ON delegations
WHEN new.status = 'leased' AND old.status <> 'leased'
BEGIN
    UPDATE queue_flow SET
        tokens = max(0, min(burst, tokens + coalesce(max_leases_per_second, 0) *
            max(0, (julianday(new.updated_at) - julianday(tokens_at)) * 86400.0)) - 1),
        tokens_at = max(tokens_at, new.updated_at),
        leases_granted = leases_granted + 1
    WHERE queue = new.queue;
END;
-- +goose StatementEnd

-- W3C trace context (see the PostgreSQL migration).
ALTER TABLE events ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN tracestate text NOT NULL DEFAULT '';
ALTER TABLE delegations ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE delegations ADD COLUMN tracestate text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE delegations DROP COLUMN tracestate;
ALTER TABLE delegations DROP COLUMN traceparent;
ALTER TABLE events DROP COLUMN tracestate;
ALTER TABLE events DROP COLUMN traceparent;
DROP TRIGGER delegations_lease_flow;
DROP TABLE queue_flow;
