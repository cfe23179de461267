-- +goose Up
-- Distinct session counts of a window without COUNT(DISTINCT); see the
-- PostgreSQL migration. prev is '1970-01-01T00:00:00.000000Z' (the format
-- of every stored time) when the session had no such hour before.
CREATE TABLE metric_session_firsts (
    bucket text NOT NULL,
    queue  text NOT NULL,
    kind   text NOT NULL,
    prev   text NOT NULL,
    n      integer NOT NULL,
    PRIMARY KEY (bucket, queue, kind, prev)
);
INSERT INTO metric_session_firsts (bucket, queue, kind, prev, n)
SELECT bucket, queue, kind, COALESCE(prev, '1970-01-01T00:00:00.000000Z'), count(*)
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
