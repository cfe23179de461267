-- +goose Up
-- Per-queue flow control (models/flow.go): a row per queue that has limits.
-- The claim statement locks the queue's row, counts the queue's leased and
-- unexpired delegations through taskpilots_queue_in_flight (VOLATILE, so it
-- reads with a snapshot taken after the lock, not the statement's), draws
-- from the token bucket and writes the row back when it granted a lease:
-- every grant changes the row, so a claim that waited for the lock re-reads
-- it (EvalPlanQual) and recounts. A queue without a row (or with both limits
-- NULL) is claimed exactly as before, by the same one statement.
CREATE TABLE queue_flow (
    queue                 text PRIMARY KEY,
    max_in_flight         integer,
    max_leases_per_second double precision,
    burst                 double precision NOT NULL DEFAULT 0,
    tokens                double precision NOT NULL DEFAULT 0,
    tokens_at             timestamptz NOT NULL,
    leases_granted        bigint NOT NULL DEFAULT 0,
    created_by            text NOT NULL,
    updated_by            text NOT NULL,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION taskpilots_queue_in_flight(q text, at timestamptz) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT count(*) FROM delegations WHERE queue = q AND status = 'leased' AND lease_expires_at > at
$$;
-- +goose StatementEnd

-- W3C trace context: the traceparent and tracestate of the API request that
-- caused an event, and of the one that created a delegation (handed to the
-- worker with its lease). Metadata: not in the hash chain.
ALTER TABLE events ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN tracestate text NOT NULL DEFAULT '';
ALTER TABLE delegations ADD COLUMN traceparent text NOT NULL DEFAULT '';
ALTER TABLE delegations ADD COLUMN tracestate text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE delegations DROP COLUMN tracestate;
ALTER TABLE delegations DROP COLUMN traceparent;
ALTER TABLE events DROP COLUMN tracestate;
ALTER TABLE events DROP COLUMN traceparent;
DROP FUNCTION taskpilots_queue_in_flight(text, timestamptz);
DROP TABLE queue_flow;
