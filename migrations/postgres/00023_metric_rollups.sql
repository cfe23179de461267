-- +goose Up
-- Metric rollups (models/metrics_rollup.go): the product metrics of every
-- closed hour, per queue ('*' for the whole system), computed once by the
-- maintenance pass with the same fold that answers a request, so that a
-- request reads these rows for the whole hours of its window and folds the
-- event log only for the partial hours at its two ends.
--
-- metric_rollups: additive counters (and maxima, names ending in _max) of an
-- hour: one row per (hour, queue, counter) that is not zero.
CREATE TABLE metric_rollups (
    bucket timestamptz NOT NULL,
    queue  text NOT NULL,
    name   text NOT NULL,
    value  bigint NOT NULL,
    PRIMARY KEY (bucket, queue, name)
);
-- metric_session_hours: the sessions with delegation activity in an hour,
-- per queue, and whether they were reworked or had an infrastructure retry
-- in it: the rework and infrastructure rates count sessions, which do not
-- add up across hours, so a window counts distinct sessions over these rows.
CREATE TABLE metric_session_hours (
    bucket     timestamptz NOT NULL,
    queue      text NOT NULL,
    session_id text NOT NULL,
    reworked   boolean NOT NULL,
    infra      boolean NOT NULL,
    PRIMARY KEY (bucket, queue, session_id)
);
-- The ends of a window ask which of their sessions the whole hours counted.
CREATE INDEX metric_session_hours_session_idx ON metric_session_hours (session_id, bucket);
-- rolled_through: every hour before it is rolled up. Empty until the first
-- pass, which backfills from the first event (no backfill here: the fold is
-- Go code, the same as the request path's).
CREATE TABLE metric_rollup_state (
    id             integer PRIMARY KEY CHECK (id = 1),
    rolled_through timestamptz NOT NULL
);

-- +goose Down
DROP TABLE metric_rollup_state;
DROP TABLE metric_session_hours;
DROP TABLE metric_rollups;
