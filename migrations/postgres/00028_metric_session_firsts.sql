-- +goose Up
-- Distinct session counts of a window without COUNT(DISTINCT)
-- (models/metrics_rollup.go). The rework and infrastructure rates count the
-- distinct sessions active (reworked, retried) in the window's whole hours;
-- over metric_session_hours that is a sort of every session-hour row of the
-- window (0.3 s for 200,000 rows). A session is counted once in [a, b) at
-- its first such hour in it: the one whose previous such hour is before a.
-- So each hour keeps, per queue and kind ('active', 'reworked', 'infra'),
-- how many sessions had it as the next such hour after prev (1970-01-01
-- when there was none), and a window's count is SUM(n) over its hours with
-- prev < a: one range of few rows per hour (sessions mostly share prev:
-- none, or the hour before).
CREATE TABLE metric_session_firsts (
    bucket timestamptz NOT NULL,
    queue  text NOT NULL,
    kind   text NOT NULL,
    prev   timestamptz NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (bucket, queue, kind, prev)
);
-- The hours rolled up already, from their session rows.
INSERT INTO metric_session_firsts (bucket, queue, kind, prev, n)
SELECT bucket, queue, kind, COALESCE(prev, '1970-01-01T00:00:00Z'::timestamptz), count(*)
FROM (
    SELECT bucket, queue, 'active' AS kind,
        LAG(bucket) OVER (PARTITION BY session_id, queue ORDER BY bucket) AS prev
    FROM metric_session_hours
    UNION ALL
    SELECT bucket, queue, 'reworked',
        LAG(bucket) OVER (PARTITION BY session_id, queue ORDER BY bucket)
    FROM metric_session_hours WHERE reworked
    UNION ALL
    SELECT bucket, queue, 'infra',
        LAG(bucket) OVER (PARTITION BY session_id, queue ORDER BY bucket)
    FROM metric_session_hours WHERE infra
) h
GROUP BY 1, 2, 3, 4;

-- +goose Down
DROP TABLE metric_session_firsts;
