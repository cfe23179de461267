-- +goose Up
-- The format of the stored session states. The event log is the source of
-- truth and Apply derives the state from it; when a release derives more
-- (packet v2's run reasons and fact versions, escalation reason codes), the
-- binary re-projects every session from its events once and records the new
-- format here (models/reproject.go). Format 1 is every release before.
CREATE TABLE state_format (
    id      integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
INSERT INTO state_format (id, version) VALUES (1, 1);

-- +goose Down
DROP TABLE state_format;
