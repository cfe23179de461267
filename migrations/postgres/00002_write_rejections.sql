-- +goose Up
-- Rejected writes (stale version, fenced lease, duplicate delivery, invalid
-- input, illegal transition) leave no event, so the state conflict rate counts
-- them here: one counter per minute, reason and queue ('' when unknown),
-- incremented in batches by the metrics observer.
CREATE TABLE write_rejections (
    bucket timestamptz NOT NULL,
    reason text NOT NULL,
    queue  text NOT NULL DEFAULT '',
    count  bigint NOT NULL,
    PRIMARY KEY (bucket, reason, queue)
);

-- +goose Down
DROP TABLE write_rejections;
